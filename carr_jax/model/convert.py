"""Checkpoint conversion: Hugging Face <-> ours (orbax), and a logits parity check.

  python -m carr_jax.convert --hf-to-ours --hf HF_DIR --out OURS_DIR [--param-dtype bfloat16]
  python -m carr_jax.convert --ours-to-hf --ckpt OURS_DIR --out HF_DIR [--dtype bfloat16]
  python -m carr_jax.convert --check --hf HF_DIR

Our format (a directory): `params/` is an orbax StandardCheckpointer checkpoint of
`{"params": tree}` (docs/design.md section 1), `model_config.json` our `Qwen3Config` (written
last: a directory without it is incomplete),
`hf_config.json` the source config.json (fields we do not model, such as token ids, survive a
round trip) and `tokenizer/` the tokenizer files. Loading and saving are sharded over a mesh
(`--mesh fsdp=-1` by default: parameters spread over every device), so no device holds a
whole large model.

`--check` runs transformers (torch, fp32, highest matmul precision, eager attention) and our
model on the same seeded random tokens, one full row plus a right- and a left-padded row,
and compares fp32 logits at the non-padding positions. Its last output line is always
`max_abs_logit_diff=<float>`; the exit code is 1 when that exceeds --atol (1e-4).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from carr_jax.model import hf_io
from carr_jax.model import qwen3 as model
from carr_jax.model import sharding
from carr_jax.model.config import Qwen3Config
from carr_jax.model.hf_config import hf_dtype, read_config_json

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


def parse_size(text: str) -> int:
  """'5GB' / '200MB' / '1234' -> bytes (decimal units, as transformers' max_shard_size)."""
  match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?B?)\s*", text.upper())
  if not match:
    raise ValueError(f"--max-shard-size {text!r}: expected a size like 5GB, 200MB or 1000")
  return int(float(match.group(1)) * _UNITS[match.group(2)])


def parse_mesh(text: str) -> dict[str, int]:
  """'data=2,fsdp=-1' -> {'data': 2, 'fsdp': -1}."""
  try:
    return {k.strip(): int(v) for k, v in (part.split("=") for part in text.split(","))}
  except ValueError as e:
    raise ValueError(f"--mesh {text!r}: expected axis=size pairs like 'fsdp=-1'") from e


def _shardings_fn(mesh_shape: dict[str, int] | None):
  if mesh_shape is None:
    return None
  mesh = sharding.make_mesh(mesh_shape)
  return lambda abstract: sharding.param_shardings(abstract, mesh)


def save_ours(params: Any, cfg: Qwen3Config, out_dir: str, *, hf_config: dict | None = None,
              tokenizer_dir: str | None = None, overwrite: bool = False) -> None:
  """Writes our checkpoint directory (every process calls this; orbax coordinates)."""
  out_dir = os.path.abspath(out_dir)
  if os.path.exists(out_dir):
    if not overwrite:
      raise FileExistsError(f"{out_dir} exists; pass --overwrite to replace it")
    if jax.process_index() == 0:
      shutil.rmtree(out_dir)
    if jax.process_count() > 1:  # nobody writes before the old directory is gone
      multihost_utils.sync_global_devices(f"save_ours:{out_dir}")
  checkpointer = ocp.StandardCheckpointer()
  checkpointer.save(os.path.join(out_dir, "params"), {"params": params})
  checkpointer.wait_until_finished()
  if jax.process_index() != 0:
    return
  if tokenizer_dir:
    os.makedirs(os.path.join(out_dir, "tokenizer"), exist_ok=True)
    for name in hf_io.TOKENIZER_FILES:
      if os.path.exists(os.path.join(tokenizer_dir, name)):
        shutil.copyfile(os.path.join(tokenizer_dir, name),
                        os.path.join(out_dir, "tokenizer", name))
  if hf_config is not None:
    _write_json(os.path.join(out_dir, "hf_config.json"), hf_config)
  _write_json(os.path.join(out_dir, "model_config.json"), dataclasses.asdict(cfg))


def _write_json(path: str, obj: Any) -> None:
  with open(path + ".tmp", "w") as f:
    json.dump(obj, f, indent=2, sort_keys=True)
  os.replace(path + ".tmp", path)


def read_ours_config(ckpt_dir: str) -> Qwen3Config:
  path = os.path.join(ckpt_dir, "model_config.json")
  if not os.path.exists(path):
    raise FileNotFoundError(f"{ckpt_dir!r} is not a complete carr_jax checkpoint: no "
                            "model_config.json")
  with open(path) as f:
    fields = json.load(f)
  known = {f.name for f in dataclasses.fields(Qwen3Config)}
  unknown = sorted(set(fields) - known)
  if unknown:
    raise ValueError(f"{path}: unknown Qwen3Config fields {unknown}")
  return Qwen3Config(**fields)


