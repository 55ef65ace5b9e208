"""The Qwen3-MoE layer: top-k routed SwiGLU experts (`carr_jax.model.qwen3.DecoderLayer` runs it
in place of the MLP when `Qwen3Config.is_moe`), and HF's load-balancing loss.

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

import math
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from carr_jax.model.config import Qwen3Config
from carr_jax.model.sharding import BATCH

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
  shards = 1 if mesh.empty else math.prod(mesh.shape[a] for a in BATCH if a in mesh.shape)
  if mesh.empty or x.shape[0] % shards:  # rows that cannot be split (init's [1, 1] batch)
    return local(x, experts, weights, w_gate, w_up, w_down)
  rows = P(BATCH, None, None)
  return jax.shard_map(local, in_specs=(rows, rows, rows, P(), P(), P()), out_specs=rows,
                       check_vma=False)(x, experts, weights, w_gate, w_up, w_down)


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
    combine = _experts_ragged if cfg.moe_impl == "ragged" else _experts_dense
    y = _experts_per_shard(combine, x, experts.reshape(b, t, -1),
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
