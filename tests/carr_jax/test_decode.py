"""KV-cache prefill/decode against the full forward pass, and the sampler's kept sets.

  .venv/bin/python -m pytest tests/carr_jax/test_decode.py -q
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from carr_jax.model import decode as D
from carr_jax.model import qwen3 as M
from carr_jax.model.config import get_preset
from carr_jax.model.sharding import path_str


_init_jit = jax.jit(M.init_params, static_argnums=0)  # eager Flax init is ~10x slower
_forward_jit = jax.jit(M.forward_logits, static_argnums=1)
_sample_jit = jax.jit(D.sample_tokens)


def tiny_setup(name, seed=0, **overrides):
  """Tiny random model with norm scales away from 1 (norm-order bugs cannot hide)."""
  cfg = get_preset(name, vocab_size=512, **overrides)
  rng = np.random.default_rng(seed + 100)

  def perturb(path, leaf):
    if "norm" in path_str(path):
      return leaf + 0.3 * jnp.asarray(rng.standard_normal(leaf.shape), leaf.dtype)
    return leaf
  params = _init_jit(cfg, jax.random.key(seed))
  return cfg, jax.tree_util.tree_map_with_path(perturb, params)


@pytest.mark.parametrize("name", ["tiny_dense", "tiny_moe"])
def test_prefill_then_decode_equals_full_forward(name):
  cfg, params = tiny_setup(name)
  rng = np.random.default_rng(1)
  lengths = np.array([3, 9, 6, 1], np.int32)
  prompt_len, steps = 12, 5
  seqs = [rng.integers(0, cfg.vocab_size, n + steps).astype(np.int32) for n in lengths]
  prompts = np.zeros((4, prompt_len), np.int32)
  for b, n in enumerate(lengths):
    prompts[b, :n] = seqs[b][:n]

  cache = D.init_cache(cfg, 4, prompt_len + steps)
  logits, cache = jax.jit(D.prefill, static_argnums=1)(params, cfg, prompts, lengths, cache)
  got = [np.asarray(logits)]
  step = jax.jit(D.decode_step, static_argnums=1)
  for i in range(steps):  # teacher-forced: feed the known next token of every row
    logits, cache = step(params, cfg, np.array([s[n + i] for s, n in zip(seqs, lengths)]), cache)
    got.append(np.asarray(logits))
  np.testing.assert_array_equal(cache["lengths"], lengths + steps)

  full_len = prompt_len + steps
  tokens = np.zeros((4, full_len), np.int32)
  segments = np.zeros((4, full_len), np.int32)
  for b, s in enumerate(seqs):
    tokens[b, :len(s)], segments[b, :len(s)] = s, 1
  positions = np.broadcast_to(np.arange(full_len), (4, full_len))
  want = np.asarray(_forward_jit(params, cfg, tokens, positions, segments))
  for i, logits in enumerate(got):
    for b, n in enumerate(lengths):
      np.testing.assert_allclose(logits[b], want[b, n - 1 + i], atol=1e-5, rtol=0,
                                 err_msg=f"step {i} row {b}")


def _draw(logits_row, rows, temperature, top_p, top_k):
  """`rows` independent draws from one constructed distribution."""
  logits = jnp.broadcast_to(jnp.asarray(logits_row, jnp.float32), (rows, len(logits_row)))
  keys = jax.vmap(jax.random.key)(jnp.arange(rows))
  full = lambda v, dt: jnp.full((rows,), v, dt)
  tokens, logprobs = _sample_jit(
      logits, keys, full(temperature, jnp.float32), full(top_p, jnp.float32),
      full(top_k, jnp.int32))
  return np.asarray(tokens), np.asarray(logprobs)


PROBS = np.array([0.5, 0.3, 0.15, 0.04, 0.01])


@pytest.mark.parametrize("temperature,top_p,top_k,kept", [
    (1.0, 0.7, -1, [0, 1]),        # mass above token 2 is 0.8 > 0.7
    (1.0, 0.85, -1, [0, 1, 2]),
    (1.0, 1.0, 2, [0, 1]),
    (1.0, 0.9, 1, [0]),
    # Top-p acts on the temperature-scaled distribution: at T=2 the probabilities are
    # ~[.38, .29, .21, .10, .05] and token 2 sits under 0.7 of mass above it.
    (2.0, 0.7, -1, [0, 1, 2]),
    (1.0, 1.0, -1, [0, 1, 2, 3, 4]),
])
def test_sampler_draws_only_from_the_kept_set(temperature, top_p, top_k, kept):
  rows = 4000
  logits = np.log(PROBS) + 3.0  # an offset changes nothing
  tokens, logprobs = _draw(logits, rows, temperature, top_p, top_k)
  assert set(tokens.tolist()) == set(kept)
  scaled = PROBS ** (1 / temperature) / np.sum(PROBS ** (1 / temperature))
  want_freq = scaled[kept] / scaled[kept].sum()  # renormalised over the kept set
  freq = np.bincount(tokens, minlength=len(PROBS))[kept] / rows
  sigma = np.sqrt(want_freq * (1 - want_freq) / rows)
  assert np.all(np.abs(freq - want_freq) <= 5 * sigma + 1e-12), (freq, want_freq)
  # The log-prob is under the scaled distribution BEFORE truncation (SGLang's semantics).
  np.testing.assert_allclose(logprobs, np.log(scaled)[tokens], atol=1e-6, rtol=0)


def test_sampler_greedy_rows_take_argmax_with_untempered_logprobs():
  rng = np.random.default_rng(0)
  logits = jnp.asarray(rng.standard_normal((4, 64)) * 3, jnp.float32)
  keys = jax.vmap(jax.random.key)(jnp.arange(4))
  temperature = jnp.array([0.0, 0.7, 0.0, 1.3])
  tokens, logprobs = D.sample_tokens(logits, keys, temperature, jnp.full((4,), 0.9),
                                     jnp.array([5, -1, 5, 3], jnp.int32))
  tokens, logprobs = np.asarray(tokens), np.asarray(logprobs)
  argmax = np.argmax(np.asarray(logits), axis=-1)
  np.testing.assert_array_equal(tokens[[0, 2]], argmax[[0, 2]])
  scale = np.array([1.0, 0.7, 1.0, 1.3])[:, None]
  want = np.asarray(jax.nn.log_softmax(logits / scale, axis=-1))[np.arange(4), tokens]
  np.testing.assert_allclose(logprobs, want, atol=1e-6, rtol=0)
  # Row 3 keeps top-3 only.
  assert tokens[3] in np.argsort(-np.asarray(logits[3]))[:3]
