"""Qwen3 and Qwen3-MoE decoder in Flax Linen, numerically matching HF transformers 5.x.

Why Linen: parameters are a plain nested dict, so one ordered regex table shards them
(`carr_jax.model.sharding`), `jax.eval_shape(init)` gives the abstract tree of a 30B model for
free, orbax saves it as is, and the HF mapping is a pure function of that dict. Layers are
stacked with `nn.scan` (one compiled layer body, leading L axis on every layer parameter),
which keeps compile time flat in depth; `remat="full"` recomputes each layer in the backward.

Inputs are `tokens`, `positions` and `segment_ids`, all [B, T]. Segment ids let several
sequences share a row: attention is causal and never crosses a segment; id 0 is padding.
Positions are given by the caller (restarting at 0 per segment, see `carr_jax.rl.packing`).
Prefill and decode (`carr_jax.model.decode`) run these same layers with a KV cache (`with_cache`).

Numerics: parameters are stored in `param_dtype` and cast to `compute_dtype` for matmuls;
RMSNorm, RoPE tables, attention softmax, router softmax and logits are fp32, as in HF.

Restricted output vocabulary (`carr_jax.model.restricted_vocab`, V' sorted ids; None = all
V): the train step and the sampler use `unembed_matrix(params, cfg, vocab)`, the [D, V']
columns of those ids. `Qwen3.logits` and `forward_logits` stay full-vocabulary on purpose:
they are the HF-parity reference.

MoE paths (both exact, both run on CPU/GPU/TPU; `moe_impl` picks one):
- "ragged" (default): tokens are sorted by expert and multiplied with `jax.lax.ragged_dot`
  (a grouped matmul). Cost model: 3 * T*k * D * F multiply-adds (T tokens, k experts per
  token) plus an O(T*k log(T*k)) sort and two gathers of [T*k, D]; dropless, no capacity.
- "dense": every expert runs on every token and non-selected outputs get weight 0.
  Cost model: 3 * T * E * D * F multiply-adds, i.e. E/k times the useful work; simplest to
  shard (experts as a batch dimension) and fine for tiny models.
Under a mesh either path runs per device on that device's rows (`_experts_per_shard`).
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from carr_jax.model import attention, restricted_vocab
from carr_jax.model.config import Qwen3Config
from carr_jax.model.restricted_vocab import RestrictedVocab
from carr_jax.model.sharding import BATCH, shard


def _dtype(name: str) -> Any:
  return jnp.dtype(name)


_INIT = nn.initializers.normal(stddev=0.02)  # every weight matrix, embeddings included


def project(x: jax.Array, w: jax.Array, n_in: int = 1, **dot_kwargs) -> jax.Array:
  """x [..., I1..In] @ w [I1..In, O...] -> [..., O...] as ONE 2-D matmul [N, I] @ [I, O].

  The same contraction as the einsum ("BTD,DNH->BTNH", "BTNH,NHD->BTD", ...), but XLA:CPU
  runs a dot whose free dims are several (B, T) and, above all, its gradients 1.7-2x slower
  than the flattened matmul (benchmarks/README.md, model). The merged dims keep their
  sharding: the sharded dim (batch, heads) is always the major one of a merge.
  """
  lead, ins, outs = x.shape[:x.ndim - n_in], w.shape[:n_in], w.shape[n_in:]
  size_in = 1
  for s in ins:
    size_in *= s
  y = jnp.dot(x.reshape(-1, size_in), w.reshape(size_in, -1), **dot_kwargs)
  return y.reshape(*lead, *outs)


def rms_norm(x: jax.Array, scale: jax.Array, eps: float, out_dtype: Any) -> jax.Array:
  """HF Qwen3RMSNorm: normalise in fp32, cast back, multiply by the weight."""
  x32 = x.astype(jnp.float32)
  x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
  return scale.astype(out_dtype) * x32.astype(out_dtype)


def rope(x: jax.Array, positions: jax.Array, theta: float) -> jax.Array:
  """Rotate-half RoPE. x: [B, T, N, H]; positions: [B, T]."""
  head_dim = x.shape[-1]
  inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
  freqs = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, H/2]
  emb = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]  # [B, T, 1, H]
  cos, sin = jnp.cos(emb).astype(x.dtype), jnp.sin(emb).astype(x.dtype)
  x1, x2 = jnp.split(x, 2, axis=-1)
  rotated = jnp.concatenate([-x2, x1], axis=-1)
  return x * cos + rotated * sin


class RMSNorm(nn.Module):
  cfg: Qwen3Config

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), _dtype(self.cfg.param_dtype))
    return rms_norm(x, scale, self.cfg.rms_norm_eps, _dtype(self.cfg.compute_dtype))


class Attention(nn.Module):
  """GQA self-attention with per-head q/k RMSNorm applied before RoPE, and an optional KV cache.

  Returns (y [B, T, D], the updated cache or None). Without a cache (training) the chunk
  attends within itself (`carr_jax.model.attention.attend`). A cache is this layer's
  {"k", "v": [B, K, S, H]}, a row's columns being its positions: the chunk's keys and values
  are written at columns `positions`, then either the chunk is each row's prompt from column
  0 (T > 1, the prefill of an empty cache: it attends within itself, as in training) or it is
  one token per row (T = 1, decoding: it attends over the cache columns up to its position).
  """
  cfg: Qwen3Config

  @nn.compact
  def __call__(self, x, positions, segment_ids, cache=None):
    cfg = self.cfg
    pdt, cdt = _dtype(cfg.param_dtype), _dtype(cfg.compute_dtype)
    d, n, k, h = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    wq = self.param("q_proj", _INIT, (d, n, h), pdt)
    wk = self.param("k_proj", _INIT, (d, k, h), pdt)
    wv = self.param("v_proj", _INIT, (d, k, h), pdt)
    wo = self.param("o_proj", _INIT, (n, h, d), pdt)
    q_scale = self.param("q_norm", nn.initializers.ones, (h,), pdt)
    k_scale = self.param("k_norm", nn.initializers.ones, (h,), pdt)

    q = project(x, wq.astype(cdt))  # BTD,DNH->BTNH
    key = project(x, wk.astype(cdt))  # BTD,DKH->BTKH
    value = project(x, wv.astype(cdt))  # BTD,DKH->BTKH
    q = shard(rms_norm(q, q_scale, cfg.rms_norm_eps, cdt), BATCH, None, "tensor", None)
    key = shard(rms_norm(key, k_scale, cfg.rms_norm_eps, cdt), BATCH, None, "tensor", None)
    q, key = rope(q, positions, cfg.rope_theta), rope(key, positions, cfg.rope_theta)

    b, t = x.shape[:2]
    q = q.reshape(b, t, k, n // k, h)  # query head n = kv head * G + g
    if cache is not None:
      cache = attention.write_cache(cache, key, value, positions)
    if cache is None or t > 1:
      out = attention.attend(q, key, value, segment_ids, cfg.attention)
    else:
      out = attention.attend_cache(q, cache["k"], cache["v"], positions)
    out = shard(out.reshape(b, t, n, h), BATCH, None, "tensor", None)
    return project(out, wo.astype(cdt), n_in=2), cache  # BTNH,NHD->BTD


class MLP(nn.Module):
  """SwiGLU: down(silu(gate(x)) * up(x))."""
  cfg: Qwen3Config

  @nn.compact
  def __call__(self, x):
    cfg = self.cfg
    pdt, cdt = _dtype(cfg.param_dtype), _dtype(cfg.compute_dtype)
    d, f = cfg.hidden_size, cfg.intermediate_size
    gate = self.param("gate_proj", _INIT, (d, f), pdt).astype(cdt)
    up = self.param("up_proj", _INIT, (d, f), pdt).astype(cdt)
    down = self.param("down_proj", _INIT, (f, d), pdt).astype(cdt)
    hidden = jax.nn.silu(project(x, gate)) * project(x, up)  # BTD,DF->BTF
    hidden = shard(hidden, BATCH, None, "tensor")
    return project(hidden, down)  # BTF,FD->BTD


def route(router_logits: jax.Array, top_k: int, normalize: bool):
  """Softmax over all experts in fp32, then top-k (and renormalise when asked).

  router_logits: [T, E] -> (probs [T, E] fp32, weights [T, k] fp32, experts [T, k] int32).
  """
  probs = jax.nn.softmax(router_logits.astype(jnp.float32), axis=-1)
  weights, experts = jax.lax.top_k(probs, top_k)
  if normalize:
    weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
  return probs, weights, experts


def _experts_ragged(x, experts, weights, w_gate, w_up, w_down):
  """x: [T, D]; experts/weights: [T, k]; w_gate/w_up: [E, D, F]; w_down: [E, F, D]."""
  num_tokens, top_k = experts.shape
  num_experts = w_gate.shape[0]
  flat = experts.reshape(-1)  # [T*k]
  order = jnp.argsort(flat, stable=True)
  rows = x[order // top_k]  # [T*k, D] sorted by expert
  group_sizes = jnp.bincount(flat, length=num_experts).astype(jnp.int32)
  gate = jax.lax.ragged_dot(rows, w_gate, group_sizes)
  up = jax.lax.ragged_dot(rows, w_up, group_sizes)
  out_sorted = jax.lax.ragged_dot(jax.nn.silu(gate) * up, w_down, group_sizes)  # [T*k, D]
  out = jnp.zeros_like(out_sorted).at[order].set(out_sorted).reshape(num_tokens, top_k, -1)
  return jnp.einsum("TKD,TK->TD", out, weights.astype(out.dtype))


def _experts_dense(x, experts, weights, w_gate, w_up, w_down):
  """Every expert on every token; combine with a [T, E] weight matrix that is 0 off top-k."""
  num_experts = w_gate.shape[0]
  combine = jnp.einsum("TK,TKE->TE", weights, jax.nn.one_hot(experts, num_experts))
  gate = jnp.einsum("TD,EDF->ETF", x, w_gate)
  up = jnp.einsum("TD,EDF->ETF", x, w_up)
  out = jnp.einsum("ETF,EFD->ETD", jax.nn.silu(gate) * up, w_down)
  return jnp.einsum("ETD,TE->TD", out, combine.astype(out.dtype))


def _experts_per_shard(combine, x, experts, weights, w_gate, w_up, w_down):
  """`combine` over each device's own rows: x [B, T, D], experts / weights [B, T, k].

  Under a mesh the rows are split over the batch axes, but the ragged path sorts the flat
  token list; left to GSPMD, that sort and the gather after it run over the GLOBAL token list
  on every device (256 GiB per chip for 128 rows of 64k tokens of Qwen3-30B-A3B). In
  `shard_map` each device sorts only its tokens; the expert weights are gathered whole per
  layer (FSDP-style; with expert parallelism an all-to-all dispatch would move tokens
  instead of weights).
  """
  def local(x, experts, weights, *expert_weights):
    b, t, d = x.shape
    flat = lambda a: a.reshape(b * t, -1)  # noqa: E731
    return combine(flat(x), flat(experts), flat(weights), *expert_weights).reshape(b, t, d)
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return local(x, experts, weights, w_gate, w_up, w_down)
  rows = P(BATCH, None, None)
  return jax.shard_map(local, in_specs=(rows, rows, rows, P(), P(), P()), out_specs=rows,
                       check_vma=False)(x, experts, weights, w_gate, w_up, w_down)


class MoE(nn.Module):
  """Top-k routed SwiGLU experts, no shared expert. Returns (y, router stats for aux loss)."""
  cfg: Qwen3Config

  @nn.compact
  def __call__(self, x, segment_ids):
    cfg = self.cfg
    pdt, cdt = _dtype(cfg.param_dtype), _dtype(cfg.compute_dtype)
    d, e, f = cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size
    router = self.param("router", _INIT, (d, e), pdt)
    w_gate = self.param("gate_proj", _INIT, (e, d, f), pdt).astype(cdt)
    w_up = self.param("up_proj", _INIT, (e, d, f), pdt).astype(cdt)
    w_down = self.param("down_proj", _INIT, (e, f, d), pdt).astype(cdt)

    b, t, _ = x.shape
    tokens = x.reshape(b * t, d)
    logits = jnp.einsum("TD,DE->TE", tokens, router.astype(cdt))
    probs, weights, experts = route(logits, cfg.num_experts_per_tok, cfg.norm_topk_prob)
    combine = _experts_ragged if cfg.moe_impl == "ragged" else _experts_dense
    y = _experts_per_shard(combine, x, experts.reshape(b, t, -1),
                           weights.astype(cdt).reshape(b, t, -1), w_gate, w_up, w_down)
    # Switch load-balancing statistics over non-padding tokens (summed; finished in Qwen3).
    valid = (segment_ids.reshape(-1) > 0).astype(jnp.float32)  # [T]
    counts = jnp.einsum("TKE,T->E", jax.nn.one_hot(experts, e), valid)
    prob_sums = jnp.einsum("TE,T->E", probs, valid)
    return y, (counts, prob_sums, jnp.sum(valid))


class DecoderLayer(nn.Module):
  """Pre-norm block; scanned over layers with carry (x, router statistics) and the layer's
  KV cache (or None) as the scanned input and output."""
  cfg: Qwen3Config

  @nn.compact
  def __call__(self, carry, positions, segment_ids, cache=None):
    cfg = self.cfg
    x, stats = carry
    h = RMSNorm(cfg, name="input_norm")(x)
    y, cache = Attention(cfg, name="attn")(h, positions, segment_ids, cache)
    x = x + y
    h = RMSNorm(cfg, name="post_attn_norm")(x)
    if cfg.is_moe:
      y, layer_stats = MoE(cfg, name="moe")(h, segment_ids)
      stats = jax.tree.map(jnp.add, stats, layer_stats)
    else:
      y = MLP(cfg, name="mlp")(h)
    x = shard(x + y, BATCH, None, None)
    return (x, stats), cache


class Qwen3(nn.Module):
  """Qwen3 causal LM body. `__call__` -> final-normed hidden [B, T, D] (compute dtype)."""
  cfg: Qwen3Config

  def setup(self):
    cfg = self.cfg
    pdt = _dtype(cfg.param_dtype)
    self.embedding = self.param(
        "embed", lambda rng, s, dt: {"embedding": _INIT(rng, s, dt)},
        (cfg.vocab_size, cfg.hidden_size), pdt)
    layer = DecoderLayer
    if cfg.remat == "full":
      layer = nn.remat(layer, prevent_cse=False)
    elif cfg.remat != "none":
      raise ValueError(f"model.remat must be 'none' or 'full', got {cfg.remat!r}")
    self.layers = nn.scan(
        layer, variable_axes={"params": 0}, split_rngs={"params": True},
        in_axes=(nn.broadcast, nn.broadcast, 0), length=cfg.num_layers)(cfg, name="layers")
    self.final_norm = RMSNorm(cfg, name="final_norm")
    if not cfg.tie_word_embeddings:
      self.lm_head = self.param(
          "lm_head", lambda rng, s, dt: {"kernel": _INIT(rng, s, dt)},
          (cfg.hidden_size, cfg.vocab_size), pdt)

  def _body(self, tokens, positions, segment_ids, cache):
    """-> (final-normed hidden [B, T, D], router statistics, cache {"k", "v": [L, B, K, S, H]}
    updated, or None)."""
    cfg = self.cfg
    x = jnp.take(self.embedding["embedding"], tokens, axis=0).astype(_dtype(cfg.compute_dtype))
    x = shard(x, BATCH, None, None)
    e = max(cfg.num_experts, 1)
    stats = (jnp.zeros((e,)), jnp.zeros((e,)), jnp.zeros(()))
    (x, stats), cache = self.layers((x, stats), positions, segment_ids, cache)
    return self.final_norm(x), stats, cache

  def hidden_and_aux(self, tokens, positions, segment_ids):
    """tokens/positions/segment_ids: [B, T] -> (hidden [B, T, D], router aux loss scalar)."""
    hidden, stats, _ = self._body(tokens, positions, segment_ids, None)
    return hidden, router_aux_loss(stats, self.cfg)

  def with_cache(self, tokens, positions, segment_ids, cache):
    """Prefill or decode (see `Attention`): [B, T] inputs and the stacked cache
    {"k", "v": [L, B, K, S, H]} -> (final-normed hidden [B, T, D], the updated cache)."""
    hidden, _, cache = self._body(tokens, positions, segment_ids, cache)
    return hidden, cache

  def __call__(self, tokens, positions, segment_ids):
    return self.hidden_and_aux(tokens, positions, segment_ids)[0]

  def unembed(self) -> jax.Array:
    """The full [D, V] output projection (the tied embedding transposed, or lm_head).

    Always all V columns: `logits` is the full-vocabulary HF-parity reference.
    """
    if self.cfg.tie_word_embeddings:
      return self.embedding["embedding"].T
    return self.lm_head["kernel"]

  def logits(self, hidden: jax.Array) -> jax.Array:
    """hidden [B, T, D] -> fp32 logits [B, T, V]. Materialises the vocab axis: tests/eval."""
    return project(hidden.astype(jnp.float32), self.unembed().astype(jnp.float32))  # BTD,DV


def router_aux_loss(stats, cfg: Qwen3Config) -> jax.Array:
  """HF's load-balancing loss: E * sum_e f_e * P_e over all layers' non-padding tokens.

  f_e: fraction of (token, slot) assignments to expert e; P_e: mean router probability.
  Multiplied by `router_aux_loss_coef` (0 disables it).
  """
  if not cfg.is_moe or cfg.router_aux_loss_coef == 0.0:
    return jnp.zeros((), jnp.float32)
  counts, prob_sums, num_valid = stats
  denom = jnp.maximum(num_valid, 1.0)  # num_valid is summed over layers already
  loss = cfg.num_experts * jnp.sum((counts / denom) * (prob_sums / denom))
  return cfg.router_aux_loss_coef * loss


def forward_logits(params, cfg: Qwen3Config, tokens, positions, segment_ids) -> jax.Array:
  """Convenience: fp32 logits [B, T, V] over the FULL vocabulary (materialises the vocab
  axis; the HF-parity reference)."""
  model = Qwen3(cfg)
  hidden = model.apply({"params": params}, tokens, positions, segment_ids)
  return model.apply({"params": params}, hidden, method=Qwen3.logits)


def unembed_matrix(params, cfg: Qwen3Config, vocab: RestrictedVocab | None = None) -> jax.Array:
  """The [D, V'] output projection from a params tree: all V columns, or the columns of
  `vocab`'s ids (a gather, so gradients reach only those columns)."""
  if cfg.tie_word_embeddings:
    table = params["embed"]["embedding"]  # [V, D]
    if vocab is not None:
      table = jnp.take(table, restricted_vocab.ids_array(vocab), axis=0)  # [V', D]
    return table.T
  kernel = params["lm_head"]["kernel"]  # [D, V]
  if vocab is not None:
    kernel = jnp.take(kernel, restricted_vocab.ids_array(vocab), axis=1)  # [D, V']
  return kernel


def init_params(cfg: Qwen3Config, rng: jax.Array):
  """Random parameters (normal(0.02), norms at 1) as a nested dict."""
  dummy = jnp.zeros((1, 1), jnp.int32)
  return Qwen3(cfg).init(rng, dummy, dummy, dummy + 1)["params"]


def abstract_params(cfg: Qwen3Config):
  """Shape/dtype tree of the parameters without allocating them."""
  return jax.eval_shape(lambda rng: init_params(cfg, rng), jax.random.key(0))
