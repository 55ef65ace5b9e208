"""The Qwen3-MoE layer: top-k routed SwiGLU experts (`carr_jax.model.qwen3.DecoderLayer` runs it
in place of the MLP when `Qwen3Config.is_moe`), and HF's load-balancing loss.

MoE paths (all exact, all run on CPU/GPU/TPU; `moe_impl` picks one):
- "ragged" (default): tokens are sorted by expert and multiplied with `jax.lax.ragged_dot`
  (a grouped matmul). Cost model: 3 * T*k * D * F multiply-adds (T tokens, k experts per
  token) plus an O(T*k log(T*k)) sort and two gathers of [T*k, D]; dropless, no capacity.
- "dense": every expert runs on every token and non-selected outputs get weight 0.
  Cost model: 3 * T * E * D * F multiply-adds, i.e. E/k times the useful work; simplest to
  shard (experts as a batch dimension) and fine for tiny models.
- "expert_parallel": tokens travel to the experts instead of experts to the tokens
  (`_experts_expert_parallel`); the same numbers as "ragged". Cost model per device and
  layer (G: the `expert` axis's size): an all-gather and a reduce-scatter of [G*T, D] over
  `expert` in place of gathering all E experts' weights ([E, D, F] three times; it gathers
  E/G), so it moves fewer bytes when 2*G*T < 3*E*F (decode, short rows; not Qwen3-30B-A3B's
  64k-token training rows: 2*4*65536 against 3*128*768). Buffers of G*T*k rows (dropless
  worst case), of which about T*k are in a group: TPU's ragged_dot kernel bounds its grid by
  the tiles the groups cover, so the rest should cost no arithmetic (not measured).
Under a mesh each path runs per device on that device's rows (`_experts_per_shard`): "ragged"
and "dense" gather every expert's weights on every chip per layer; "expert_parallel" gathers
only the chip's expert shard and moves tokens over the `expert` axis. The weights enter with
their parameter sharding and are gathered inside (`_gather`), so their gradient leaves as a
reduce-scatter onto that sharding, summed whole only over the axes that replicate them.
Without a mesh (or with rows that cannot be split) "expert_parallel" is "ragged".
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from carr_jax.model.config import Qwen3Config
from carr_jax.model.sharding import BATCH, spec_for

INIT = nn.initializers.normal(stddev=0.02)  # every weight matrix's, here and in the Qwen3 body


class RouterOut(NamedTuple):
  """What the forward's routers add besides hidden states (`Qwen3.hidden_and_aux`)."""
  loss: jax.Array  # [] the load-balancing loss (`router_aux_loss`)
  replay_differ: jax.Array  # [] (token, layer) routes whose replayed experts are not the
  # router's own top-k set (0 without replay)
  routes: jax.Array  # [] (token, layer) routes of non-padding tokens: the share's divisor


def route(router_logits: jax.Array, top_k: int, normalize: bool,
          replay: jax.Array | None = None):
  """Softmax over all experts in fp32, then top-k (and renormalise when asked).

  router_logits: [T, E] -> (probs [T, E] fp32, weights [T, k] fp32, experts [T, k] int32).
  replay: [T, k] expert ids chosen elsewhere (the rollout engine's: routing replay); they
  replace the top-k, and the weights are this router's probabilities of those experts,
  renormalised the same way, so the router still gets gradients. Ids equal to this router's
  own top-k give exactly the unreplayed result.
  """
  probs = jax.nn.softmax(router_logits.astype(jnp.float32), axis=-1)
  if replay is None:
    weights, experts = jax.lax.top_k(probs, top_k)
  else:
    experts = replay.astype(jnp.int32)
    weights = jnp.take_along_axis(probs, experts, axis=-1)
  if normalize:
    weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
  return probs, weights, experts


