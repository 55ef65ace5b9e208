"""Qwen3 / Qwen3-MoE architecture config and named presets.

`Qwen3Config` holds architecture only (what an HF `config.json` describes) plus the dtype
and rematerialization policy of the Flax model. Presets: the two policies of the paper
(`qwen3_4b_thinking_2507`, `qwen3_30b_a3b_thinking_2507`, values from their hub configs) and
tiny sizes for tests and the CPU demo. `get_preset(name)` is the one lookup. A restricted
output vocabulary belongs to a run, not to the model: `carr_jax.model.restricted_vocab`.
"""
from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Qwen3Config:
  vocab_size: int
  hidden_size: int  # D
  num_layers: int  # L
  num_heads: int  # N
  num_kv_heads: int  # K; query head n reads kv head n // (N // K)
  head_dim: int  # H; not hidden_size // num_heads in general
  intermediate_size: int  # F of the dense MLP
  rope_theta: float = 1_000_000.0
  rms_norm_eps: float = 1e-6
  tie_word_embeddings: bool = False
  max_position_embeddings: int = 262_144
  # MoE (num_experts == 0 means dense).
  num_experts: int = 0  # E
  num_experts_per_tok: int = 0  # top-k
  moe_intermediate_size: int = 0  # F of one expert
  norm_topk_prob: bool = True  # renormalize the top-k router weights to sum to 1
  router_aux_loss_coef: float = 0.0  # Switch-style load-balancing loss weight (HF: 0.001)
  moe_impl: str = "ragged"  # "ragged" (sorted grouped matmul) | "dense" (every expert) |
  # "expert_parallel" (tokens to the `expert` mesh axis's shards; carr_jax.model.moe)
  attention: str = "auto"  # auto (by platform) | dense | blockwise | splash | cudnn
  # (carr_jax.model.attention)
  # Numerics and memory.
  param_dtype: str = "float32"  # master weights (fp32 for training)
  compute_dtype: str = "float32"  # bf16 on accelerators; norms/softmax/logits stay fp32
  remat: str = "none"  # what the backward keeps of each layer's forward (carr_jax.model.remat):
  # none (all) | dots | dots_attn | attn_proj | attn_proj_core | attn_core | attn_core_offload
  # | attn_proj_offload | full (only its input)

  @property
  def is_moe(self) -> bool:
    return self.num_experts > 0

  def replace(self, **kw: Any) -> "Qwen3Config":
    return dataclasses.replace(self, **kw)


# The fields a preset or an HF config.json gives; the others are the run's (the `model` keys).
ARCHITECTURE = ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                "head_dim", "intermediate_size", "rope_theta", "rms_norm_eps",
                "tie_word_embeddings", "max_position_embeddings", "num_experts",
                "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
                "router_aux_loss_coef")

_PRESETS = {
    "qwen3_4b_thinking_2507": Qwen3Config(
        vocab_size=151_936, hidden_size=2560, num_layers=36, num_heads=32, num_kv_heads=8,
        head_dim=128, intermediate_size=9728, rope_theta=5_000_000.0,
        tie_word_embeddings=True, max_position_embeddings=262_144),
    "qwen3_30b_a3b_thinking_2507": Qwen3Config(
        vocab_size=151_936, hidden_size=2048, num_layers=48, num_heads=32, num_kv_heads=4,
        head_dim=128, intermediate_size=6144, rope_theta=10_000_000.0,
        tie_word_embeddings=False, max_position_embeddings=262_144, num_experts=128,
        num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True,
        router_aux_loss_coef=0.001),
    # Tiny sizes: same code path, for tests and the CPU demo. vocab covers Qwen3's special ids.
    "tiny_dense": Qwen3Config(
        vocab_size=151_936, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
        head_dim=32, intermediate_size=128, rope_theta=5_000_000.0, tie_word_embeddings=True),
    "tiny_moe": Qwen3Config(
        vocab_size=151_936, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
        head_dim=32, intermediate_size=128, rope_theta=10_000_000.0, num_experts=8,
        num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True),
    # The CPU demo's policy: small enough to train in minutes on 2 cores, deep enough to copy
    # names from pages into tool calls (induction needs 2+ layers).
    "demo_dense": Qwen3Config(
        vocab_size=151_936, hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2,
        head_dim=32, intermediate_size=384, rope_theta=1_000_000.0, tie_word_embeddings=True),
    # The demo policy as a mixture of experts: each of 8 experts the dense MLP's size, 2 per
    # token (lab/upcycle.py builds it from a demo_dense checkpoint: the routing replay study).
    "demo_moe": Qwen3Config(
        vocab_size=151_936, hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2,
        head_dim=32, intermediate_size=384, rope_theta=1_000_000.0, tie_word_embeddings=True,
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=384, norm_topk_prob=True),
    # ~50M parameters (embeddings included): the benchmark size.
    "bench_50m": Qwen3Config(
        vocab_size=32_768, hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=4,
        head_dim=64, intermediate_size=2048, rope_theta=1_000_000.0, tie_word_embeddings=True),
}


def get_preset(name: str, **overrides: Any) -> Qwen3Config:
  """Returns the named preset, with dataclass fields overridden by keyword."""
  if name not in _PRESETS:
    raise KeyError(f"unknown model preset {name!r}; known: {sorted(_PRESETS)}")
  return _PRESETS[name].replace(**overrides)
