"""The rollout engine's shared prefix (`batch.prefix_multiple`): computed once per batch, the
same logits and samples as whole prompts.

  .venv/bin/python -m pytest tests/carr_jax/test_engine_prefix.py -q
"""
import asyncio
import dataclasses

import jax
import numpy as np
import pytest

from carr_jax.model import decode as D
from carr_jax.model.engine import JaxEngine, prompt_prefix_length
from rollout.engines.base import SamplingParams
from tests.carr_jax.test_decode import _forward_jit, tiny_setup
from tests.carr_jax.test_jax_engine import gather


def test_prompt_prefix_length_stops_at_a_difference_and_rounds_down():
  head = list(range(100, 120))  # 20 shared tokens
  assert prompt_prefix_length([head + [1, 2], head + [3]], 8) == 16
  assert prompt_prefix_length([head + [1, 2], head + [3]], 4) == 20
  assert prompt_prefix_length([head + [1], head[:9] + [0] + head[10:]], 4) == 8  # differs at 9
  assert prompt_prefix_length([head + [1], head + [3]], 0) == 0  # off
  # Every prompt keeps at least one token of its own: a prompt that is all prefix.
  assert prompt_prefix_length([head, head + [5, 6]], 4) == 16
  assert prompt_prefix_length([head, head], 1) == 19
  assert prompt_prefix_length([head + [7]], 8) == 16  # one prompt: all but its last token


@pytest.mark.parametrize("name,attention", [("tiny_dense", "blockwise"),
                                            ("tiny_dense", "dense"), ("tiny_moe", "blockwise")])
def test_prefix_prefill_then_decode_equals_full_forward(name, attention):
  """P shared tokens, then rows of 1 to 9 tokens right-padded to 12: prefill and
  teacher-forced decoding give the logits of the whole rows' forward pass, at every step."""
  cfg, params = tiny_setup(name)
  cfg = dataclasses.replace(cfg, attention=attention)
  rng = np.random.default_rng(2)
  p, lengths, steps = 8, np.array([3, 9, 6, 1], np.int32), 5
  prefix = rng.integers(0, cfg.vocab_size, p).astype(np.int32)
  seqs = [rng.integers(0, cfg.vocab_size, n + steps).astype(np.int32) for n in lengths]
  prompts = np.zeros((4, 12), np.int32)
  for b, n in enumerate(lengths):
    prompts[b, :n] = seqs[b][:n]

  cache = {**D.init_cache(cfg, 4, 12 + steps), **D.prefill_prefix(params, cfg, prefix)}
  logits, cache = jax.jit(D.prefill, static_argnums=1)(params, cfg, prompts, lengths, cache)
  got = [np.asarray(logits)]
  step = jax.jit(D.decode_step, static_argnums=1)
  for i in range(steps):
    logits, cache = step(params, cfg, np.array([s[n + i] for s, n in zip(seqs, lengths)]), cache)
    got.append(np.asarray(logits))
  np.testing.assert_array_equal(cache["lengths"], lengths + steps)
  assert cache["k"].shape[3] == 12 + steps  # the rows' cache holds no prefix column

  full_len = p + 12 + steps
  tokens = np.zeros((4, full_len), np.int32)
  segments = np.zeros((4, full_len), np.int32)
  for b, s in enumerate(seqs):
    tokens[b, :p + len(s)], segments[b, :p + len(s)] = np.concatenate([prefix, s]), 1
  positions = np.broadcast_to(np.arange(full_len), (4, full_len))
  want = np.asarray(_forward_jit(params, cfg, tokens, positions, segments))
  for i, logits in enumerate(got):
    for b, n in enumerate(lengths):
      np.testing.assert_allclose(logits[b], want[b, p + n - 1 + i], atol=1e-5, rtol=0,
                                 err_msg=f"step {i} row {b}")


@pytest.fixture(scope="module")
def tiny():
  return tiny_setup("tiny_dense")


SYSTEM = list(range(200, 213))  # 13 tokens every prompt begins with
PROMPTS = [SYSTEM + [5, 17, 300], SYSTEM + [1, 2, 3, 4, 5, 6, 7, 8, 9], SYSTEM + [42]]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_engine_with_a_shared_prefix_samples_what_whole_prompts_do(tiny, temperature):
  cfg, params = tiny
  sp = SamplingParams(temperature=temperature, max_new_tokens=8, stop_token_ids=())
  rids = ["a/0/0", "a/1/0", "b/0/1"]

  def sample(engine):
    async def go():
      return await asyncio.gather(*(engine.generate(p, sp, r) for p, r in zip(PROMPTS, rids)))
    return asyncio.run(go()), engine.prefix_lengths

  whole, whole_p = sample(JaxEngine(params, cfg, max_batch=4, seed=5))
  shared, shared_p = sample(JaxEngine(params, cfg, max_batch=4, seed=5, prefix_multiple=4))
  assert (whole_p, shared_p) == ([0], [12])
  for a, b in zip(whole, shared):
    assert a.output_ids == b.output_ids and a.prompt_tokens == b.prompt_tokens
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5, rtol=0)


def test_engine_without_a_shared_prefix_computes_whole_prompts(tiny):
  cfg, params = tiny
  engine = JaxEngine(params, cfg, max_batch=4, prefix_multiple=4)
  greedy = SamplingParams(temperature=0.0, max_new_tokens=4, stop_token_ids=())
  other = [PROMPTS[0], [7] + SYSTEM]  # the second differs at its first token
  gather(engine, other, [greedy] * 2)
  gather(engine, PROMPTS[:1], [greedy])  # alone: all but its last token, rounded down
  assert engine.prefix_lengths == [0, 12]
  with pytest.raises(ValueError, match="prefix_multiple"):
    JaxEngine(params, cfg, prefix_multiple=-1)
