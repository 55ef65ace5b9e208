"""Module fixtures of the agent-loop tests: the real Qwen3 tokenizer's chat format, a small
synthetic world, its BM25 corpus (what the real `BrowserSession` reads) and one record."""
from __future__ import annotations

import pytest

from lab.world import build_world
from rollout import chat
from tests.carr_jax.test_tokenizer import qwen3_tokenizer


@pytest.fixture(scope="module")
def fmt():
  return chat.ChatFormat(qwen3_tokenizer())


@pytest.fixture(scope="module")
def world():
  return build_world(3, 200, 12)


@pytest.fixture(scope="module")
def backend(world):
  return world.corpus_backend()


@pytest.fixture(scope="module")
def record(world):
  return world.train[0]
