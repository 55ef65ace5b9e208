"""carr_jax.model.hf_config against transformers' own config classes: defaults, spellings,
refusals and the round trip of every preset. Nothing is downloaded. Run:
  .venv/bin/python -m pytest tests/carr_jax/test_hf_config.py -x -q
"""
import pytest
from transformers import AutoConfig

from carr_jax.model import hf_config
from carr_jax.model.config import get_preset


def test_config_from_hf_agrees_with_transformers_defaults_and_spellings():
  cases = [
      {"architectures": ["Qwen3ForCausalLM"], "vocab_size": 300, "hidden_size": 64,
       "num_hidden_layers": 3, "num_attention_heads": 32, "intermediate_size": 96},
      {"model_type": "qwen3", "vocab_size": 300, "hidden_size": 64, "num_hidden_layers": 2,
       "num_attention_heads": 8, "num_key_value_heads": None, "intermediate_size": 96},
      {"model_type": "qwen3", "vocab_size": 300, "hidden_size": 64, "num_hidden_layers": 2,
       "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16,
       "intermediate_size": 96, "rope_theta": 5e6, "tie_word_embeddings": True},
      {"architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 300, "hidden_size": 64,
       "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 96,
       "num_experts": 6, "rope_parameters": {"rope_type": "default", "rope_theta": 1e7}},
      {"architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 300, "hidden_size": 64,
       "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
       "intermediate_size": 96, "num_local_experts": 8, "num_experts_per_tok": 3,
       "moe_intermediate_size": 24, "norm_topk_prob": True, "router_aux_loss_coef": 0.01,
       "head_dim": 32, "rms_norm_eps": 1e-5},
  ]
  for c in cases:
    ours = hf_config.config_from_hf(c)
    model_type = c.get("model_type") or (
        "qwen3_moe" if "Moe" in c["architectures"][0] else "qwen3")
    ref = AutoConfig.for_model(model_type, **{k: v for k, v in c.items() if k != "model_type"})
    assert ours.head_dim == getattr(ref, "head_dim", ref.hidden_size // ref.num_attention_heads)
    assert ours.num_kv_heads == ref.num_key_value_heads
    assert ours.rope_theta == ref.rope_parameters["rope_theta"]
    assert ours.rms_norm_eps == ref.rms_norm_eps
    assert ours.tie_word_embeddings == ref.tie_word_embeddings
    assert ours.max_position_embeddings == ref.max_position_embeddings
    if ours.is_moe:
      assert ours.num_experts == ref.num_experts
      assert ours.num_experts_per_tok == ref.num_experts_per_tok
      assert ours.moe_intermediate_size == ref.moe_intermediate_size
      assert ours.norm_topk_prob == ref.norm_topk_prob
      assert ours.router_aux_loss_coef == ref.router_aux_loss_coef


@pytest.mark.parametrize("change,field", [
    ({"architectures": ["LlamaForCausalLM"]}, "architectures"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_type"),
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0}}, "rope_type"),
    ({"use_sliding_window": True}, "use_sliding_window"),
    ({"mlp_only_layers": [1]}, "mlp_only_layers"),
    ({"decoder_sparse_step": 2}, "decoder_sparse_step"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"attention_bias": True}, "attention_bias"),
    ({"rope_theta": 1e6, "rope_parameters": {"rope_type": "default", "rope_theta": 1e7}},
     "rope_theta"),
    ({"num_experts": 4, "num_local_experts": 8}, "num_local_experts"),
    ({"hidden_size": None}, "hidden_size"),
    ({"dtype": "int8"}, "dtype"),
])
def test_config_rejects_unsupported_naming_the_field(change, field):
  base = hf_config.config_to_hf(get_preset("tiny_moe"))
  base.update(change)
  with pytest.raises(ValueError, match=field):
    hf_config.config_from_hf(base)
    hf_config.hf_dtype(base)


@pytest.mark.parametrize("preset", ["tiny_dense", "tiny_moe", "qwen3_4b_thinking_2507",
                                    "qwen3_30b_a3b_thinking_2507"])
def test_config_to_hf_and_back_is_identity(preset):
  cfg = get_preset(preset)
  hf = hf_config.config_to_hf(cfg, "bfloat16", base={"eos_token_id": 151645})
  assert hf["eos_token_id"] == 151645 and hf["dtype"] == hf["torch_dtype"] == "bfloat16"
  assert hf_config.config_from_hf(hf) == cfg
  # transformers reads the same values.
  ref = AutoConfig.for_model(hf["model_type"], **{k: v for k, v in hf.items()
                                                  if k != "model_type"})
  assert ref.rope_parameters["rope_theta"] == cfg.rope_theta
  assert ref.head_dim == cfg.head_dim
