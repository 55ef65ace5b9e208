"""The real Qwen3 tokenizer, fetched offline-style by scripts/fetch_tokenizer.py.

Run: python -m pytest tests/carr_jax/test_tokenizer.py -q
`qwen3_tokenizer_dir()` is the helper the other tests use: it runs the fetch script once per
session (idempotent, ~4 s the first time) and skips with the reason when PyPI is unreachable.
"""
from __future__ import annotations

import functools
import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

# Qwen3's special-token ids: the ids the rollout, the template and the trainer rely on.
SPECIAL_IDS = {
    "<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
    "<tool_call>": 151657, "</tool_call>": 151658,
    "<tool_response>": 151665, "</tool_response>": 151666,
    "<think>": 151667, "</think>": 151668,
}


@functools.cache
def _fetch() -> tuple[pathlib.Path | None, str]:
  """(tokenizer dir, "") or (None, why not); cached so a missing network costs one attempt."""
  proc = subprocess.run([sys.executable, str(REPO / "scripts" / "fetch_tokenizer.py")],
                        capture_output=True, text=True, timeout=300)
  if proc.returncode != 0:
    return None, proc.stderr.strip()[-300:]
  return pathlib.Path(proc.stdout.strip().splitlines()[-1]), ""


def qwen3_tokenizer_dir() -> pathlib.Path:
  path, why = _fetch()
  if path is None:
    pytest.skip(f"Qwen3 tokenizer not available (scripts/fetch_tokenizer.py needs PyPI): {why}")
  return path


@functools.cache
def qwen3_tokenizer():
  from transformers import AutoTokenizer
  return AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()))


def test_fetch_is_idempotent_and_writes_thinking_template():
  first = qwen3_tokenizer_dir()
  mtime = (first / "tokenizer_config.json").stat().st_mtime_ns
  proc = subprocess.run([sys.executable, str(REPO / "scripts" / "fetch_tokenizer.py")],
                        capture_output=True, text=True, check=True)
  assert pathlib.Path(proc.stdout.strip()) == first
  assert (first / "tokenizer_config.json").stat().st_mtime_ns == mtime  # not rewritten
  config = json.loads((first / "tokenizer_config.json").read_text())
  template = (REPO / "rollout" / "templates" / "qwen3_thinking.jinja").read_text()
  assert config["chat_template"] == template
  assert config["eos_token"] == "<|im_end|>" and config["pad_token"] == "<|endoftext|>"


@pytest.mark.parametrize("token,expected_id", sorted(SPECIAL_IDS.items()))
def test_special_tokens_encode_and_decode(token, expected_id):
  tok = qwen3_tokenizer()
  assert tok.convert_tokens_to_ids(token) == expected_id
  # Inside running text the token is still one id, not split into characters.
  ids = tok.encode(f"a{token}b", add_special_tokens=False)
  assert expected_id in ids and len(ids) == 3
  assert tok.decode([expected_id]) == token


def test_loads_as_fast_tokenizer_with_qwen3_vocab():
  from transformers import PreTrainedTokenizerFast
  tok = qwen3_tokenizer()
  assert len(tok) == 151669  # 151,643 BPE tokens + 26 added tokens
  assert tok.eos_token_id == 151645 and tok.pad_token_id == 151643
  fast = PreTrainedTokenizerFast(tokenizer_file=str(qwen3_tokenizer_dir() / "tokenizer.json"))
  text = "Search: Who founded the Ümlaut Society in 1887?\n<tool_call>\n{\"a\": 1}\n</tool_call>"
  assert fast.encode(text) == tok.encode(text, add_special_tokens=False)
  assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
  assert tok.encode("", add_special_tokens=False) == []
  assert tok.encode("hello", add_special_tokens=True) == tok.encode("hello",
                                                                    add_special_tokens=False)


def test_write_atomic_leaves_a_concurrent_writers_temp_file_alone(tmp_path):
  """Two lanes fetching at once: one's rename must not take the other's temp file."""
  from carr_jax.model.tokenizer import write_atomic
  dest = tmp_path / "tokenizer.json"
  others = [tmp_path / "tokenizer.json.part", dest.with_suffix(".json.part")]
  for other in others:
    other.write_bytes(b"another process, mid-write")
  write_atomic(dest, b"ours")
  assert dest.read_bytes() == b"ours"
  for other in others:
    assert other.read_bytes() == b"another process, mid-write"
  assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
      {dest.name, *(o.name for o in others)})


def test_write_atomic_from_many_threads_at_once(tmp_path):
  import concurrent.futures
  import threading
  from carr_jax.model.tokenizer import write_atomic
  dest = tmp_path / "tokenizer_config.json"
  barrier = threading.Barrier(8)

  def write(i: int) -> None:
    barrier.wait()
    write_atomic(dest, b"x" * 4096)

  with concurrent.futures.ThreadPoolExecutor(8) as pool:
    list(pool.map(write, range(8)))  # re-raises any writer's error
  assert dest.read_bytes() == b"x" * 4096
  assert [p.name for p in tmp_path.iterdir()] == [dest.name]
