"""FLOPs of a train step from the model's arithmetic (not from XLA's cost analysis).

XLA's `cost_analysis()` counts a scanned layer body once, so for our `nn.scan` model it
undercounts by about the depth; these counts come from the shapes instead. One multiply-add
is 2 FLOPs. Per token and layer the matmuls cost 2 x (their weights): q / k / v / o
projections and the SwiGLU MLP, or for MoE the router plus top-k experts. Attention adds
4 x heads x head_dim FLOPs per (query, key) pair it scores (QK^T and PV); a causal row of S
tokens that is one segment has S (S + 1) / 2 pairs, the most any packing of it can have, so
the counts are the worst case of a row. Logits cost 2 x D x V' per position that gets one.

A train step is forward + backward = 3 forward passes ("model FLOPs", what MFU counts).
"Executed FLOPs", what the hardware does, add the layer forward parts the backward runs again
under `Qwen3Config.remat`: the policy's `recomputes` (`carr_jax.model.remat`, where each
policy's choice is explained) over the parts of `layer_part_flops`, times the depth. A
recomputed attention core costs its whole forward (the scores for the probabilities, PV for
the output the o projection's weight gradient needs), whichever implementation runs it.
tests/carr_jax/test_remat.py checks each policy's parts against the matmuls its compiled
backward really repeats, and scripts/check_remat_kernels.py against the splash kernels of the
compiled TPU step. Not counted: norms, RoPE, activations, the sort of MoE tokens, and
the dense MoE implementation's extra experts (`moe_impl="dense"`, a test reference, counted
as top-k). Log-prob recomputation is one forward pass.
"""
from __future__ import annotations

from carr_jax.model import remat, restricted_vocab
from carr_jax.model.config import Qwen3Config
from carr_jax.model.restricted_vocab import RestrictedVocab


def causal_pairs(row_length: int) -> int:
  """(query, key) pairs of a causal row that is one segment."""
  return row_length * (row_length + 1) // 2


def layer_weights(cfg: Qwen3Config) -> dict[str, int]:
  """Weights one token multiplies with in one layer, by part (`remat.PARTS` but the core):
  the q / k / v and o projections, the dense MLP's gate / up ("mlp_in") and down ("mlp_out"),
  the MoE router and its top-k experts."""
  d, n, k, h = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
  if cfg.is_moe:
    experts = cfg.num_experts_per_tok * 3 * d * cfg.moe_intermediate_size  # gate, up, down
    mlp = {"mlp_in": 0, "mlp_out": 0, "router": d * cfg.num_experts, "experts": experts}
  else:
    f = cfg.intermediate_size
    mlp = {"mlp_in": 2 * d * f, "mlp_out": f * d, "router": 0, "experts": 0}
  return {"qkv": d * (n + 2 * k) * h, "o": n * h * d, **mlp}


def layer_matmul_weights(cfg: Qwen3Config) -> int:
  """Weights one token multiplies with in one layer (MoE: router + its top-k experts)."""
  return sum(layer_weights(cfg).values())


def layer_part_flops(cfg: Qwen3Config, rows: int, row_length: int) -> dict[str, float]:
  """FLOPs of one layer's forward over [rows, row_length] tokens, by part (`remat.PARTS`)."""
  tokens = rows * row_length
  parts = {name: 2.0 * tokens * weights for name, weights in layer_weights(cfg).items()}
  parts["core"] = 4.0 * cfg.num_heads * cfg.head_dim * rows * causal_pairs(row_length)
  return parts


def layers_forward_flops(cfg: Qwen3Config, rows: int, row_length: int) -> float:
  """FLOPs of the decoder layers' forward pass over [rows, row_length] tokens."""
  return cfg.num_layers * sum(layer_part_flops(cfg, rows, row_length).values())


def recompute_flops(cfg: Qwen3Config, rows: int, row_length: int) -> float:
  """FLOPs the backward spends running the layers' forward parts again under `cfg.remat`."""
  parts = layer_part_flops(cfg, rows, row_length)
  return cfg.num_layers * sum(parts[name] for name in remat.policy(cfg.remat).recomputes)


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
  """(model FLOPs, executed FLOPs) of one train step: 3 forward passes, plus what the
  backward recomputes under `cfg.remat` (`recompute_flops`)."""
  model = 3.0 * forward_flops(cfg, rows, row_length, logit_positions, vocab)
  return model, model + recompute_flops(cfg, rows, row_length)
