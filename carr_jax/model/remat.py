"""Rematerialization policies of the scanned decoder layer: `Qwen3Config.remat` names one.

A policy decides which values of a layer's forward pass the backward pass keeps; everything
else the backward computes again from the layer's input, which the layer scan always keeps.
Keeping more costs memory, keeping less costs FLOPs. Each policy below lists the forward
parts its backward runs again (`recomputes`, the part names of
`carr_jax.model.flops.layer_part_flops`), which is how `flops.train_step_flops` counts them.

- "none": the layer is not wrapped; the backward keeps whatever autodiff saves and
  recomputes nothing. (Every policy keeps only what some gradient needs of what it allows.)
- "dots": keep the output of every dot with no batch dimensions
  (`jax.checkpoint_policies.dots_with_no_batch_dims_saveable`, MaxText's "minimal"). In this
  model that is every matmul against a weight (`qwen3.project`: q / k / v / o, MLP gate / up /
  down) and the MoE router. `dots_saveable` would also keep the attention core's dots, whose
  batch dims are (B, K): the dense reference's [B, K, G, T, S] scores, the T^2 memory that
  blockwise and splash exist to avoid. Recomputed: norms, RoPE, activations, the attention
  core (a fused kernel's output and log-sum-exp are not dots; blockwise's dots have batch dims)
  and the MoE experts (`jax.lax.ragged_dot` is not a dot_general).
- "dots_attn": "dots" plus the attention core's output and log-sum-exp (`ATTN_CORE`), all
  its backward reads besides q / k / v: N H + N values per token and layer more than "dots"
  (the output, the o projection's input, in the compute dtype; the log-sum-exp in fp32).
  Recomputed: norms, RoPE, activations and the MoE experts.
- "attn_proj": keep the q / k / v / o projections' outputs, named in `qwen3.Attention` with
  `jax.ad_checkpoint.checkpoint_name` (MaxText's "save_dot_except_mlp"): (N + 2K) H + D
  values per token and layer. Recomputed: the attention core and the MLP or MoE block. The
  MLP's gate / up outputs (2F per token) are the big values this leaves out.
- "attn_proj_core": "attn_proj" plus the attention core's output and log-sum-exp:
  (2N + 2K) H + N + D values per token and layer. Recomputed: the MLP or MoE block.
- "attn_core": only the attention core's output and log-sum-exp: N H + N values per token
  and layer. Recomputed: every matmul against a weight; at long rows the core is the larger
  cost, so this keeps the most FLOPs per byte.
- "attn_core_offload": "attn_core" with the values in the host's pinned memory (as
  "attn_proj_offload" below). Offloading goes by name, so on a GPU, where cuDNN's forward is
  matched by primitive and not named, the core is recomputed.
- "attn_proj_offload": the q / k / v / o values, copied to the host's pinned memory in the
  forward and back in the backward (`save_and_offload_only_these_names`, MaxText's
  "qkv_proj_offloaded" plus o): the device memory of "full" (plus transfer buffers), the
  FLOPs of "attn_proj", paid in host memory and transfers the step must hide. On a TPU the
  layer scan's stacked q / k / v / o land in host memory (memory space 5 in the compiled
  HLO); the CPU has one memory and jax places nothing there, so on it this is "attn_proj".
- "full": keep nothing but the layer's input; the backward runs the layer forward again
  (less what no gradient needs: the dense MLP's down projection only feeds the residual sum).

The attention core's kept values. A fused kernel is a custom call, not a dot, and a name put
on its output from outside misses the log-sum-exp it saves for its backward, so the values
are caught where the kernel makes them: blockwise (`attention._flash_fwd`) and splash (the
kernel's own `residual_checkpoint_name`) name both `ATTN_CORE`; jax's cuDNN attention names
nothing, so its forward primitive is matched by name (`CUDNN_FORWARD`; apple/axlearn's
flash-attention remat matches kernel primitives the same way). Either way the backward runs
only the backward kernel. The dense reference's probabilities are no such value: under
"dots_attn" / "attn_proj_core" it recomputes its scores.

MoE: the expert matmuls (`carr_jax.model.moe`) carry no names and are no dot_general, so every
policy but "none" recomputes them and the dispatch before them (the token sort; under expert
parallelism an all-to-all too, unless the dispatched tokens are named and kept).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import jax

# The values `qwen3.Attention` names with `jax.ad_checkpoint.checkpoint_name`.
ATTN_PROJ = ("q_proj", "k_proj", "v_proj", "o_proj")
# The attention core's output and log-sum-exp, as blockwise and splash name them.
ATTN_CORE = "attn_core"
# The primitive jax's cuDNN attention binds for its training forward (output, log-sum-exp);
# tests/carr_jax/test_remat.py checks the name against jax's.
CUDNN_FORWARD = "dot_product_attention_fwd_wrapper"
PARTS = ("qkv", "o", "core", "mlp_in", "mlp_out", "router", "experts")  # flops.layer_part_flops


@dataclasses.dataclass(frozen=True)
class Policy:
  saveable: Callable | None  # a jax.checkpoint policy; None: the layer is not rematerialized
  recomputes: tuple[str, ...]  # the forward parts (PARTS) the backward runs again


def any_of(*policies: Callable) -> Callable:
  """The jax.checkpoint policy that keeps a value when any of `policies` keeps it. Each
  answers `(primitive, *avals, **params) -> bool` (not jax's Offloadable / Recompute cases,
  which `any` would read as true)."""
  def saveable(prim, *avals, **params) -> bool:
    return any(keep(prim, *avals, **params) for keep in policies)
  return saveable


def cudnn_forward(prim, *_, **__) -> bool:
  """Keeps the outputs of jax's cuDNN attention forward."""
  return prim.name == CUDNN_FORWARD


