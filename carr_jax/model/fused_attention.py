"""The fused attention kernels of `carr_jax.model.attention`: splash (TPU) and cuDNN (GPU).

Both take the shapes of `carr_jax.model.attention.attend` (q [B, T, K, G, H], k / v [B, T, K, H],
segment_ids [B, T]) and equal its dense reference on every real token (segment id > 0).
Padding (segment 0) differs on purpose: here it attends causally to padding only, never to a
real token, so its rows stay finite; no real token ever attends to it. Callers mask padding
out, so values and gradients of real tokens are the same as dense's.

- `splash`: `jax.experimental.pallas.ops.tpu.splash_attention`, one kernel per batch row
  (vmapped), causal mask, GQA native to the kernel (query head n reads kv head n // G, our
  layout), packed rows through its `SegmentIds`. Blocks of `SPLASH_BLOCK` queries / keys; rows
  are padded with segment 0 to a multiple. Memory is O(T) per head: no [T, S] array exists.
  `interpret=True` runs the same kernel in Pallas interpret mode (any backend, slow): what
  the CPU tests use to check its numerics.
- `cudnn`: `jax.nn.dot_product_attention(..., implementation="cudnn")` with a boolean
  [B, 1, T, S] segment mask (the public API of jax 0.10 has no segment ids), so the mask
  costs T^2 bytes per row per layer, e.g. 4 GiB at T = 65,536. cuDNN's packed-sequence form
  (per-segment offsets and lengths) would remove it; jax exposes that only privately.

Under a mesh (`jax.set_mesh`) both run per shard in `jax.shard_map`: rows split over the
batch axes, heads over `tensor` (kv heads when `tensor` divides them, else the query groups
with k / v whole on each shard), so no attention input is gathered across devices.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from carr_jax.model import remat
from carr_jax.model.sharding import BATCH

SPLASH_BLOCK = 512  # queries / keys per splash block (MaxText's TPU default)
_LANES = 128  # splash blocks must be multiples of the TPU lane width


def per_shard(kernel, q, k, v, segment_ids):
  """Runs `kernel(q, k, v, segment_ids)` on each shard of the current mesh; plain without."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return kernel(q, k, v, segment_ids)
  rows = tuple(a for a in BATCH if a in mesh.axis_names) or None
  tensor = mesh.shape.get("tensor", 1)
  nk, g = q.shape[2], q.shape[3]
  if nk % tensor == 0:
    q_spec, kv_spec = P(rows, None, "tensor", None, None), P(rows, None, "tensor", None)
  elif g % tensor == 0:
    q_spec, kv_spec = P(rows, None, None, "tensor", None), P(rows, None, None, None)
  else:
    raise ValueError(f"the tensor axis ({tensor}) must divide the kv heads ({nk}) or the "
                     f"query heads per kv head ({g})")
  return jax.shard_map(kernel, in_specs=(q_spec, kv_spec, kv_spec, P(rows, None)),
                       out_specs=q_spec, check_vma=False)(q, k, v, segment_ids)


def splash_block(t: int) -> int:
  """The splash block for rows of t tokens: SPLASH_BLOCK, or t rounded up to the lanes."""
  return min(SPLASH_BLOCK, -(-t // _LANES) * _LANES)


def _splash_kernel(t: int, heads: int, block: int, interpret: bool):
  """The causal splash kernel for [heads, t, H] queries.

  Built inside the trace that calls it (its mask tables become that trace's constants);
  splash caches the numpy work of the mask per shape, so a rebuild is cheap.
  """
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm
  sizes = sk.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block,
                        block_q_dkv=block, block_kv_dkv=block, block_kv_dkv_compute=block,
                        block_q_dq=block, block_kv_dq=block)
  mask = sm.MultiHeadMask([sm.CausalMask((t, t))] * heads)
  # The kernel names its output and log-sum-exp for the remat policies that keep them.
  return sk.make_splash_mha(mask, block_sizes=sizes, head_shards=1, q_seq_shards=1,
                            residual_checkpoint_name=remat.ATTN_CORE, interpret=interpret)


def _splash_local(q, k, v, segment_ids, interpret: bool):
  """Splash on one shard. Shapes as in `carr_jax.model.attention.attend`."""
  from jax.experimental.pallas.ops.tpu.splash_attention.splash_attention_kernel import (
      SegmentIds)
  b, t, nk, g, h = q.shape
  block = splash_block(t)
  pad = -t % block
  if pad:  # padded columns get segment 0: they never meet a real token
    widths = lambda x: [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2)  # noqa: E731
    q, k, v, segment_ids = (jnp.pad(x, widths(x)) for x in (q, k, v, segment_ids))
  kernel = _splash_kernel(t + pad, nk * g, block, interpret)
  q = q * jnp.asarray(h ** -0.5, q.dtype)  # the kernel does not scale the scores
  heads_q = jnp.einsum("BTKGH->BKGTH", q).reshape(b, nk * g, t + pad, h)  # n = kv * G + g
  heads_k, heads_v = (jnp.einsum("BTKH->BKTH", x) for x in (k, v))  # [B, K, T, H]

  def row(q_r, k_r, v_r, seg_r):  # [N, T, H], [K, T, H], [K, T, H], [T]
    return kernel(q_r, k_r, v_r, segment_ids=SegmentIds(q=seg_r, kv=seg_r))
  out = jax.vmap(row)(heads_q, heads_k, heads_v, segment_ids)  # [B, N, T, H]
  out = jnp.einsum("BKGTH->BTKGH", out.reshape(b, nk, g, t + pad, h))
  return out[:, :t].astype(q.dtype)


def splash(q, k, v, segment_ids, interpret: bool = False):
  """TPU splash attention (sharded under a mesh). Shapes as in `attention.attend`."""
  kernel = functools.partial(_splash_local, interpret=interpret)
  return per_shard(kernel, q, k, v, segment_ids)


def cudnn_mask(segment_ids):
  """segment_ids [B, T] -> [B, 1, T, S] bool: causal, same segment (padding with padding)."""
  cols = jnp.arange(segment_ids.shape[1])
  causal = cols[None, :] <= cols[:, None]  # [T, S]
  same = segment_ids[:, :, None] == segment_ids[:, None, :]  # [B, T, S]
  return (causal[None] & same)[:, None]


def _cudnn_local(q, k, v, segment_ids):
  b, t, nk, g, h = q.shape
  out = jax.nn.dot_product_attention(q.reshape(b, t, nk * g, h), k, v,
                                     mask=cudnn_mask(segment_ids), is_causal=True,
                                     implementation="cudnn")  # [B, T, N, H]
  return out.reshape(b, t, nk, g, h)


def cudnn(q, k, v, segment_ids):
  """GPU cuDNN flash attention (sharded under a mesh). Shapes as in `attention.attend`."""
  return per_shard(_cudnn_local, q, k, v, segment_ids)
