"""KV-cache generation over our Qwen3 params: prefill, one-token decode, sampling, the loop.

Pure, jit-able functions with static shapes; the in-process rollout engine
(rollout/engines/jax_engine.py) pads requests to bucketed shapes and calls `generate`.

Layout: prompts are RIGHT-padded. Row b holds its prompt in columns [0, lengths[b]) and every
token's RoPE position is its column, exactly the numbering of `model.forward_logits` with
positions = arange(T) and segment id 1, so no per-row offsets exist anywhere. Decoding writes
row b's next key/value at column `cache["lengths"][b]`, so rows of different prompt lengths
advance in lock-step while each keeps its own positions.

Cache: {"k", "v": [L, B, K, S, H] (compute dtype), "lengths": [B] int32 filled columns}. The
kv-head axis sits before time so each (row, head) is a contiguous [S, H] matrix, the layout
XLA's CPU dots want; [L, B, S, K, H] made XLA transpose a copy of every layer's cache each step.
Columns at or beyond a row's length hold garbage (prompt padding) and are masked out; decode
overwrites them in order. Prefill is self-attention over the prompt, so it calls the training
attention (`carr_jax.attention.attend`, `cfg.attention`: blockwise on CPU by default, with the
padding as segment 0); one-token decode attends to the cache with `_attend`.

Restricted output vocabulary (`cfg.output_ids`, V' ids): `prefill` / `decode_step` return
logits over those V' columns only, `sample_tokens` draws a column, and `generate` maps it back
to its token id (`model.output_token_ids`) before storing it, matching stop ids and feeding it
back; its log-probs are over the subset, the distribution the train step scores
(`train_step.target_logprobs`). Without `output_ids`, V' = V and columns are token ids.

Sampling (`sample_tokens`) follows SGLang 0.5.23 (see rollout/engines/sglang.py): the
returned log-prob of a sampled token is log softmax(logits / temperature) over the full vocab
(the V' ids with `cfg.output_ids`),
i.e. after temperature scaling and before top-k/top-p truncation; greedy rows (temperature 0)
take the argmax and report log_softmax(logits). Top-k keeps ranks < k (k <= 0: all); top-p
keeps a token when the probability mass strictly above it is <= top_p (the top token always).

The decode loop is one `lax.while_loop` inside the jitted `generate` (prefill included), not
a Python loop over a jitted step: a Python loop must read the sampled tokens back to the host
every step to stop finished rows, and on CPU that dispatch + read costs about as much as a
tiny model's whole step (measured: the on-device loop is 1.35x faster at the tiny size and
1.07-1.19x at ~50M parameters; benchmarks/README.md, `## engine`). The loop exits as soon as
every row has finished. Its cost: a running batch cannot be interrupted.

  cache = init_cache(cfg, batch=2, max_len=64)
  logits, cache = prefill(params, cfg, tokens, lengths, cache)      # tokens [B, T]
  logits, cache = decode_step(params, cfg, next_tokens, cache)      # next_tokens [B]
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from carr_jax import attention
from carr_jax.model import (_experts_dense, _experts_ragged, output_token_ids, rms_norm, rope,
                            route, unembed_matrix)
from carr_jax.model_config import Qwen3Config

_NEG_INF = float(jnp.finfo(jnp.float32).min)


def init_cache(cfg: Qwen3Config, batch: int, max_len: int, dtype: Any = None) -> dict:
  """Empty cache for `batch` rows of up to `max_len` tokens (prompt + generated)."""
  dtype = jnp.dtype(dtype or cfg.compute_dtype)
  shape = (cfg.num_layers, batch, cfg.num_kv_heads, max_len, cfg.head_dim)
  return {"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype),
          "lengths": jnp.zeros((batch,), jnp.int32)}


# ------------------------------------------------------------------ one decoder layer

def _qkv(cfg: Qwen3Config, attn: dict, x: jax.Array, positions: jax.Array):
  """x [B, T, D] -> q [B, T, N, H], k/v [B, K, T, H]; per-head q/k RMSNorm before RoPE."""
  cdt = jnp.dtype(cfg.compute_dtype)
  q = jnp.einsum("BTD,DNH->BTNH", x, attn["q_proj"].astype(cdt))
  k = jnp.einsum("BTD,DKH->BTKH", x, attn["k_proj"].astype(cdt))
  v = jnp.einsum("BTD,DKH->BTKH", x, attn["v_proj"].astype(cdt))
  q = rms_norm(q, attn["q_norm"], cfg.rms_norm_eps, cdt)
  k = rms_norm(k, attn["k_norm"], cfg.rms_norm_eps, cdt)
  k = rope(k, positions, cfg.rope_theta)
  return rope(q, positions, cfg.rope_theta), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)


def _attend(q: jax.Array, keys: jax.Array, values: jax.Array, mask: jax.Array) -> jax.Array:
  """GQA attention. q [B, T, N, H]; keys/values [B, K, S, H]; mask [B, T, S] -> [B, T, N, H]."""
  b, t, n, h = q.shape
  kv_heads = keys.shape[1]
  q = q.reshape(b, t, kv_heads, n // kv_heads, h)  # query head n = kv head * G + g
  scores = jnp.einsum("BTKGH,BKSH->BKGTS", q, keys, preferred_element_type=jnp.float32)
  scores = scores.astype(jnp.float32) * (h ** -0.5)
  scores = jnp.where(mask[:, None, None], scores, _NEG_INF)
  probs = jax.nn.softmax(scores, axis=-1).astype(q.dtype)  # [B, K, G, T, S]
  return jnp.einsum("BKGTS,BKSH->BTKGH", probs, values).reshape(b, t, n, h)


def _ffn(cfg: Qwen3Config, layer: dict, x: jax.Array) -> jax.Array:
  """SwiGLU MLP or top-k routed experts. x [B, T, D] -> [B, T, D]."""
  cdt = jnp.dtype(cfg.compute_dtype)
  b, t, d = x.shape
  if not cfg.is_moe:
    mlp = layer["mlp"]
    gate = jnp.einsum("BTD,DF->BTF", x, mlp["gate_proj"].astype(cdt))
    up = jnp.einsum("BTD,DF->BTF", x, mlp["up_proj"].astype(cdt))
    return jnp.einsum("BTF,FD->BTD", jax.nn.silu(gate) * up, mlp["down_proj"].astype(cdt))
  moe = layer["moe"]
  tokens = x.reshape(b * t, d)
  router_logits = jnp.einsum("TD,DE->TE", tokens, moe["router"].astype(cdt))
  _, weights, experts = route(router_logits, cfg.num_experts_per_tok, cfg.norm_topk_prob)
  combine = _experts_ragged if cfg.moe_impl == "ragged" else _experts_dense
  y = combine(tokens, experts, weights.astype(cdt), moe["gate_proj"].astype(cdt),
              moe["up_proj"].astype(cdt), moe["down_proj"].astype(cdt))
  return y.reshape(b, t, d)


def _block(cfg: Qwen3Config, layer: dict, x: jax.Array, positions: jax.Array, attend):
  """Pre-norm decoder layer. `attend(q, k, v) -> (out [B, T, N, H], aux)` owns the cache."""
  cdt = jnp.dtype(cfg.compute_dtype)
  h = rms_norm(x, layer["input_norm"]["scale"], cfg.rms_norm_eps, cdt)
  out, aux = attend(*_qkv(cfg, layer["attn"], h, positions))
  x = x + jnp.einsum("BTNH,NHD->BTD", out, layer["attn"]["o_proj"].astype(cdt))
  h = rms_norm(x, layer["post_attn_norm"]["scale"], cfg.rms_norm_eps, cdt)
  return x + _ffn(cfg, layer, h), aux


def _embed(params: dict, cfg: Qwen3Config, tokens: jax.Array) -> jax.Array:
  return jnp.take(params["embed"]["embedding"], tokens, axis=0).astype(cfg.compute_dtype)


def _logits(params: dict, cfg: Qwen3Config, x: jax.Array) -> jax.Array:
  """Un-normed hidden [B, D] -> fp32 logits [B, V'] (final RMSNorm, then the unembedding over
  `cfg.output_ids`, or all V ids)."""
  h = rms_norm(x, params["final_norm"]["scale"], cfg.rms_norm_eps, jnp.dtype(cfg.compute_dtype))
  return jnp.einsum("BD,DV->BV", h.astype(jnp.float32),
                    unembed_matrix(params, cfg).astype(jnp.float32))


# ------------------------------------------------------------------ prefill and decode

def prefill(params: dict, cfg: Qwen3Config, tokens: jax.Array, lengths: jax.Array,
            cache: dict) -> tuple[jax.Array, dict]:
  """Runs right-padded prompts tokens [B, T] (lengths [B] >= 1) into an EMPTY cache.

  Returns (fp32 logits [B, V'] of each row's last prompt token, cache with lengths set).
  """
  b, t = tokens.shape
  cols = jnp.arange(t)
  positions = jnp.broadcast_to(cols, (b, t))
  segments = (cols[None, :] < lengths[:, None]).astype(jnp.int32)  # [B, T]: 1 prompt, 0 padding

  def self_attend(q, k, v):  # q [B, T, N, H], k/v [B, K, T, H]: the training attention
    n, kv_heads = q.shape[2], k.shape[1]
    grouped = q.reshape(b, t, kv_heads, n // kv_heads, q.shape[-1])
    out = attention.attend(grouped, k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3),
                           segments, cfg.attention)
    return out.reshape(q.shape), (k, v)

  def layer_fn(x, layer):
    return _block(cfg, layer, x, positions, self_attend)

  x, (keys, values) = jax.lax.scan(layer_fn, _embed(params, cfg, tokens), params["layers"])
  # keys/values: [L, B, K, T, H] -> columns [0, T) of the cache.
  cache = {"k": jax.lax.dynamic_update_slice(cache["k"], keys.astype(cache["k"].dtype),
                                             (0, 0, 0, 0, 0)),
           "v": jax.lax.dynamic_update_slice(cache["v"], values.astype(cache["v"].dtype),
                                             (0, 0, 0, 0, 0)),
           "lengths": lengths.astype(jnp.int32)}
  last = x[jnp.arange(b), lengths - 1]  # [B, D]
  return _logits(params, cfg, last), cache


def decode_step(params: dict, cfg: Qwen3Config, token: jax.Array,
                cache: dict) -> tuple[jax.Array, dict]:
  """Appends token [B] at column cache["lengths"] of each row -> (fp32 logits [B, V'], cache)."""
  b = token.shape[0]
  pos = cache["lengths"]  # [B] position (= column) of the new token
  rows = jnp.arange(b)
  max_len = cache["k"].shape[3]
  mask = (jnp.arange(max_len)[None, :] <= pos[:, None])[:, None, :]  # [B, 1, S]

  def layer_fn(carry, xs):
    x, k_all, v_all = carry
    layer, index = xs

    def attend(q, k, v):
      # Write this layer's new key/value into the carried cache (in place under XLA).
      k_new = k_all.at[index, rows, :, pos].set(k[:, :, 0].astype(k_all.dtype))  # [B, K, H]
      v_new = v_all.at[index, rows, :, pos].set(v[:, :, 0].astype(v_all.dtype))
      return _attend(q, k_new[index], v_new[index], mask), (k_new, v_new)

    x, (k_all, v_all) = _block(cfg, layer, x, pos[:, None], attend)
    return (x, k_all, v_all), None

  carry = (_embed(params, cfg, token[:, None]), cache["k"], cache["v"])
  (x, k_all, v_all), _ = jax.lax.scan(
      layer_fn, carry, (params["layers"], jnp.arange(cfg.num_layers)))
  return _logits(params, cfg, x[:, 0]), {"k": k_all, "v": v_all, "lengths": pos + 1}


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

  Tokens are indices into the logits' last axis: columns of V' under `cfg.output_ids`.
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
             max_new_tokens: jax.Array, stop_ids: jax.Array, *, max_steps: int) -> dict:
  """Prefill + up to `max_steps` sampled tokens per row, stopping rows independently.

  tokens [B, T] right-padded, lengths [B] >= 1, seeds [B] uint32 (row b's step-i key is
  fold_in(key(seeds[b]), i), so a row's draws do not depend on its batch mates),
  temperature/top_p [B] f32, top_k [B] int32, max_new_tokens [B] int32 (<= max_steps; 0 =
  an idle padding row), stop_ids [B, M] int32 (-1 = unused slot).
  Returns {"tokens": [B, max_steps] (valid up to num_tokens), "logprobs": [B, max_steps],
  "num_tokens": [B], "stop_token": [B] (the matched stop id, -1 if the row hit the length)}.
  """
  b, t = tokens.shape
  cache = init_cache(cfg, b, t + max_steps)
  logits, cache = prefill(params, cfg, tokens, lengths, cache)
  row_keys = jax.vmap(jax.random.key)(seeds)

  def cond(state):
    return (state["step"] < max_steps) & ~jnp.all(state["done"])

  def body(state):
    step = state["step"]
    keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(row_keys, step)
    column, logp = sample_tokens(state["logits"], keys, temperature, top_p, top_k)
    tok = output_token_ids(cfg, column)  # [B] token ids (columns of V' -> ids)
    active = ~state["done"]
    out_tokens = state["tokens"].at[:, step].set(jnp.where(active, tok, 0))
    out_logp = state["logprobs"].at[:, step].set(jnp.where(active, logp, 0.0))
    num = state["num_tokens"] + active.astype(jnp.int32)
    hit_stop = active & jnp.any(tok[:, None] == stop_ids, axis=-1)
    done = state["done"] | hit_stop | (num >= max_new_tokens)
    # Runs once more after the last row finishes: a lax.cond around it would copy the cache.
    logits, cache = decode_step(params, cfg, tok, state["cache"])
    return {"step": step + 1, "logits": logits, "cache": cache, "tokens": out_tokens,
            "logprobs": out_logp, "num_tokens": num, "done": done,
            "stop_token": jnp.where(hit_stop, tok, state["stop_token"])}

  state = {"step": jnp.int32(0), "logits": logits, "cache": cache,
           "tokens": jnp.zeros((b, max_steps), jnp.int32),
           "logprobs": jnp.zeros((b, max_steps), jnp.float32),
           "num_tokens": jnp.zeros((b,), jnp.int32), "done": max_new_tokens <= 0,
           "stop_token": jnp.full((b,), -1, jnp.int32)}
  state = jax.lax.while_loop(cond, body, state)
  return {k: state[k] for k in ("tokens", "logprobs", "num_tokens", "stop_token")}


generate_jit = jax.jit(generate, static_argnames=("cfg", "max_steps"))
