"""KV-cache generation over our Qwen3 params: prefill, one-token decode, sampling, the loop.

Pure, jit-able functions with static shapes; the in-process rollout engine
(carr_jax/model/engine.py) pads requests to bucketed shapes and calls `generate`.

Layout: prompts are RIGHT-padded. Row b holds its prompt in columns [0, lengths[b]) and every
token's RoPE position is its column, exactly the numbering of `model.forward_logits` with
positions = arange(T) and segment id 1, so no per-row offsets exist anywhere. Decoding writes
row b's next key/value at column `cache["lengths"][b]`, so rows of different prompt lengths
advance in lock-step while each keeps its own positions.

One forward pass: prefill and decode run the model's own layers (`carr_jax.model.qwen3.Qwen3`,
method `with_cache`), whose attention takes the cache as gemma's does: it writes the new
keys/values at their positions and returns the updated cache. Prefill is self-attention over
the prompt, so it uses the training attention (`cfg.attention`: blockwise on CPU by default,
with the padding as segment 0); one-token decode attends over the cache
(`carr_jax.model.attention.attend_cache`).

Cache: {"k", "v": [L, B, K, S, H] (compute dtype), "lengths": [B] int32 filled columns}, the
kv-head axis before time (`carr_jax.model.attention.write_cache`). Columns at or beyond a row's
length hold garbage (prompt padding) and are masked out; decode overwrites them in order.

Shared prefix: when every row begins with the same P tokens (the chat template's system turn),
`generate(prefix_tokens=...)` runs them once (`prefill_prefix`) into "prefix_k" / "prefix_v"
[L, P, K, H] beside the rows' cache, which then holds only what follows: row b's column c is
position P + c, and every query also attends to the P shared keys (merged by log-sum-exp). The
same attention as whole rows, to rounding; the rows' cache, their prefill and each decoding
step's reads shrink by P columns.

Restricted output vocabulary (`vocab`, a `restricted_vocab.RestrictedVocab` of V' ids): `prefill`
/ `decode_step` return logits over those V' columns only, `sample_tokens` draws a column, and
`generate` maps it back to its token id (`restricted_vocab.token_ids`) before storing it,
matching stop ids and feeding it back; its log-probs are over the subset, the distribution the
train step scores (`train_step.target_logprobs`). With `vocab=None`, V' = V and columns are
token ids.

Sampling (`sample_tokens`) follows SGLang 0.5.23 (see rollout/engines/sglang.py): the
returned log-prob of a sampled token is log softmax(logits / temperature) over the full vocab
(the V' ids with a `vocab`),
i.e. after temperature scaling and before top-k/top-p truncation; greedy rows (temperature 0)
take the argmax and report log_softmax(logits). Top-k keeps ranks < k (k <= 0: all); top-p
keeps a token when the probability mass strictly above it is <= top_p (the top token always).

The decode loop is one `lax.while_loop` inside the jitted `generate` (prefill included), not
a Python loop over a jitted step: a Python loop must read the sampled tokens back to the host
every step to stop finished rows, and on CPU that dispatch + read costs about as much as a
tiny model's whole step (benchmarks/README.md `## engine`). The loop exits as soon as
every row has finished. Its cost: a running batch cannot be interrupted.

  cache = init_cache(cfg, batch=2, max_len=64)
  logits, cache = prefill(params, cfg, tokens, lengths, cache)      # tokens [B, T]
  logits, cache = decode_step(params, cfg, next_tokens, cache)      # next_tokens [B]
  (each takes `vocab=` a RestrictedVocab; None, the default, is the full vocabulary)
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from carr_jax.model import restricted_vocab
from carr_jax.model.config import Qwen3Config
from carr_jax.model.qwen3 import Qwen3, project, unembed_matrix
from carr_jax.model.restricted_vocab import RestrictedVocab


def init_cache(cfg: Qwen3Config, batch: int, max_len: int, dtype: Any = None) -> dict:
  """Empty cache for `batch` rows of up to `max_len` tokens (prompt + generated)."""
  dtype = jnp.dtype(dtype or cfg.compute_dtype)
  shape = (cfg.num_layers, batch, cfg.num_kv_heads, max_len, cfg.head_dim)
  return {"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype),
          "lengths": jnp.zeros((batch,), jnp.int32)}


def _forward(params: dict, cfg: Qwen3Config, tokens: jax.Array, positions: jax.Array,
             segments: jax.Array, cache: dict) -> tuple[jax.Array, dict, jax.Array | None]:
  """The model's own forward pass with the cache (`model.Qwen3.with_cache`): [B, T] inputs
  -> (final-normed hidden [B, T, D], the cache with "k" and "v" updated, the experts routed
  [L, B, T, k] or None for a dense model)."""
  layers = {name: x for name, x in cache.items() if name != "lengths"}
  hidden, kv, experts = Qwen3(cfg).apply({"params": params}, tokens, positions, segments,
                                         layers, method=Qwen3.with_cache)
  return hidden, {**cache, **kv}, experts


def prefix_columns(cache: dict) -> int:
  """P, the positions before the rows' column 0 (a shared prefix's length, or 0)."""
  return cache["prefix_k"].shape[1] if "prefix_k" in cache else 0


def _logits(params: dict, cfg: Qwen3Config, hidden: jax.Array,
            vocab: RestrictedVocab | None) -> jax.Array:
  """Final-normed hidden [B, D] -> fp32 logits [B, V'] (`vocab`'s ids, or all V)."""
  unembed = unembed_matrix(params, cfg, vocab).astype(jnp.float32)  # [D, V']
  return project(hidden.astype(jnp.float32), unembed)


# ------------------------------------------------------------------ prefill and decode

def prefill_prefix(params: dict, cfg: Qwen3Config, prefix_tokens: jax.Array) -> dict:
  """Tokens [P] that every row begins with, run once -> {"prefix_k", "prefix_v":
  [L, P, K, H]}: added to a cache, they are the first P positions of every row, and the
  rows' tokens (`prefill`) start at position P."""
  p = prefix_tokens.shape[0]
  ones = jnp.ones((1, p), jnp.int32)
  _, kv, _ = _forward(params, cfg, prefix_tokens[None], jnp.arange(p)[None], ones,
                      init_cache(cfg, 1, p))
  to_shared = lambda x: jnp.einsum("LKPH->LPKH", x[:, 0])  # noqa: E731
  return {"prefix_k": to_shared(kv["k"]), "prefix_v": to_shared(kv["v"])}


