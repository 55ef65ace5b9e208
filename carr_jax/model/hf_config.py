"""Hugging Face `config.json` <-> `Qwen3Config`, and HF tensor names <-> our parameter paths.

`config_from_hf` reads what transformers 4.x and 5.x write for Qwen3 (dense) and Qwen3-MoE:
`rope_theta` or `rope_parameters` (5.x) or legacy `rope_scaling`, `num_experts` or
`num_local_experts` (5.x), an explicit `head_dim`. Defaults for absent keys are those of the
transformers 5.23 config classes, so a config means here what it means to the reference.
Features our model does not implement (scaled RoPE, sliding windows, dense layers inside a MoE
stack, biases, other activations) raise `ValueError` naming the field instead of being ignored.

`config_to_hf` writes a config that transformers 5.x and SGLang load, in the hub spelling
(`rope_theta`, `num_experts`, `torch_dtype`) next to the 5.x spelling (`rope_parameters`,
`dtype`) so readers of either generation see the same values.

`rules_for(cfg)` is the name/layout mapping of docs/design.md section 1, one `Rule` per
parameter; `read_layer_slice` and `to_hf_tensors` apply it in each direction (used by
`carr_jax.model.hf_io`, which does the file I/O).

  cfg = read_hf_config("/path/to/Qwen3-4B-Thinking-2507", param_dtype="bfloat16")
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Iterator

import numpy as np

from carr_jax.model.config import Qwen3Config

ARCHITECTURES = {"Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM": "qwen3_moe"}
_MODEL_TYPE_TO_ARCH = {v: k for k, v in ARCHITECTURES.items()}
# dtype names in config.json (torch spelling) -> numpy/jax spelling.
_HF_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def _arch_of(c: dict) -> str:
  """Returns 'Qwen3ForCausalLM' or 'Qwen3MoeForCausalLM', or raises naming the field."""
  archs = c.get("architectures")
  if archs:
    if len(archs) != 1 or archs[0] not in ARCHITECTURES:
      raise ValueError(f"config.json field 'architectures'={archs!r} is not supported; "
                       f"expected one of {sorted(ARCHITECTURES)}")
    return archs[0]
  # Configs built in memory (not from a model) have no 'architectures'; model_type says enough.
  model_type = c.get("model_type")
  if model_type not in _MODEL_TYPE_TO_ARCH:
    raise ValueError(f"config.json has no 'architectures' and field 'model_type'={model_type!r} "
                     f"is not supported; expected one of {sorted(_MODEL_TYPE_TO_ARCH)}")
  return _MODEL_TYPE_TO_ARCH[model_type]


def _require(c: dict, key: str) -> Any:
  if c.get(key) is None:
    raise ValueError(f"config.json lacks required field {key!r}")
  return c[key]


def _rope_theta(c: dict) -> float:
  """RoPE base from rope_scaling / rope_parameters / rope_theta, in transformers' priority."""
  field = "rope_scaling" if c.get("rope_scaling") else "rope_parameters"
  rope = c.get(field) or {}
  if not isinstance(rope, dict) or any(isinstance(v, dict) for v in rope.values()):
    raise ValueError(f"config.json field {field!r}={rope!r}: only one global RoPE is supported")
  rope_type = rope.get("rope_type", rope.get("type", "default"))
  if rope_type != "default":
    raise ValueError(f"config.json field '{field}.rope_type'={rope_type!r} is not supported; "
                     "only 'default' (unscaled) RoPE is implemented")
  if rope.get("partial_rotary_factor", 1.0) != 1.0:
    raise ValueError(f"config.json field '{field}.partial_rotary_factor' is not supported")
  top, inner = c.get("rope_theta"), rope.get("rope_theta")
  if top is not None and inner is not None and float(top) != float(inner):
    raise ValueError(f"config.json has rope_theta={top} but {field}.rope_theta={inner}")
  theta = inner if inner is not None else top
  return float(theta if theta is not None else 10_000.0)  # transformers' default_theta