_CHECKPOINT = jax.checkpoint_policies
ATTENTION_CORE = any_of(_CHECKPOINT.save_only_these_names(ATTN_CORE), cudnn_forward)
POLICIES = {
    "none": Policy(None, ()),
    "dots": Policy(_CHECKPOINT.dots_with_no_batch_dims_saveable, ("core", "experts")),
    "dots_attn": Policy(any_of(_CHECKPOINT.dots_with_no_batch_dims_saveable, ATTENTION_CORE),
                        ("experts",)),
    "attn_proj": Policy(_CHECKPOINT.save_only_these_names(*ATTN_PROJ),
                        ("core", "mlp_in", "router", "experts")),
    "attn_proj_core": Policy(any_of(_CHECKPOINT.save_only_these_names(*ATTN_PROJ),
                                    ATTENTION_CORE),
                             ("mlp_in", "router", "experts")),
    "attn_core": Policy(ATTENTION_CORE, ("qkv", "o", "mlp_in", "router", "experts")),
    "attn_core_offload": Policy(
        _CHECKPOINT.save_and_offload_only_these_names(
            names_which_can_be_saved=(), names_which_can_be_offloaded=(ATTN_CORE,),
            offload_src="device", offload_dst="pinned_host"),
        ("qkv", "o", "mlp_in", "router", "experts")),
    "attn_proj_offload": Policy(
        _CHECKPOINT.save_and_offload_only_these_names(
            names_which_can_be_saved=(), names_which_can_be_offloaded=ATTN_PROJ,
            offload_src="device", offload_dst="pinned_host"),
        ("core", "mlp_in", "router", "experts")),
    "full": Policy(_CHECKPOINT.nothing_saveable,
                   ("qkv", "o", "core", "mlp_in", "router", "experts")),
}


def policy(name: str) -> Policy:
  """The policy `Qwen3Config.remat` = `name` names."""
  if name not in POLICIES:
    raise ValueError(f"model.remat must be one of {', '.join(POLICIES)}; got {name!r}")
  return POLICIES[name]