def _prefill(params, cfg, tokens, lengths, cache, vocab):
  """`prefill`, and the experts routed at every prompt column [L, B, T, k] (None: dense)."""
  b, t = tokens.shape
  cols = jnp.arange(t)
  positions = jnp.broadcast_to(cols + prefix_columns(cache), (b, t))
  segments = (cols[None, :] < lengths[:, None]).astype(jnp.int32)  # [B, T]: 1 prompt, 0 padding
  hidden, cache, experts = _forward(params, cfg, tokens, positions, segments, cache)
  last = hidden[jnp.arange(b), lengths - 1]  # [B, D]
  return (_logits(params, cfg, last, vocab), {**cache, "lengths": lengths.astype(jnp.int32)},
          experts)


def prefill(params: dict, cfg: Qwen3Config, tokens: jax.Array, lengths: jax.Array,
            cache: dict, vocab: RestrictedVocab | None = None) -> tuple[jax.Array, dict]:
  """Runs right-padded prompts tokens [B, T] (lengths [B] >= 1) into an EMPTY cache (which
  may hold a shared prefix, `prefill_prefix`: the prompts are then what follows it).

  Returns (fp32 logits [B, V'] of each row's last prompt token, cache with lengths set).
  """
  return _prefill(params, cfg, tokens, lengths, cache, vocab)[:2]


