"""Numeric parity with transformers (torch, fp32): logits and the MoE load-balancing loss.

Tiny random HF models with random (not all-ones) norm weights and a strong random router, on
a right-padded batch, loaded through our HF loader. Tolerance 1e-4 (fp32, highest matmul
precision: tests/conftest.py); observed ~3e-7.
"""
import numpy as np
import pytest
import torch
import transformers

from carr_jax.model import hf_io
from carr_jax.model import qwen3 as M

VOCAB = 320
LENGTHS = [16, 11, 5]


def _hf_model(kind, tied=False, norm_topk_prob=True):
  torch.manual_seed(0)
  common = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, head_dim=32, tie_word_embeddings=tied,
                attn_implementation="eager")
  if kind == "dense":
    cfg = transformers.Qwen3Config(intermediate_size=96, rope_theta=5e6, **common)
  else:
    cfg = transformers.Qwen3MoeConfig(moe_intermediate_size=24, num_experts=6,
                                      num_experts_per_tok=2, norm_topk_prob=norm_topk_prob,
                                      rope_theta=1e7, router_aux_loss_coef=0.001, **common)
  model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "norm" in name:
        p.copy_(1.0 + 0.4 * torch.randn_like(p))
      elif name.endswith("mlp.gate.weight"):
        p.copy_(torch.randn_like(p))  # a decisive router: top-k choices really differ
  return model


def _padded_batch():
  rng = np.random.default_rng(0)
  t = max(LENGTHS)
  tokens = rng.integers(0, VOCAB, (len(LENGTHS), t))
  mask = np.arange(t)[None] < np.array(LENGTHS)[:, None]
  return tokens, mask


@pytest.mark.parametrize("kind,tied,norm_topk,moe_impl", [
    ("dense", True, True, None), ("dense", False, True, None),
    ("moe", False, True, "ragged"), ("moe", False, False, "ragged"),
    ("moe", False, True, "dense"), ("moe", False, False, "dense")])
def test_logits_and_aux_loss_match_transformers(tmp_path, kind, tied, norm_topk, moe_impl):
  hf_model = _hf_model(kind, tied, norm_topk)
  hf_model.save_pretrained(str(tmp_path))
  overrides = {"moe_impl": moe_impl} if moe_impl else {}
  cfg, params = hf_io.load_hf(str(tmp_path), **overrides)
  assert cfg.tie_word_embeddings == tied and cfg.norm_topk_prob == norm_topk
  tokens, mask = _padded_batch()
  with torch.no_grad():
    out = hf_model(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask.astype(int)),
                   output_router_logits=kind == "moe")
  positions = np.where(mask, np.arange(tokens.shape[1])[None], 0)
  model = M.Qwen3(cfg)
  hidden, aux = model.apply({"params": params}, tokens, positions, mask.astype(np.int32),
                            method=M.Qwen3.hidden_and_aux)
  logits = np.asarray(model.apply({"params": params}, hidden, method=M.Qwen3.logits))
  diff = np.abs(logits - out.logits.numpy())[mask].max()
  assert diff <= 1e-4, diff
  if kind == "moe":  # HF reports the raw Switch loss; ours is already times the coefficient
    np.testing.assert_allclose(float(aux.loss) / cfg.router_aux_loss_coef, float(out.aux_loss),
                               rtol=0, atol=1e-5)
