"""Causal GQA self-attention over packed rows: one function, chosen implementations.

`attend(q, k, v, segment_ids, impl)` is what `carr_jax.model.qwen3.Attention` calls (training and
prefill); decoding writes a KV cache (`write_cache`) and reads it (`attend_cache`, dense).
Rows that continue a prefix they all share, computed once (`batch.prefix_multiple`), go
through `attend_after_prefix` (dense or blockwise) in training and prefill and `attend_cache`
with `prefix` in decoding: each merges the rows' own softmax with the one over the prefix's
keys by log-sum-exp.
Query head n = kv head * G + g reads kv head n // G (GQA). Token t of a row attends to token
s when s <= t, both carry the same segment id, and that id is > 0 (0 marks padding). Rows of
padding produce finite garbage that callers mask out.

Implementations (`Qwen3Config.attention`):
- "dense": the reference. Materializes the [B, K, G, T, S] fp32 scores, so its memory grows
  as T^2 (a 64k row of Qwen3-4B would need hundreds of GiB).
- "blockwise": online-softmax attention over blocks of at most `max_block()` queries and keys,
  pure JAX, with its own backward pass (recomputes each block's probabilities from the saved
  log-sum-exp, as FlashAttention-2 does: https://arxiv.org/abs/2307.08691). It never holds
  more than one [B, K, G, block, block] score block, and it skips key blocks entirely above the
  causal diagonal, so it does about half the dense work. Runs on every backend; the CPU
  default.
- "splash": the TPU kernel, "cudnn": the GPU kernel (`carr_jax.model.fused_attention`); each is
  an error on any other platform, and "cudnn" on inputs other than bf16 / fp16 (cuDNN's fused
  attention has no fp32 kernel).
- "auto": by the platform the step is compiled for: "splash" on TPU, "cudnn" on GPU (bf16 /
  fp16 inputs; "blockwise" for fp32), "blockwise" elsewhere; keeps configs portable.

The platform is known at trace time from the mesh the step is traced under (`jax.set_mesh`):
its devices' platform, which the abstract mesh carries. A deviceless compile for a TPU
topology from a CPU host (`carr_jax.jobs.aot`) traces under a mesh of TPU device descriptions, so
"auto" picks splash there. With no mesh set, the default backend decides.

Numerics of dense and blockwise: scores, the softmax and the accumulators are fp32 whatever
the inputs' dtype, the probabilities are cast to the inputs' dtype before the product with V
(as dense does), and the output has the inputs' dtype.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from carr_jax.model import fused_attention, remat

# The most queries / keys per block of "blockwise", by the platform traced for (rows are padded
# to a multiple of the block); DEFAULT_BLOCK on platforms not listed. On the CPU the smaller
# block is faster (benchmarks/README.md `## attention`): fewer score entries above the causal
# diagonal, and a smaller [B, K, G, block, block] score block to keep in cache.
BLOCKS = {"cpu": 192}
DEFAULT_BLOCK = 512
IMPLEMENTATIONS = ("auto", "dense", "blockwise", "splash", "cudnn")
KERNEL_PLATFORMS = {"splash": "tpu", "cudnn": "gpu"}  # fused kernel -> the platform it needs
KERNEL_DTYPES = {"cudnn": ("bfloat16", "float16")}  # fused kernel -> the input dtypes it takes
_NEG_INF = float(jnp.finfo(jnp.float32).min)


def trace_platform() -> str:
  """The platform being traced for: the current mesh's devices', else the default backend."""
  mesh = jax.sharding.get_abstract_mesh()
  device = None if mesh.empty else mesh.abstract_device
  return device.platform if device is not None else jax.default_backend()


def resolve(impl: str, platform: str | None = None, dtype=None) -> str:
  """A `Qwen3Config.attention` value -> the implementation that runs on `platform`
  (default: `trace_platform()`) for inputs of `dtype` (None: any)."""
  if impl not in IMPLEMENTATIONS:
    raise ValueError(f"model.attention must be one of {IMPLEMENTATIONS}, got {impl!r}")
  platform = platform or trace_platform()
  name = None if dtype is None else jnp.dtype(dtype).name
  if impl == "auto":
    by_platform = {p: kernel for kernel, p in KERNEL_PLATFORMS.items()}
    kernel = by_platform.get(platform, "blockwise")
    return "blockwise" if _refuses(kernel, name) else kernel
  needed = KERNEL_PLATFORMS.get(impl)
  if needed is not None and platform != needed:
    raise ValueError(f"model.attention={impl!r} runs only on {needed.upper()}, but this step "
                     f"is compiled for {platform!r}; use 'auto' or 'blockwise'")
  if _refuses(impl, name):
    raise ValueError(f"model.attention={impl!r} takes {' or '.join(KERNEL_DTYPES[impl])} "
                     f"inputs, got {name} (model.compute_dtype); use 'auto' or 'blockwise'")
  return impl


def _refuses(kernel: str, dtype_name: str | None) -> bool:
  """Whether `kernel` has no kernel for inputs of `dtype_name` (None: not known yet)."""
  takes = KERNEL_DTYPES.get(kernel)
  return takes is not None and dtype_name is not None and dtype_name not in takes


def attend(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array,
           impl: str = "auto") -> jax.Array:
  """q [B, T, K, G, H], k / v [B, T, K, H], segment_ids [B, T] -> out [B, T, K, G, H]."""
  kernels = {"dense": dense, "blockwise": blockwise, "splash": fused_attention.splash,
             "cudnn": fused_attention.cudnn}
  return kernels[resolve(impl, dtype=q.dtype)](q, k, v, segment_ids)


def write_cache(cache: dict, key: jax.Array, value: jax.Array, columns: jax.Array,
                layer: jax.Array) -> dict:
  """key / value [B, T, K, H] stored at layer `layer` ([] int), columns [B, T] of the stacked
  cache k / v [L, B, K, S, H], in place (the layers' scan carries the whole cache: scanning
  over it as an input and an output copied every layer's cache twice per decoding step).

  The cache keeps the kv-head axis before time so each (row, head) is one contiguous [S, H]
  matrix, the layout XLA's CPU dots want ([B, S, K, H] made XLA transpose a copy of every
  layer's cache at each decoding step).
  """
  rows = jnp.arange(key.shape[0])[:, None]  # [B, 1]
  return {name: cache[name].at[layer, rows, :, columns].set(x.astype(cache[name].dtype))
          for name, x in (("k", key), ("v", value))}


def attend_cache(q: jax.Array, k: jax.Array, v: jax.Array, q_col: jax.Array,
                 prefix: tuple[jax.Array, jax.Array] | None = None) -> jax.Array:
  """Queries over a KV cache, dense: q [B, T, K, G, H], k / v [B, K, S, H], q_col [B, T] the
  queries' cache columns -> out [B, T, K, G, H]. Query t reads the columns <= q_col[b, t]
  (decoding: T = 1, and every column below a row's length holds its own tokens). With
  `prefix` (keys / values [P, K, H] that precede every row, the rows' column c being position
  P + c) every query also reads all P of them: the two softmaxes merge by log-sum-exp.
  """
  s = jnp.einsum("BTKGH,BKSH->BKGTS", q, k, preferred_element_type=jnp.float32)
  s = s.astype(jnp.float32) * (q.shape[-1] ** -0.5)
  allowed = jnp.arange(k.shape[2])[None, None, :] <= q_col[:, :, None]  # [B, T, S]
  s = jnp.where(allowed[:, None, None], s, _NEG_INF)
  lse = jax.nn.logsumexp(s, axis=-1)  # [B, K, G, T]
  probs = jnp.exp(s - lse[..., None]).astype(q.dtype)  # [B, K, G, T, S]
  out = jnp.einsum("BKGTS,BKSH->BTKGH", probs, v)
  if prefix is None:
    return out
  return _merge(out, jnp.einsum("BKGT->BTKG", lse), *_prefix_lse(q, *prefix), q.dtype)


def _merge(out_a, lse_a, out_b, lse_b, dtype):
  """Attention over two disjoint key sets, each part out [B, T, K, G, H] with its log-sum-exp
  [B, T, K, G] (-inf-like: no key) -> the attention over their union, in `dtype`."""
  lse = jnp.logaddexp(lse_a, lse_b)
  share = lambda part: jnp.exp(part - lse)[..., None]  # noqa: E731
  out = share(lse_a) * out_a.astype(jnp.float32) + share(lse_b) * out_b.astype(jnp.float32)
  return out.astype(dtype)


def mask(q_seg: jax.Array, k_seg: jax.Array, q_pos: jax.Array, k_pos: jax.Array) -> jax.Array:
  """q_seg [B, t], k_seg [B, s], q_pos [t], k_pos [s] (row columns) -> [B, 1, 1, t, s] bool."""
  causal = k_pos[None, :] <= q_pos[:, None]  # [t, s]
  same = (q_seg[:, :, None] == k_seg[:, None, :]) & (q_seg > 0)[:, :, None]  # [B, t, s]
  return (causal[None] & same)[:, None, None]


def _scores(q: jax.Array, k: jax.Array) -> jax.Array:
  """q [B, t, K, G, H], k [B, s, K, H] -> scaled fp32 scores [B, K, G, t, s]."""
  s = jnp.einsum("BTKGH,BSKH->BKGTS", q, k, preferred_element_type=jnp.float32)
  return s.astype(jnp.float32) * (q.shape[-1] ** -0.5)


def _dense_lse(q, k, v, allowed):
  """q [B, T, K, G, H], k / v [B, S, K, H], allowed (broadcasts to [B, 1, 1, T, S]) ->
  (out [B, T, K, G, H], log-sum-exp of the allowed scores [B, K, G, T] fp32)."""
  scores = jnp.where(allowed, _scores(q, k), _NEG_INF)
  lse = jax.nn.logsumexp(scores, axis=-1)
  probs = jnp.exp(scores - lse[..., None]).astype(q.dtype)  # [B, K, G, T, S]
  return jnp.einsum("BKGTS,BSKH->BTKGH", probs, v), lse


def dense(q, k, v, segment_ids):
  """The reference: every score at once. Shapes as in `attend`."""
  cols = jnp.arange(q.shape[1])
  return _dense_lse(q, k, v, mask(segment_ids, segment_ids, cols, cols))[0]


def prefix_impl(impl: str, dtype=None, platform: str | None = None) -> str:
  """The implementation `attend_after_prefix` uses for `Qwen3Config.attention` = `impl`:
  "dense" or "blockwise" (a fused kernel's log-sum-exp is not exposed, so "auto" takes
  blockwise where it would pick one; naming a kernel is an error). Arguments as `resolve`'s."""
  name = resolve(impl, platform, dtype)
  if name in KERNEL_PLATFORMS:
    if impl != "auto":
      raise ValueError(f"model.attention={impl!r} cannot attend after a shared prefix "
                       f"(batch.prefix_multiple > 0); use 'auto', 'blockwise' or 'dense'")
    return "blockwise"
  return name


def attend_after_prefix(q, k, v, segment_ids, k_prefix, v_prefix, impl: str = "auto"):
  """Rows that continue one shared prefix: q [B, T, K, G, H], k / v [B, T, K, H],
  segment_ids [B, T] are the columns after it; k_prefix / v_prefix [P, K, H] its keys and
  values, computed once. -> out [B, T, K, G, H].

  Segment 1 (the segment the prefix begins) attends to all P prefix keys and causally to
  itself; other segments and padding as in `attend`. That is `attend` on the whole rows
  [prefix, row] at the row's columns: the softmax over the prefix keys (`_prefix_lse`) and
  the one over the row's own keys are merged by their log-sum-exps.
  """
  if prefix_impl(impl, q.dtype) == "dense":
    cols = jnp.arange(q.shape[1])
    out_own, lse_own = _dense_lse(q, k, v, mask(segment_ids, segment_ids, cols, cols))
  else:
    out_own, lse_own = blockwise_lse(q, k, v, segment_ids)
  out_pre, lse_pre = _prefix_lse(q, k_prefix, v_prefix)
  lse_pre = jnp.where((segment_ids == 1)[:, :, None, None], lse_pre, _NEG_INF)
  return _merge(out_own, jnp.einsum("BKGT->BTKG", lse_own), out_pre, lse_pre, q.dtype)


def _prefix_lse(q, k_prefix, v_prefix):
  """Every query of q [B, T, K, G, H] over all keys / values [P, K, H] ->
  (out [B, T, K, G, H], log-sum-exp [B, T, K, G] fp32). The rows share the keys, so each kv
  head is one [B*T*G, H] x [H, P] product (broadcasting them per row: 1.7x slower on the
  CPU)."""
  b, t, nk, g, h = q.shape
  rows = jnp.moveaxis(q, 2, 0).reshape(nk, b * t * g, h)  # [K, M, H]
  scores = jnp.matmul(rows, jnp.transpose(k_prefix, (1, 2, 0)),
                      preferred_element_type=jnp.float32) * (h ** -0.5)  # [K, M, P]
  lse = jax.nn.logsumexp(scores, axis=-1)  # [K, M]
  probs = jnp.exp(scores - lse[..., None]).astype(q.dtype)
  out = jnp.matmul(probs, jnp.transpose(v_prefix, (1, 0, 2)))  # [K, M, H]
  return (jnp.moveaxis(out.reshape(nk, b, t, g, h), 0, 2),
          jnp.moveaxis(lse.reshape(nk, b, t, g), 0, 2))


def max_block(platform: str | None = None) -> int:
  """The most queries / keys per block of "blockwise" on `platform` (default:
  `trace_platform()`)."""
  return BLOCKS.get(platform or trace_platform(), DEFAULT_BLOCK)


def block_size(t: int, most: int) -> int:
  """The block of "blockwise" for rows of t tokens: the fewest blocks of at most `most` that
  cover t, made equal and rounded up to a multiple of 8 (640 at most 512 -> 2 x 320, not
  2 x 512 of which 384 columns are padding)."""
  blocks = -(-t // most)
  if blocks == 1:
    return t
  per_block = -(-t // blocks)
  return min(most, -(-per_block // 8) * 8)


def blockwise(q, k, v, segment_ids):
  """Online-softmax attention in blocks of `block_size(T, max_block())`. Shapes as in
  `attend`."""
  return blockwise_lse(q, k, v, segment_ids)[0]


def blockwise_lse(q, k, v, segment_ids):
  """`blockwise` and the log-sum-exp of each query's allowed scores, [B, K, G, T] fp32 (0
  for a query that attends to nothing); both differentiable."""
  t = q.shape[1]
  blk = block_size(t, max_block())
  pad = -t % blk
  if pad:  # padded columns get segment 0: they attend to nothing and nothing attends to them
    widths = lambda x: [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2)  # noqa: E731
    q, k, v = (jnp.pad(x, widths(x)) for x in (q, k, v))
    segment_ids = jnp.pad(segment_ids, [(0, 0), (0, pad)])
  out, lse = _flash(q, k, v, segment_ids, blk)
  return out[:, :t], lse[..., :t]


def _block(x: jax.Array, i, blk: int) -> jax.Array:
  """Block i (columns i*blk ... i*blk + blk - 1) of x [B, T, ...]."""
  return jax.lax.dynamic_slice_in_dim(x, i * blk, blk, axis=1)


def _block_mask(seg_i, seg_j, i, j, blk: int) -> jax.Array:
  """`mask` of query block i against key block j: [B, 1, 1, blk, blk] bool."""
  cols = jnp.arange(blk)
  return mask(seg_i, seg_j, i * blk + cols, j * blk + cols)


def _probs(q_i, k_j, seg_i, seg_j, i, j, blk, lse_i):
  """exp(scores - lse) of block (i, j), 0 where masked: [B, K, G, blk, blk] fp32."""
  allowed = _block_mask(seg_i, seg_j, i, j, blk)
  return jnp.where(allowed, jnp.exp(_scores(q_i, k_j) - lse_i[..., None]), 0.0)


def _forward(q, k, v, seg, blk):
  """(out [B, T, K, G, H] in q's dtype, lse [B, K, G, T] fp32)."""
  b, t, nk, g, h = q.shape

  def query_block(i):
    q_i, seg_i = _block(q, i, blk), _block(seg, i, blk)

    def key_block(j, carry):
      m, l, acc = carry  # [B, K, G, blk], [B, K, G, blk], [B, K, G, blk, H]
      k_j, v_j, seg_j = _block(k, j, blk), _block(v, j, blk), _block(seg, j, blk)
      allowed = _block_mask(seg_i, seg_j, i, j, blk)
      s = jnp.where(allowed, _scores(q_i, k_j), _NEG_INF)
      m_new = jnp.maximum(m, jnp.max(s, axis=-1))
      p = jnp.where(allowed, jnp.exp(s - m_new[..., None]), 0.0)
      scale = jnp.exp(m - m_new)
      pv = jnp.einsum("BKGTS,BSKH->BKGTH", p.astype(q.dtype), v_j,
                      preferred_element_type=jnp.float32)
      return m_new, l * scale + jnp.sum(p, axis=-1), acc * scale[..., None] + pv

    init = (jnp.full((b, nk, g, blk), _NEG_INF, jnp.float32),
            jnp.zeros((b, nk, g, blk), jnp.float32),
            jnp.zeros((b, nk, g, blk, h), jnp.float32))
    m, l, acc = jax.lax.fori_loop(0, i + 1, key_block, init)  # blocks j > i: all masked
    out = acc / jnp.maximum(l, 1e-30)[..., None]  # rows with nothing allowed: 0
    lse = jnp.where(l > 0, m + jnp.log(jnp.maximum(l, 1e-30)), 0.0)
    return jnp.einsum("BKGTH->BTKGH", out).astype(q.dtype), lse

  out, lse = jax.lax.map(query_block, jnp.arange(t // blk))  # [n, B, blk, K, G, H] and
  #                                                             [n, B, K, G, blk]
  out = jnp.moveaxis(out, 0, 1).reshape(b, t, nk, g, h)
  lse = jnp.moveaxis(lse, 0, 3).reshape(b, nk, g, t)
  return out, lse


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _flash(q, k, v, seg, blk):
  return _forward(q, k, v, seg, blk)


def _flash_fwd(q, k, v, seg, blk):
  # Named for the remat policies that keep them (`remat.ATTN_CORE`): with q / k / v they are
  # all the backward reads, so it then never runs `_forward` again.
  out, lse = (checkpoint_name(x, remat.ATTN_CORE) for x in _forward(q, k, v, seg, blk))
  return (out, lse), (q, k, v, seg, out, lse)


def _flash_bwd(blk, res, cotangents):
  q, k, v, seg, out, lse = res
  d_out, d_lse = cotangents
  n = q.shape[1] // blk
  scale = q.shape[-1] ** -0.5
  # delta_t = sum_h dO * O - dLSE: the softmax backward's row term, [B, K, G, T] (d lse_t /
  # d s_ts = p_ts, so the log-sum-exp's cotangent enters each score's as p * dLSE).
  delta = jnp.einsum("BTKGH,BTKGH->BKGT", d_out.astype(jnp.float32),
                     out.astype(jnp.float32)) - d_lse
  lse_block = lambda x, i: jax.lax.dynamic_slice_in_dim(x, i * blk, blk, axis=3)  # noqa: E731

  def grads_of(i, j):
    """(p, ds) of block (i, j), both [B, K, G, blk, blk] fp32."""
    q_i, k_j, v_j, do_i = _block(q, i, blk), _block(k, j, blk), _block(v, j, blk), \
        _block(d_out, i, blk)
    p = _probs(q_i, k_j, _block(seg, i, blk), _block(seg, j, blk), i, j, blk, lse_block(lse, i))
    dp = jnp.einsum("BTKGH,BSKH->BKGTS", do_i, v_j, preferred_element_type=jnp.float32)
    return p, p * (dp - lse_block(delta, i)[..., None])

  def dq_block(i):  # query block i reads key blocks 0..i
    def body(j, dq):
      _, ds = grads_of(i, j)
      return dq + jnp.einsum("BKGTS,BSKH->BTKGH", ds, _block(k, j, blk).astype(jnp.float32))
    zero = jnp.zeros(_block(q, i, blk).shape, jnp.float32)
    return jax.lax.fori_loop(0, i + 1, body, zero) * scale

  def dkv_block(j):  # key block j is read by query blocks j..n-1
    def body(i, carry):
      dk, dv = carry
      p, ds = grads_of(i, j)
      dv = dv + jnp.einsum("BKGTS,BTKGH->BSKH", p, _block(d_out, i, blk).astype(jnp.float32))
      dk = dk + jnp.einsum("BKGTS,BTKGH->BSKH", ds, _block(q, i, blk).astype(jnp.float32))
      return dk, dv
    zero = jnp.zeros(_block(k, j, blk).shape, jnp.float32)
    dk, dv = jax.lax.fori_loop(j, n, body, (zero, zero))
    return dk * scale, dv

  def unblock(x):  # [n, B, blk, ...] -> [B, n * blk, ...]
    x = jnp.moveaxis(x, 0, 1)
    return x.reshape(x.shape[0], -1, *x.shape[3:])

  dq = unblock(jax.lax.map(dq_block, jnp.arange(n)))
  dk, dv = jax.lax.map(dkv_block, jnp.arange(n))
  return (dq.astype(q.dtype), unblock(dk).astype(k.dtype), unblock(dv).astype(v.dtype), None)


_flash.defvjp(_flash_fwd, _flash_bwd)
