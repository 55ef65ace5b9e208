"""FLOPs of a train step from the model's arithmetic (not from XLA's cost analysis).

XLA's `cost_analysis()` counts a scanned layer body once, so for our `nn.scan` model it
undercounts by about the depth; these counts come from the shapes instead. One multiply-add
is 2 FLOPs. Per token and layer the matmuls cost 2 x (their weights): q / k / v / o
projections and the SwiGLU MLP, or for MoE the router plus top-k experts. Attention adds
4 x heads x head_dim FLOPs per (query, key) pair it scores (QK^T and PV); a causal row of S
tokens that is one segment has S (S + 1) / 2 pairs, the most any packing of it can have, so
the counts are the worst case of a row. Logits cost 2 x D x V' per position that gets one.

A train step is forward + backward = 3 forward passes ("model FLOPs", what MFU counts);
`remat="full"` runs the layers' forward once more in the backward pass ("executed FLOPs",
what the hardware does). Log-prob recomputation is one forward pass.
"""
from __future__ import annotations

from carr_jax.model import restricted_vocab
from carr_jax.model.config import Qwen3Config
from carr_jax.model.restricted_vocab import RestrictedVocab


def layer_matmul_weights(cfg: Qwen3Config) -> int:
  """Weights one token multiplies with in one layer (MoE: router + its top-k experts)."""
  d, n, k, h = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
  attention = 2 * d * n * h + 2 * d * k * h  # q, o and k, v
  if cfg.is_moe:
    mlp = d * cfg.num_experts + cfg.num_experts_per_tok * 3 * d * cfg.moe_intermediate_size
  else:
    mlp = 3 * d * cfg.intermediate_size  # gate, up, down
  return attention + mlp


def causal_pairs(row_length: int) -> int:
  """(query, key) pairs of a causal row that is one segment."""
  return row_length * (row_length + 1) // 2


def layers_forward_flops(cfg: Qwen3Config, rows: int, row_length: int) -> float:
  """FLOPs of the decoder layers' forward pass over [rows, row_length] tokens."""
  tokens = rows * row_length
  matmuls = 2.0 * tokens * layer_matmul_weights(cfg)
  attention = 4.0 * cfg.num_heads * cfg.head_dim * rows * causal_pairs(row_length)
  return cfg.num_layers * (matmuls + attention)


def logits_flops(cfg: Qwen3Config, rows: int, logit_positions: int,
                 vocab: RestrictedVocab | None = None) -> float:
  """FLOPs of the unembedding at `logit_positions` slots of each row (onto `vocab`'s ids)."""
  return 2.0 * rows * logit_positions * cfg.hidden_size * restricted_vocab.size(
      vocab, cfg.vocab_size)


def forward_flops(cfg: Qwen3Config, rows: int, row_length: int, logit_positions: int,
                  vocab: RestrictedVocab | None = None) -> float:
  return (layers_forward_flops(cfg, rows, row_length)
          + logits_flops(cfg, rows, logit_positions, vocab))


def train_step_flops(cfg: Qwen3Config, rows: int, row_length: int, logit_positions: int,
                     vocab: RestrictedVocab | None = None) -> tuple[float, float]:
  """(model FLOPs, executed FLOPs) of one train step: 3 forward passes, plus the layers'
  forward once more under `remat="full"`."""
  model = 3.0 * forward_flops(cfg, rows, row_length, logit_positions, vocab)
  recompute = layers_forward_flops(cfg, rows, row_length) if cfg.remat == "full" else 0.0
  return model, model + recompute