def _expert_outputs(x, experts, w_gate, w_up, w_down):
  """Each slot's expert output, by sorting the slots by expert and grouped matmuls.

  x: [T, D]; experts: [T, k]; w_gate/w_up: [E, D, F]; w_down: [E, F, D] -> [T, k, D]. Slots
  whose expert id is E or more sort last, outside every group of the ragged dots: their rows
  are not specified (zeros on CPU, anything on TPU), so a caller that has such slots masks
  them (`_experts_expert_parallel`).
  """
  num_tokens, top_k = experts.shape
  num_experts = w_gate.shape[0]
  flat = experts.reshape(-1)  # [T*k]
  order = jnp.argsort(flat, stable=True)
  rows = x[order // top_k]  # [T*k, D] sorted by expert
  group_sizes = jnp.bincount(flat, length=num_experts).astype(jnp.int32)  # ids >= E dropped
  gate = jax.lax.ragged_dot(rows, w_gate, group_sizes)
  up = jax.lax.ragged_dot(rows, w_up, group_sizes)
  out_sorted = jax.lax.ragged_dot(jax.nn.silu(gate) * up, w_down, group_sizes)  # [T*k, D]
  return jnp.zeros_like(out_sorted).at[order].set(out_sorted).reshape(num_tokens, top_k, -1)


def _combine(out, weights):
  """[T, k, D] slot outputs, [T, k] gate weights -> [T, D] their weighted sum."""
  return jnp.einsum("TKD,TK->TD", out, weights.astype(out.dtype))


def _experts_ragged(x, experts, weights, w_gate, w_up, w_down):
  """x: [T, D]; experts/weights: [T, k]; w_gate/w_up: [E, D, F]; w_down: [E, F, D]."""
  return _combine(_expert_outputs(x, experts, w_gate, w_up, w_down), weights)


def _experts_expert_parallel(x, experts, weights, w_gate, w_up, w_down):
  """One device's share of expert parallelism, inside `shard_map` (`_experts_per_shard`).

  x: [T, D] and experts / weights: [T, k] are this device's tokens; w_gate / w_up:
  [E/G, D, F] and w_down: [E/G, F, D] are this device's experts, shard s of the G devices
  along the `expert` axis holding experts s*E/G .. (s+1)*E/G - 1. Steps, per layer:
    1. all-gather the tokens, expert ids and gate weights over `expert`: [G*T, D], [G*T, k];
    2. run the local experts on the slots routed to them, the other slots adding 0 (ragged
       path; ids outside this shard become E/G): partial outputs [G*T, D];
    3. reduce-scatter the partials over `expert`: each device gets the sum for its own
       tokens [T, D], i.e. every expert's weighted output, wherever the expert lives.
  Dropless with static shapes: any one shard may get every slot of the G devices, so the
  local buffers are sized for it ([G*T*k, D] sorted rows, [G*T*k, F] activations: G times
  the ragged path's). Bytes moved per layer per device: G*T*D in and G*T*D out (one row per
  token, not per slot: k times less than a fixed-size all-to-all of [G, T*k, D] that is
  sized for the same worst case); the weights moved are only this shard's, E/G of them.
  """
  axis = "expert"  # the mesh axis the experts are split over (sharding.PARAM_RULES)
  local = w_gate.shape[0]  # E/G experts on this shard
  first = jax.lax.axis_index(axis) * local
  gather = lambda a: jax.lax.all_gather(a, axis, tiled=True)  # noqa: E731  [T, .] -> [G*T, .]
  ids = gather(experts) - first  # [G*T, k] local expert ids where in [0, E/G)
  here = (ids >= 0) & (ids < local)  # [G*T, k] slots routed to this shard
  out = _expert_outputs(gather(x), jnp.where(here, ids, local), w_gate, w_up, w_down)
  # The other slots' rows are not specified: select, not multiply, so nothing there can
  # reach the sum.
  partial = _combine(jnp.where(here[..., None], out, 0), gather(weights))  # [G*T, D]
  return jax.lax.psum_scatter(partial, axis, scatter_dimension=0, tiled=True)  # [T, D]


def _experts_dense(x, experts, weights, w_gate, w_up, w_down):
  """Every expert on every token; combine with a [T, E] weight matrix that is 0 off top-k."""
  num_experts = w_gate.shape[0]
  combine = jnp.einsum("TK,TKE->TE", weights, jax.nn.one_hot(experts, num_experts))
  gate = jnp.einsum("TD,EDF->ETF", x, w_gate)
  up = jnp.einsum("TD,EDF->ETF", x, w_up)
  out = jnp.einsum("ETF,EFD->ETD", jax.nn.silu(gate) * up, w_down)
  return jnp.einsum("ETD,TE->TD", out, combine.astype(out.dtype))


def _weight_specs():
  """The expert weights' specs in one layer: sharding.PARAM_RULES less the leading L axis.

  -> (w_gate, w_up, w_down) specs over [E, D, F], [E, D, F], [E, F, D]."""
  return tuple(P(*spec_for(f"layers/moe/{name}")[1:])
               for name in ("gate_proj", "up_proj", "down_proj"))


def _gather(w, spec, keep):
  """Inside `shard_map`: this device's block of `w` (placed by `spec`) -> whole along every
  mesh axis of `spec` but those in `keep`. Its transpose reduce-scatters the gradient back to
  the block, over the same axes.

  w: [E/e, D/f, F/t] for spec ("expert", "fsdp", "tensor"), keep () -> [E, D, F]. A split
  last dimension (w_down's D) is gathered as a new leading axis and moved into place: XLA on
  TPU compiles a reduce-scatter along an array's last (lane) dimension as an all-reduce and a
  slice (twice the bytes), one along a leading axis as a reduce-scatter (one-layer compile,
  benchmarks/README.md, MoE dispatch).
  """
  for dim, axes in enumerate(spec):
    names = tuple(a for a in ((axes,) if isinstance(axes, str) else axes or ()) if a not in keep)
    if not names:
      continue
    if dim < w.ndim - 1:
      w = jax.lax.all_gather(w, names, axis=dim, tiled=True)
    else:  # [n, ..., W/n] -> [..., n, W/n] -> [..., W]
      blocks = jnp.moveaxis(jax.lax.all_gather(w, names, axis=0), 0, dim)
      w = blocks.reshape(*w.shape[:dim], -1)
  return w


def _experts_per_shard(impl, x, experts, weights, w_gate, w_up, w_down):
  """The `impl` path over each device's own rows: x [B, T, D], experts / weights [B, T, k].

  Under a mesh the rows are split over the batch axes, but the ragged path sorts the flat
  token list; left to GSPMD, that sort and the gather after it run over the GLOBAL token list
  on every device (256 GiB per chip for 128 rows of 64k tokens of Qwen3-30B-A3B). In
  `shard_map` each device sorts only its tokens. The expert weights come in as their
  parameters are sharded (`_weight_specs`) and are gathered inside, per layer: "ragged" and
  "dense" whole (FSDP-style), "expert_parallel" all but the `expert` axis (the device's shard
  of experts), moving tokens instead. Gathered outside, as replicated inputs, their gradient
  would be an all-reduce over the whole mesh (`shard_map`'s transpose sums a replicated
  input's cotangent over every axis); gathered inside, it is a reduce-scatter over the axes
  that shard them and a sum over the rest (`data`).
  """
  def local(combine, gather, x, experts, weights, *expert_weights):
    b, t, d = x.shape
    flat = lambda a: a.reshape(b * t, -1)  # noqa: E731
    expert_weights = [gather(w, spec) for w, spec in zip(expert_weights, _weight_specs())]
    return combine(flat(x), flat(experts), flat(weights), *expert_weights).reshape(b, t, d)
  mesh = jax.sharding.get_abstract_mesh()
  shards = 1 if mesh.empty else math.prod(mesh.shape[a] for a in BATCH if a in mesh.shape)
  if mesh.empty or x.shape[0] % shards:  # rows that cannot be split (init's [1, 1] batch)
    combine = _experts_ragged if impl == "expert_parallel" else _COMBINE[impl]
    return local(combine, lambda w, spec: w, x, experts, weights, w_gate, w_up, w_down)
  # Axes of size 1 gather nothing; "expert_parallel" keeps its shard of experts.
  keep = {a for a, n in mesh.shape.items() if n == 1} | (
      {"expert"} if impl == "expert_parallel" else set())
  gather = functools.partial(_gather, keep=keep)
  rows = P(BATCH, None, None)
  return jax.shard_map(functools.partial(local, _COMBINE[impl], gather),
                       in_specs=(rows, rows, rows) + _weight_specs(), out_specs=rows,
                       check_vma=False)(x, experts, weights, w_gate, w_up, w_down)


_COMBINE = {"ragged": _experts_ragged, "dense": _experts_dense,
            "expert_parallel": _experts_expert_parallel}  # `Qwen3Config.moe_impl`


class MoE(nn.Module):
  """Top-k routed SwiGLU experts, no shared expert. x [B, T, D], segment_ids [B, T], routes
  [B, T, k] expert ids to replay (or None: the router's own top-k) -> (y [B, T, D], router
  stats for the aux loss, the experts used [B, T, k] int32)."""
  cfg: Qwen3Config

  @nn.compact
  def __call__(self, x, segment_ids, routes=None):
    cfg = self.cfg
    pdt, cdt = jnp.dtype(cfg.param_dtype), jnp.dtype(cfg.compute_dtype)
    d, e, f = cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size
    router = self.param("router", INIT, (d, e), pdt)
    w_gate = self.param("gate_proj", INIT, (e, d, f), pdt).astype(cdt)
    w_up = self.param("up_proj", INIT, (e, d, f), pdt).astype(cdt)
    w_down = self.param("down_proj", INIT, (e, f, d), pdt).astype(cdt)

    b, t, _ = x.shape
    tokens = x.reshape(b * t, d)
    logits = jnp.einsum("TD,DE->TE", tokens, router.astype(cdt))
    replay = None if routes is None else routes.reshape(b * t, -1)
    probs, weights, experts = route(logits, cfg.num_experts_per_tok, cfg.norm_topk_prob, replay)
    if cfg.moe_impl not in _COMBINE:
      raise ValueError(f"moe_impl must be one of {sorted(_COMBINE)}, got {cfg.moe_impl!r}")
    y = _experts_per_shard(cfg.moe_impl, x, experts.reshape(b, t, -1),
                           weights.astype(cdt).reshape(b, t, -1), w_gate, w_up, w_down)
    # Switch load-balancing statistics over non-padding tokens (summed; finished in Qwen3),
    # and how many replayed routes are not the router's own top-k set.
    valid = (segment_ids.reshape(-1) > 0).astype(jnp.float32)  # [T]
    counts = jnp.einsum("TKE,T->E", jax.nn.one_hot(experts, e), valid)
    prob_sums = jnp.einsum("TE,T->E", probs, valid)
    differ = jnp.zeros(())
    if replay is not None:
      own = jnp.sort(jax.lax.top_k(probs, cfg.num_experts_per_tok)[1], axis=-1)  # [T, k]
      differ = jnp.sum(jnp.any(own != jnp.sort(experts, axis=-1), axis=-1) * valid)
    return y, (counts, prob_sums, jnp.sum(valid), differ), experts.reshape(b, t, -1)


def router_out(stats, cfg: Qwen3Config) -> RouterOut:
  """The MoE layers' summed statistics -> `RouterOut`."""
  num_valid, differ = stats[2], stats[3]  # summed over layers: (token, layer) routes
  return RouterOut(router_aux_loss(stats, cfg), differ.astype(jnp.float32),
                   num_valid.astype(jnp.float32))


def router_aux_loss(stats, cfg: Qwen3Config) -> jax.Array:
  """HF's load-balancing loss: E * sum_e f_e * P_e over all layers' non-padding tokens.

  f_e: fraction of (token, slot) assignments to expert e; P_e: mean router probability.
  Multiplied by `router_aux_loss_coef` (0 disables it).
  """
  if not cfg.is_moe or cfg.router_aux_loss_coef == 0.0:
    return jnp.zeros((), jnp.float32)
  counts, prob_sums, num_valid, _ = stats
  denom = jnp.maximum(num_valid, 1.0)  # num_valid is summed over layers already
  loss = cfg.num_experts * jnp.sum((counts / denom) * (prob_sums / denom))
  return cfg.router_aux_loss_coef * loss