def _decode_step(params, cfg, token, cache, vocab):
  """`decode_step`, and the experts the new token was routed to [L, B, 1, k] (None: dense)."""
  pos = cache["lengths"][:, None] + prefix_columns(cache)  # [B, 1] position of the new token
  hidden, cache, experts = _forward(params, cfg, token[:, None], pos, jnp.ones_like(pos), cache)
  return (_logits(params, cfg, hidden[:, 0], vocab),
          {**cache, "lengths": cache["lengths"] + 1}, experts)


def decode_step(params: dict, cfg: Qwen3Config, token: jax.Array, cache: dict,
                vocab: RestrictedVocab | None = None) -> tuple[jax.Array, dict]:
  """Appends token [B] at column cache["lengths"] of each row -> (fp32 logits [B, V'], cache)."""
  return _decode_step(params, cfg, token, cache, vocab)[:2]


# ------------------------------------------------------------------ sampling

def _filtered_choice(keys, logprobs, top_p, top_k):
  """Categorical draw restricted to each row's top-k / top-p set. logprobs [B, V] -> [B]."""
  vocab = logprobs.shape[-1]
  order = jnp.argsort(-logprobs, axis=-1, stable=True)  # [B, V] descending
  sorted_lp = jnp.take_along_axis(logprobs, order, axis=-1)
  probs = jnp.exp(sorted_lp)
  mass_above = jnp.cumsum(probs, axis=-1) - probs
  rank = jnp.arange(vocab)[None, :]
  keep = (rank < jnp.where(top_k > 0, top_k, vocab)[:, None]) & (
      (mass_above <= top_p[:, None]) | (top_p[:, None] >= 1.0))
  keep = keep | (rank == 0)
  choice = jax.vmap(jax.random.categorical)(keys, jnp.where(keep, sorted_lp, -jnp.inf))
  return jnp.take_along_axis(order, choice[:, None], axis=-1)[:, 0]


def sample_tokens(logits: jax.Array, keys: jax.Array, temperature: jax.Array,
                  top_p: jax.Array, top_k: jax.Array) -> tuple[jax.Array, jax.Array]:
  """One token per row. logits [B, V] fp32; keys [B] PRNG keys; temperature/top_p [B] f32;
  top_k [B] int32 -> (tokens [B] int32, log-probs [B] fp32 as in the module docstring).

  Tokens are indices into the logits' last axis: columns of V' under a restricted vocabulary.
  """
  greedy = temperature <= 0.0
  scale = jnp.where(greedy, 1.0, temperature)
  logprobs = jax.nn.log_softmax(logits / scale[:, None], axis=-1)  # [B, V]
  # Cheapest path the batch allows: no draw at all, a plain draw, or a sort for top-k/top-p.
  filtered = jnp.any(~greedy & ((top_k > 0) | (top_p < 1.0)))
  branch = jnp.where(jnp.all(greedy), 0, jnp.where(filtered, 2, 1))
  drawn = jax.lax.switch(branch, [
      lambda k, lp, _p, _k: jnp.zeros(lp.shape[:1], jnp.int32),
      lambda k, lp, _p, _k: jax.vmap(jax.random.categorical)(k, lp).astype(jnp.int32),
      lambda k, lp, p, top: _filtered_choice(k, lp, p, top).astype(jnp.int32),
  ], keys, logprobs, top_p, top_k)
  tokens = jnp.where(greedy, jnp.argmax(logits, axis=-1), drawn).astype(jnp.int32)
  return tokens, jnp.take_along_axis(logprobs, tokens[:, None], axis=-1)[:, 0]


# ------------------------------------------------------------------ the generation loop