def _check_unsupported(c: dict, is_moe: bool, num_layers: int) -> None:
  if c.get("hidden_act", "silu") != "silu":
    raise ValueError(f"config.json field 'hidden_act'={c['hidden_act']!r}: only 'silu' is "
                     "supported")
  if c.get("attention_bias", False):
    raise ValueError("config.json field 'attention_bias'=true is not supported (Qwen3 has none)")
  if c.get("use_sliding_window", False):
    raise ValueError("config.json field 'use_sliding_window'=true is not supported")
  layer_types = c.get("layer_types")
  if layer_types is not None and any(t != "full_attention" for t in layer_types):
    raise ValueError(f"config.json field 'layer_types'={layer_types!r}: only full_attention is "
                     "supported")
  if is_moe:
    if c.get("decoder_sparse_step", 1) != 1:
      raise ValueError(f"config.json field 'decoder_sparse_step'={c['decoder_sparse_step']}: only "
                       "1 (every layer MoE) is supported")
    if c.get("mlp_only_layers"):
      raise ValueError(f"config.json field 'mlp_only_layers'={c['mlp_only_layers']!r}: dense "
                       "layers inside a MoE model are not supported")
    if c.get("shared_expert_intermediate_size"):
      raise ValueError("config.json field 'shared_expert_intermediate_size': shared experts are "
                       "not supported")
  if layer_types is not None and len(layer_types) != num_layers:
    raise ValueError(f"config.json field 'layer_types' has {len(layer_types)} entries for "
                     f"num_hidden_layers={num_layers}")