def load_ours(ckpt_dir: str, shardings_fn=None) -> tuple[Qwen3Config, Any]:
  """(cfg, params) from our checkpoint; `shardings_fn(abstract) -> shardings` places them."""
  cfg = read_ours_config(ckpt_dir)
  abstract = model.abstract_params(cfg)
  if shardings_fn is not None:
    abstract = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                            abstract, shardings_fn(abstract))
  else:
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    abstract = jax.tree.map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=device), abstract)
  restored = ocp.StandardCheckpointer().restore(os.path.join(os.path.abspath(ckpt_dir),
                                                             "params"), {"params": abstract})
  return cfg, restored["params"]


def hf_to_ours(hf_dir: str, out_dir: str, *, param_dtype: str | None = None,
               mesh_shape: dict[str, int] | None = None, strict: bool = True,
               overwrite: bool = False) -> Qwen3Config:
  """HF directory -> our checkpoint. param_dtype defaults to the checkpoint's own dtype."""
  hf_config = read_config_json(hf_dir)
  cfg, params = hf_io.load_hf(hf_dir, _shardings_fn(mesh_shape), strict=strict,
                              param_dtype=param_dtype or hf_dtype(hf_config))
  save_ours(params, cfg, out_dir, hf_config=hf_config, tokenizer_dir=hf_dir,
            overwrite=overwrite)
  return cfg


def ours_to_hf(ckpt_dir: str, out_dir: str, *, dtype: str | None = None,
               max_shard_bytes: int = hf_io.DEFAULT_MAX_SHARD_BYTES,
               mesh_shape: dict[str, int] | None = None, overwrite: bool = False) -> None:
  """Our checkpoint -> HF directory (dtype defaults to the stored param dtype)."""
  cfg, params = load_ours(ckpt_dir, _shardings_fn(mesh_shape))
  base = None
  if os.path.exists(os.path.join(ckpt_dir, "hf_config.json")):
    with open(os.path.join(ckpt_dir, "hf_config.json")) as f:
      base = json.load(f)
  tokenizer_dir = os.path.join(ckpt_dir, "tokenizer")
  hf_io.save_hf(params, cfg, out_dir, dtype=dtype, max_shard_bytes=max_shard_bytes,
                tokenizer_dir=tokenizer_dir if os.path.isdir(tokenizer_dir) else None,
                base_config=base, overwrite=overwrite)


def check_inputs(vocab_size: int, batch: int, seq_len: int, seed: int):
  """Seeded tokens [B, T] with row 1 right-padded and row 2 left-padded.

  Returns (tokens, positions, segment_ids), positions restarting at 0 at each row's first
  real token and segment id 0 on padding, as our model expects.
  """
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, vocab_size, (batch, seq_len), dtype=np.int64)
  segment_ids = np.ones((batch, seq_len), np.int32)
  if batch > 1:
    segment_ids[1, seq_len // 2 + 1:] = 0  # right padding
  if batch > 2:
    segment_ids[2, :seq_len // 3] = 0  # left padding
  positions = np.maximum(np.cumsum(segment_ids, axis=1) - 1, 0).astype(np.int32)
  return tokens, positions, segment_ids


def check_logits(hf_dir: str, *, seed: int = 0, batch: int = 3, seq_len: int = 16) -> float:
  """Max |logit difference| between transformers and our model at non-padding positions."""
  import torch  # the reference only; training never imports torch
  from transformers import AutoModelForCausalLM

  torch.set_float32_matmul_precision("highest")
  torch.backends.cuda.matmul.allow_tf32 = False
  jax.config.update("jax_default_matmul_precision", "highest")
  reference = AutoModelForCausalLM.from_pretrained(
      hf_dir, dtype=torch.float32, attn_implementation="eager").eval()
  cfg, params = hf_io.load_hf(hf_dir, param_dtype="float32", compute_dtype="float32")
  tokens, positions, segment_ids = check_inputs(cfg.vocab_size, batch, seq_len, seed)
  with torch.no_grad():
    expected = reference(input_ids=torch.from_numpy(tokens),
                         attention_mask=torch.from_numpy(segment_ids > 0).long(),
                         position_ids=torch.from_numpy(positions).long()).logits.numpy()
  got = np.asarray(model.forward_logits(params, cfg, tokens, positions, segment_ids))
  valid = segment_ids > 0
  return float(np.max(np.abs(got[valid] - expected[valid])))