def generate(params: dict, cfg: Qwen3Config, tokens: jax.Array, lengths: jax.Array,
             seeds: jax.Array, temperature: jax.Array, top_p: jax.Array, top_k: jax.Array,
             max_new_tokens: jax.Array, stop_ids: jax.Array, *, max_steps: int,
             vocab: RestrictedVocab | None = None,
             prefix_tokens: jax.Array | None = None, record_routes: bool = False) -> dict:
  """Prefill + up to `max_steps` sampled tokens per row, stopping rows independently.

  tokens [B, T] right-padded, lengths [B] >= 1, seeds [B] uint32 (row b's step-i key is
  fold_in(key(seeds[b]), i), so a row's draws do not depend on its batch mates),
  temperature/top_p [B] f32, top_k [B] int32, max_new_tokens [B] int32 (<= max_steps; 0 =
  an idle padding row), stop_ids [B, M] int32 (-1 = unused slot); `vocab` the output
  vocabulary (None: all V ids); `prefix_tokens` [P] tokens every row begins with, computed
  once (`prefill_prefix`), `tokens` / `lengths` then being what follows them.
  Returns {"tokens": [B, max_steps] (valid up to num_tokens), "logprobs": [B, max_steps],
  "num_tokens": [B], "stop_token": [B] (the matched stop id, -1 if the row hit the length)};
  with `record_routes` (MoE, no prefix) also the experts every layer routed each token to:
  "prompt_routes" [B, T, L, k] (the prompt columns) and "routes" [B, max_steps, L, k]
  (generated token i, fed back at position lengths + i).
  """
  b, t = tokens.shape
  if record_routes and (not cfg.is_moe or prefix_tokens is not None):
    raise ValueError("record_routes is for a mixture of experts without a shared prefix")
  cache = init_cache(cfg, b, t + max_steps)
  if prefix_tokens is not None:
    cache.update(prefill_prefix(params, cfg, prefix_tokens))
  logits, cache, prompt_routes = _prefill(params, cfg, tokens, lengths, cache, vocab)
  row_keys = jax.vmap(jax.random.key)(seeds)

  def cond(state):
    return (state["step"] < max_steps) & ~jnp.all(state["done"])

  def body(state):
    step = state["step"]
    keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(row_keys, step)
    column, logp = sample_tokens(state["logits"], keys, temperature, top_p, top_k)
    tok = restricted_vocab.token_ids(vocab, column)  # [B] token ids (columns of V' -> ids)
    active = ~state["done"]
    out_tokens = state["tokens"].at[:, step].set(jnp.where(active, tok, 0))
    out_logp = state["logprobs"].at[:, step].set(jnp.where(active, logp, 0.0))
    num = state["num_tokens"] + active.astype(jnp.int32)
    hit_stop = active & jnp.any(tok[:, None] == stop_ids, axis=-1)
    done = state["done"] | hit_stop | (num >= max_new_tokens)
    # Runs once more after the last row finishes: a lax.cond around it would copy the cache.
    logits, cache, experts = _decode_step(params, cfg, tok, state["cache"], vocab)
    out = {"step": step + 1, "logits": logits, "cache": cache, "tokens": out_tokens,
           "logprobs": out_logp, "num_tokens": num, "done": done,
           "stop_token": jnp.where(hit_stop, tok, state["stop_token"])}
    if record_routes:  # [L, B, 1, k] -> row b's step
      out["routes"] = state["routes"].at[:, step].set(jnp.moveaxis(experts[:, :, 0], 0, 1))
    return out

  state = {"step": jnp.int32(0), "logits": logits, "cache": cache,
           "tokens": jnp.zeros((b, max_steps), jnp.int32),
           "logprobs": jnp.zeros((b, max_steps), jnp.float32),
           "num_tokens": jnp.zeros((b,), jnp.int32), "done": max_new_tokens <= 0,
           "stop_token": jnp.full((b,), -1, jnp.int32)}
  if record_routes:
    state["routes"] = jnp.zeros((b, max_steps, cfg.num_layers, cfg.num_experts_per_tok),
                                jnp.int32)
  state = jax.lax.while_loop(cond, body, state)
  out = {k: state[k] for k in ("tokens", "logprobs", "num_tokens", "stop_token")}
  if record_routes:
    out.update(routes=state["routes"], prompt_routes=jnp.moveaxis(prompt_routes, 0, 2))
  return out


generate_jit = jax.jit(generate, static_argnames=("cfg", "max_steps", "vocab", "record_routes"))