def config_from_hf(c: dict, **overrides: Any) -> Qwen3Config:
  """Builds our config from a parsed HF config.json; `overrides` set our own fields."""
  arch = _arch_of(c)
  is_moe = arch == "Qwen3MoeForCausalLM"
  hidden, heads = _require(c, "hidden_size"), _require(c, "num_attention_heads")
  num_layers = _require(c, "num_hidden_layers")
  _check_unsupported(c, is_moe, num_layers)
  # transformers 5.23: dense Qwen3Config defaults head_dim to 128; Qwen3Moe has no default and
  # the model falls back to hidden // heads.
  head_dim = c.get("head_dim") or (hidden // heads if is_moe else 128)
  # Absent num_key_value_heads takes the class default (32 dense, 4 MoE); null means MHA.
  kv_heads = c.get("num_key_value_heads", 4 if is_moe else 32) or heads
  kw: dict[str, Any] = dict(
      vocab_size=_require(c, "vocab_size"), hidden_size=hidden, num_layers=num_layers,
      num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
      intermediate_size=_require(c, "intermediate_size"), rope_theta=_rope_theta(c),
      rms_norm_eps=float(c.get("rms_norm_eps", 1e-6)),
      tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
      max_position_embeddings=int(c.get("max_position_embeddings", 32_768)))
  if is_moe:
    experts = c.get("num_experts", c.get("num_local_experts"))
    other = c.get("num_local_experts", experts)
    if experts != other:
      raise ValueError(f"config.json has num_experts={experts} but num_local_experts={other}")
    kw.update(num_experts=int(experts if experts is not None else 128),
              num_experts_per_tok=int(c.get("num_experts_per_tok", 8)),
              moe_intermediate_size=int(c.get("moe_intermediate_size", 768)),
              norm_topk_prob=bool(c.get("norm_topk_prob", False)),
              router_aux_loss_coef=float(c.get("router_aux_loss_coef", 0.001)))
  if kw["num_heads"] % kw["num_kv_heads"]:
    raise ValueError(f"num_attention_heads={heads} is not a multiple of num_key_value_heads="
                     f"{kw['num_kv_heads']}")
  kw.update(overrides)
  return Qwen3Config(**kw)


def hf_dtype(c: dict) -> str:
  """The checkpoint dtype a config.json declares ('float32' when it declares none)."""
  name = c.get("dtype") or c.get("torch_dtype") or "float32"
  name = name.removeprefix("torch.")
  if name not in _HF_DTYPES:
    raise ValueError(f"config.json field 'dtype'={name!r} is not supported; "
                     f"expected one of {sorted(_HF_DTYPES)}")
  return _HF_DTYPES[name]


def config_to_hf(cfg: Qwen3Config, dtype: str | None = None,
                 base: dict | None = None) -> dict:
  """Returns a config.json dict for `cfg` with weights stored in `dtype`.

  `base` (e.g. the config.json a checkpoint came with) supplies fields we do not model, such as
  bos/eos token ids; every architecture field is overwritten from `cfg`.
  """
  dtype = dtype or cfg.param_dtype
  arch = "Qwen3MoeForCausalLM" if cfg.is_moe else "Qwen3ForCausalLM"
  out = dict(base or {})
  for stale in ("rope_scaling", "num_local_experts", "transformers_version", "layer_types"):
    out.pop(stale, None)
  out.update({
      "architectures": [arch], "model_type": ARCHITECTURES[arch],
      "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
      "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
      "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim,
      "intermediate_size": cfg.intermediate_size, "hidden_act": "silu",
      "rms_norm_eps": cfg.rms_norm_eps, "tie_word_embeddings": cfg.tie_word_embeddings,
      "max_position_embeddings": cfg.max_position_embeddings,
      "rope_theta": cfg.rope_theta,
      "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
      "attention_bias": False, "attention_dropout": out.get("attention_dropout", 0.0),
      "use_sliding_window": False, "sliding_window": None,
      "torch_dtype": dtype, "dtype": dtype,
  })
  out.setdefault("use_cache", True)
  if cfg.is_moe:
    out.update({"num_experts": cfg.num_experts, "num_experts_per_tok": cfg.num_experts_per_tok,
                "moe_intermediate_size": cfg.moe_intermediate_size,
                "norm_topk_prob": cfg.norm_topk_prob,
                "router_aux_loss_coef": cfg.router_aux_loss_coef,
                "decoder_sparse_step": 1, "mlp_only_layers": []})
  return out


def read_hf_config(hf_dir: str, **overrides: Any) -> Qwen3Config:
  """Reads `hf_dir/config.json` into our config."""
  return config_from_hf(read_config_json(hf_dir), **overrides)


def read_config_json(hf_dir: str) -> dict:
  path = os.path.join(hf_dir, "config.json")
  if not os.path.exists(path):
    raise FileNotFoundError(f"{hf_dir!r} is not a Hugging Face model directory: no config.json")
  with open(path) as f:
    return json.load(f)


# ---- the name/layout mapping (docs/design.md 1) ------------------------------------------


@dataclasses.dataclass(frozen=True)
class Rule:
  """How one of our leaves maps to HF tensors.

  kind: "same" (identical), "transpose" (2-D, reversed), "heads_in" (ours [D, X, H] <->
  HF [X*H, D]), "heads_out" (ours [N, H, D] <-> HF [D, N*H]), "experts" (ours [E, A, B] <->
  one HF [B, A] per expert, or a fused tensor). name: HF name with '{l}' layer, '{e}' expert.
  shape: our shape for one layer.
  """
  kind: str
  name: str
  shape: tuple[int, ...]

  @property
  def layered(self) -> bool:
    return "{l}" in self.name

  @property
  def fused_name(self) -> str:
    """The transformers 5.x fused tensor holding this expert projection."""
    prefix, proj = self.name.split("{e}.")
    return prefix + ("down_proj" if proj.startswith("down_proj") else "gate_up_proj")


def rules_for(cfg: Qwen3Config) -> dict[str, Rule]:
  """Our '/'-joined parameter path -> Rule, in HF file order within a layer."""
  d, n, k, h, v = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.vocab_size
  lay = "model.layers.{l}."
  rules = {
      "embed/embedding": Rule("same", "model.embed_tokens.weight", (v, d)),
      "layers/input_norm/scale": Rule("same", lay + "input_layernorm.weight", (d,)),
      "layers/attn/q_proj": Rule("heads_in", lay + "self_attn.q_proj.weight", (d, n, h)),
      "layers/attn/k_proj": Rule("heads_in", lay + "self_attn.k_proj.weight", (d, k, h)),
      "layers/attn/v_proj": Rule("heads_in", lay + "self_attn.v_proj.weight", (d, k, h)),
      "layers/attn/o_proj": Rule("heads_out", lay + "self_attn.o_proj.weight", (n, h, d)),
      "layers/attn/q_norm": Rule("same", lay + "self_attn.q_norm.weight", (h,)),
      "layers/attn/k_norm": Rule("same", lay + "self_attn.k_norm.weight", (h,)),
      "layers/post_attn_norm/scale": Rule("same", lay + "post_attention_layernorm.weight", (d,)),
  }
  if cfg.is_moe:
    e, f = cfg.num_experts, cfg.moe_intermediate_size
    experts = lay + "mlp.experts.{e}."
    rules.update({
        "layers/moe/router": Rule("transpose", lay + "mlp.gate.weight", (d, e)),
        "layers/moe/gate_proj": Rule("experts", experts + "gate_proj.weight", (e, d, f)),
        "layers/moe/up_proj": Rule("experts", experts + "up_proj.weight", (e, d, f)),
        "layers/moe/down_proj": Rule("experts", experts + "down_proj.weight", (e, f, d)),
    })
  else:
    f = cfg.intermediate_size
    rules.update({
        "layers/mlp/gate_proj": Rule("transpose", lay + "mlp.gate_proj.weight", (d, f)),
        "layers/mlp/up_proj": Rule("transpose", lay + "mlp.up_proj.weight", (d, f)),
        "layers/mlp/down_proj": Rule("transpose", lay + "mlp.down_proj.weight", (f, d)),
    })
  rules["final_norm/scale"] = Rule("same", "model.norm.weight", (d,))
  if not cfg.tie_word_embeddings:
    rules["lm_head/kernel"] = Rule("transpose", "lm_head.weight", (d, v))
  return rules


def hf_names(rule: Rule, layer: int | None, fused: bool) -> list[str]:
  """The HF tensors holding `rule`'s leaf for one layer."""
  name = rule.name.replace("{l}", str(layer)) if rule.layered else rule.name
  if rule.kind != "experts":
    return [name]
  if fused:
    return [rule.fused_name.replace("{l}", str(layer))]
  return [name.replace("{e}", str(e)) for e in range(rule.shape[0])]


def hf_shape(rule: Rule, fused: bool) -> tuple[int, ...]:
  """Shape of each tensor in `hf_names`."""
  s = rule.shape
  if rule.kind == "same":
    return s
  if rule.kind == "transpose":
    return s[::-1]
  if rule.kind == "heads_in":
    return (s[1] * s[2], s[0])
  if rule.kind == "heads_out":
    return (s[2], s[0] * s[1])
  if not fused:
    return (s[2], s[1])
  if rule.fused_name.endswith("gate_up_proj"):
    return (s[0], 2 * s[2], s[1])  # [E, 2F, D]: gate rows then up rows
  return (s[0], s[2], s[1])  # [E, D, F]


def read_layer_slice(ckpt, rule: Rule, layer: int | None, ix: tuple[slice, ...],
          fused: bool) -> np.ndarray:
  """Our per-layer slice `ix` (contiguous slices) of `rule`'s leaf; `ckpt.read(name, slices)`
  reads a slice of one HF tensor."""
  name = hf_names(rule, layer, fused)[0]
  if rule.kind == "same":
    return ckpt.read(name, ix)
  if rule.kind == "transpose":
    return ckpt.read(name, ix[::-1]).T
  if rule.kind == "heads_in":  # ours [D, X, H] <- HF [X*H, D]; read whole heads
    d, x, h = ix
    width = rule.shape[2]
    rows = ckpt.read(name, (slice(x.start * width, x.stop * width), d))  # [x*H, d]
    return rows.reshape(x.stop - x.start, width, -1).transpose(2, 0, 1)[:, :, h]
  if rule.kind == "heads_out":  # ours [N, H, D] <- HF [D, N*H]
    x, h, d = ix
    width = rule.shape[1]
    cols = ckpt.read(name, (d, slice(x.start * width, x.stop * width)))  # [d, x*H]
    return cols.reshape(-1, x.stop - x.start, width).transpose(1, 2, 0)[:, h, :]
  e, a, b = ix  # ours [E, A, B]
  if not fused:
    per_expert = hf_names(rule, layer, False)
    return np.stack([ckpt.read(per_expert[i], (b, a)).T for i in range(e.start, e.stop)])
  if rule.fused_name.endswith("down_proj"):  # [E, D, F] -> ours [E, F, D]
    return ckpt.read(name, (e, b, a)).transpose(0, 2, 1)
  offset = rule.shape[2] if ".up_proj." in rule.name else 0  # up rows follow the F gate rows
  rows = slice(b.start + offset, b.stop + offset)
  return ckpt.read(name, (e, rows, a)).transpose(0, 2, 1)


def to_hf_tensors(rule: Rule, layer: int | None, a: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
  """Our (per-layer) array -> (HF name, array) pairs in the hub layout."""
  names = hf_names(rule, layer, False)
  if rule.kind == "same":
    yield names[0], a
  elif rule.kind == "transpose":
    yield names[0], a.T
  elif rule.kind == "heads_in":
    yield names[0], a.reshape(a.shape[0], -1).T
  elif rule.kind == "heads_out":
    yield names[0], a.reshape(-1, a.shape[-1]).T
  else:
    for e, name in enumerate(names):
      yield name, a[e].T
