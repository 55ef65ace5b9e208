"""Qwen3 and Qwen3-MoE decoder in Flax Linen, numerically matching HF transformers 5.x.

Why Linen: parameters are a plain nested dict, so one ordered regex table shards them
(`carr_jax.model.sharding`), `jax.eval_shape(init)` gives the abstract tree of a 30B model for
free, orbax saves it as is, and the HF mapping is a pure function of that dict. Layers are
stacked with `nn.scan` (one compiled layer body, leading L axis on every layer parameter),
which keeps compile time flat in depth; `remat` (`carr_jax.model.remat`) chooses what of each
layer's forward the backward keeps and what it recomputes.

Inputs are `tokens`, `positions` and `segment_ids`, all [B, T]. Segment ids let several
sequences share a row: attention is causal and never crosses a segment; id 0 is padding.
Positions are given by the caller (restarting at 0 per segment, see `carr_jax.rl.packing`).
Prefill and decode (`carr_jax.model.decode`) run these same layers with a KV cache (`with_cache`).

Numerics: parameters are stored in `param_dtype` and cast to `compute_dtype` for matmuls;
RMSNorm, RoPE tables, attention softmax, router softmax and logits are fp32, as in HF.

Restricted output vocabulary (`carr_jax.model.restricted_vocab`, V' sorted ids; None = all
V): the train step and the sampler use `unembed_matrix(params, cfg, vocab)`, the [D, V']
columns of those ids. `Qwen3.logits` and `forward_logits` stay full-vocabulary on purpose:
they are the HF-parity reference. The MoE layer: `carr_jax.model.moe`.
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from carr_jax.model import attention, remat, restricted_vocab
from carr_jax.model.config import Qwen3Config
from carr_jax.model.moe import INIT, MoE, router_out
from carr_jax.model.restricted_vocab import RestrictedVocab
from carr_jax.model.sharding import BATCH, shard


def _dtype(name: str) -> Any:
  return jnp.dtype(name)


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

  Returns (y [B, T, D], the updated cache (every layer's) or None, the prefix's y [1, P, D] or
  None).
  Without a cache (training) the chunk attends within itself (`carr_jax.model.attention.attend`).
  A cache is every layer's {"k", "v": [L, B, K, S, H]} and `layer` this one's index, a row's
  columns being its positions: the chunk's keys and values are written at this layer's columns
  `positions`, then either the chunk is each row's prompt from column 0 (T > 1, the prefill of an empty cache: it attends within itself,
  as in training) or it is one token per row (T = 1, decoding: it attends over the cache
  columns up to its position). A cache may also hold "prefix_k" / "prefix_v" [L, P, K, H], the
  keys and values of P tokens that precede every row (`decode.prefill_prefix`): the rows'
  columns are then positions minus P, and prefill and decoding also attend to all P.
  With `prefix` (the normed hidden [1, P, D] of tokens that precede every row, at positions
  0 .. P-1; no cache) the prefix attends within itself once and the rows' segment 1 also
  attends to it (`attention.attend_after_prefix`).
  """
  cfg: Qwen3Config

  @nn.compact
  def __call__(self, x, positions, segment_ids, cache=None, prefix=None, layer=None):
    cfg = self.cfg
    pdt, cdt = _dtype(cfg.param_dtype), _dtype(cfg.compute_dtype)
    d, n, k, h = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    wq = self.param("q_proj", INIT, (d, n, h), pdt)
    wk = self.param("k_proj", INIT, (d, k, h), pdt)
    wv = self.param("v_proj", INIT, (d, k, h), pdt)
    wo = self.param("o_proj", INIT, (n, h, d), pdt)
    q_scale = self.param("q_norm", nn.initializers.ones, (h,), pdt)
    k_scale = self.param("k_norm", nn.initializers.ones, (h,), pdt)

    def qkv(inputs, pos, rows):
      """inputs [B, T, D], pos [B, T] -> q [B, T, K, G, H], key / value [B, T, K, H]."""
      q = checkpoint_name(project(inputs, wq.astype(cdt)), "q_proj")  # BTD,DNH->BTNH
      key = checkpoint_name(project(inputs, wk.astype(cdt)), "k_proj")  # BTD,DKH->BTKH
      value = checkpoint_name(project(inputs, wv.astype(cdt)), "v_proj")  # BTD,DKH->BTKH
      q = shard(rms_norm(q, q_scale, cfg.rms_norm_eps, cdt), rows, None, "tensor", None)
      key = shard(rms_norm(key, k_scale, cfg.rms_norm_eps, cdt), rows, None, "tensor", None)
      q, key = rope(q, pos, cfg.rope_theta), rope(key, pos, cfg.rope_theta)
      return q.reshape(*q.shape[:2], k, n // k, h), key, value  # query head n = kv head * G + g

    def output(out, rows):  # [B, T, K, G, H] -> [B, T, D]
      out = shard(out.reshape(*out.shape[:2], n, h), rows, None, "tensor", None)
      return checkpoint_name(project(out, wo.astype(cdt), n_in=2), "o_proj")  # BTNH,NHD->BTD

    q, key, value = qkv(x, positions, BATCH)
    if prefix is not None:  # one row, replicated: every row shares it
      impl = attention.prefix_impl(cfg.attention, cdt)
      pos = jnp.arange(prefix.shape[1], dtype=jnp.int32)[None]  # [1, P]
      q_p, k_p, v_p = qkv(prefix, pos, None)
      y_prefix = output(attention.attend(q_p, k_p, v_p, jnp.ones_like(pos), impl), None)
      out = attention.attend_after_prefix(q, key, value, segment_ids, k_p[0], v_p[0], impl)
      return output(out, BATCH), cache, y_prefix
    if cache is None:
      return output(attention.attend(q, key, value, segment_ids, cfg.attention), BATCH), None, None
    shared = ((cache["prefix_k"][layer], cache["prefix_v"][layer]) if "prefix_k" in cache
              else None)
    columns = positions - (0 if shared is None else shared[0].shape[0])
    cache = {**cache, **attention.write_cache(cache, key, value, columns, layer)}
    if x.shape[1] == 1:
      out = attention.attend_cache(q, cache["k"][layer], cache["v"][layer], columns, shared)
    elif shared is None:
      out = attention.attend(q, key, value, segment_ids, cfg.attention)
    else:
      out = attention.attend_after_prefix(q, key, value, segment_ids, *shared,
                                          attention.prefix_impl(cfg.attention, cdt))
    return output(out, BATCH), cache, None


class MLP(nn.Module):
  """SwiGLU: down(silu(gate(x)) * up(x)); x [B, T, D], its rows sharded as `rows` says."""
  cfg: Qwen3Config

  @nn.compact
  def __call__(self, x, rows=BATCH):
    cfg = self.cfg
    pdt, cdt = _dtype(cfg.param_dtype), _dtype(cfg.compute_dtype)
    d, f = cfg.hidden_size, cfg.intermediate_size
    gate = self.param("gate_proj", INIT, (d, f), pdt).astype(cdt)
    up = self.param("up_proj", INIT, (d, f), pdt).astype(cdt)
    down = self.param("down_proj", INIT, (f, d), pdt).astype(cdt)
    hidden = jax.nn.silu(project(x, gate)) * project(x, up)  # BTD,DF->BTF
    hidden = shard(hidden, rows, None, "tensor")
    return project(hidden, down)  # BTF,FD->BTD


class DecoderLayer(nn.Module):
  """Pre-norm block; scanned over layers with carry (x, router statistics, the shared prefix's
  hidden [1, P, D] or None, every layer's KV cache or None). Scanned input: the layer's index
  (with a cache; else None) and the experts to replay [B, T, k] (or None); scanned output: the
  experts used [B, T, k] (None for a dense model)."""
  cfg: Qwen3Config

  @nn.compact
  def __call__(self, carry, positions, segment_ids, scanned=(None, None)):
    cfg = self.cfg
    x, stats, prefix, cache = carry
    layer, routes = scanned
    experts = None
    input_norm = RMSNorm(cfg, name="input_norm")
    post_attn_norm = RMSNorm(cfg, name="post_attn_norm")
    y, cache, y_prefix = Attention(cfg, name="attn")(
        input_norm(x), positions, segment_ids, cache,
        None if prefix is None else input_norm(prefix), layer)
    x = x + y
    h = post_attn_norm(x)
    if cfg.is_moe:
      y, layer_stats, experts = MoE(cfg, name="moe")(h, segment_ids, routes)
      stats = jax.tree.map(jnp.add, stats, layer_stats)
    else:
      mlp = MLP(cfg, name="mlp")
      y = mlp(h)
      if prefix is not None:
        prefix = prefix + y_prefix
        prefix = shard(prefix + mlp(post_attn_norm(prefix), None), None, None, None)
    x = shard(x + y, BATCH, None, None)
    return (x, stats, prefix, cache), experts


class Qwen3(nn.Module):
  """Qwen3 causal LM body. `__call__` -> final-normed hidden [B, T, D] (compute dtype)."""
  cfg: Qwen3Config

  def setup(self):
    cfg = self.cfg
    pdt = _dtype(cfg.param_dtype)
    self.embedding = self.param(
        "embed", lambda rng, s, dt: {"embedding": INIT(rng, s, dt)},
        (cfg.vocab_size, cfg.hidden_size), pdt)
    layer, saveable = DecoderLayer, remat.policy(cfg.remat).saveable
    if saveable is not None:
      layer = nn.remat(layer, prevent_cse=False, policy=saveable)
    self.layers = nn.scan(
        layer, variable_axes={"params": 0}, split_rngs={"params": True},
        in_axes=(nn.broadcast, nn.broadcast, 0), length=cfg.num_layers)(cfg, name="layers")
    self.final_norm = RMSNorm(cfg, name="final_norm")
    if not cfg.tie_word_embeddings:
      self.lm_head = self.param(
          "lm_head", lambda rng, s, dt: {"kernel": INIT(rng, s, dt)},
          (cfg.hidden_size, cfg.vocab_size), pdt)

  def _body(self, tokens, positions, segment_ids, cache, prefix_tokens=None, routes=None):
    """routes: [L, B, T, k] experts to replay, or None -> (final-normed hidden [B, T, D],
    router statistics, cache {"k", "v": [L, B, K, S, H]} updated or None, the experts used
    [L, B, T, k] int32 or None)."""
    cfg = self.cfg
    embed = lambda ids: jnp.take(  # noqa: E731
        self.embedding["embedding"], ids, axis=0).astype(_dtype(cfg.compute_dtype))
    x = shard(embed(tokens), BATCH, None, None)
    prefix = None
    if prefix_tokens is not None and prefix_tokens.shape[0]:
      if cfg.is_moe or cache is not None:
        raise ValueError("a shared prefix (batch.prefix_multiple > 0) is for dense models "
                         "in training, without a KV cache")
      prefix = embed(prefix_tokens)[None]  # [1, P, D]
    e = max(cfg.num_experts, 1)
    stats = (jnp.zeros((e,)), jnp.zeros((e,)), jnp.zeros(()), jnp.zeros(()))
    if routes is not None and not cfg.is_moe:
      raise ValueError("routes to replay are for a mixture-of-experts model")
    layers = None if cache is None else jnp.arange(cfg.num_layers, dtype=jnp.int32)
    (x, stats, _, cache), experts = self.layers((x, stats, prefix, cache), positions,
                                                segment_ids, (layers, routes))
    return self.final_norm(x), stats, cache, experts

  def hidden_and_aux(self, tokens, positions, segment_ids, prefix_tokens=None, routes=None):
    """tokens/positions/segment_ids: [B, T] -> (hidden [B, T, D], `moe.RouterOut`: the router
    aux loss and the replayed routes that differ from the routers' own).

    With `prefix_tokens` [P] (P > 0): the tokens that precede every row, at positions
    0 .. P-1 of its first segment; they are computed once, and the hidden states are those
    of the rows' own columns (as if each row began with the prefix). With `routes` [L, B, T, k]
    (MoE only): every layer uses those experts per token (`moe.route`'s replay).
    """
    hidden, stats, _, _ = self._body(tokens, positions, segment_ids, None, prefix_tokens,
                                     routes)
    return hidden, router_out(stats, self.cfg)

  def routes(self, tokens, positions, segment_ids):
    """[B, T] inputs -> the experts each layer's router picks [L, B, T, k] int32 (MoE only)."""
    if not self.cfg.is_moe:
      raise ValueError("a dense model has no routes")
    return self._body(tokens, positions, segment_ids, None)[3]

  def with_cache(self, tokens, positions, segment_ids, cache):
    """Prefill or decode (see `Attention`): [B, T] inputs and the stacked cache
    {"k", "v": [L, B, K, S, H]} (and "prefix_k", "prefix_v" [L, P, K, H] when the rows
    continue a shared prefix) -> (final-normed hidden [B, T, D], the updated {"k", "v"}, the
    experts each MoE layer routed each token to [L, B, T, k] int32, or None: dense)."""
    hidden, _, cache, experts = self._body(tokens, positions, segment_ids, cache)
    return hidden, cache, experts

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
