"""Hugging Face Qwen3 / Qwen3-MoE safetensors <-> our Flax parameter tree (docs/design.md 1).

Loading reads `config.json` plus `model.safetensors` or an index-sharded
`model.safetensors.index.json` (fp32, bf16 or fp16) straight into sharded jax arrays: every
leaf is built with `jax.make_array_from_callback`, whose callback reads from the memory-mapped
safetensors files only the slice (layers x rows x columns) that one device holds; leaves are
built one after another, so a host holds at most its devices' slices of one leaf. MoE
experts are read per expert (`mlp.experts.{e}.{gate,up,down}_proj.weight`, the hub layout)
or fused (`mlp.experts.gate_up_proj` [E, 2F, D] + `mlp.experts.down_proj` [E, D, F], the
transformers 5.x in-memory layout). Everything is checked before the first read: a missing
tensor, a shape that disagrees with config.json, or a tensor we would not use is an error
naming it.

Exporting writes the hub layout (per-expert MoE, `lm_head.weight` only when untied), shards
above `max_shard_bytes` with `model.safetensors.index.json`, into a temporary directory next
to the target that is renamed into place only when complete. Every process takes part in
gathering (one layer at a time), process 0 alone writes. The result loads with transformers
`AutoModelForCausalLM` and with SGLang `/update_weights_from_disk`.

  from carr_jax.model import hf_io

  from carr_jax.model import sharding
  mesh = sharding.make_mesh({"fsdp": -1})
  cfg, params = hf_io.load_hf(hf_dir, lambda abstract: sharding.param_shardings(abstract, mesh))
  hf_io.save_hf(params, cfg, out_dir, dtype="bfloat16", tokenizer_dir=hf_dir)
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from typing import Any

import jax
import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy for safetensors)
import numpy as np
from jax.experimental import multihost_utils
from safetensors import safe_open
from safetensors.numpy import save_file

from carr_jax.model import qwen3 as model_lib
from carr_jax.model.config import Qwen3Config
from carr_jax.model.hf_config import (Rule, config_to_hf, hf_names, hf_shape, read_hf_config,
                                read_layer_slice, rules_for, to_hf_tensors)
from carr_jax.model.sharding import path_str

log = logging.getLogger(__name__)

DEFAULT_MAX_SHARD_BYTES = 5 * 10**9  # transformers' "5GB"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                   "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
                   "generation_config.json")
# Buffers some old checkpoints carry; they hold no learned weights.
_IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)


class CheckpointError(ValueError):
  """An HF checkpoint's tensors do not fit its config (missing, misshapen, unused)."""


class Checkpoint:
  """Read-only view of the safetensors files of one HF directory (memory-mapped, lazy)."""

  def __init__(self, hf_dir: str):
    self.dir = hf_dir
    index = os.path.join(hf_dir, "model.safetensors.index.json")
    single = os.path.join(hf_dir, "model.safetensors")
    if os.path.exists(index):
      with open(index) as f:
        self.file_of = dict(json.load(f)["weight_map"])
    elif os.path.exists(single):
      with safe_open(single, "np") as f:
        self.file_of = {name: "model.safetensors" for name in f.keys()}
    else:
      raise FileNotFoundError(f"{hf_dir!r} has neither model.safetensors nor "
                              "model.safetensors.index.json")
    self._handles: dict[str, Any] = {}

  def _handle(self, name: str):
    file = self.file_of[name]
    if file not in self._handles:
      self._handles[file] = safe_open(os.path.join(self.dir, file), "np")
    return self._handles[file]

  def shape(self, name: str) -> tuple[int, ...]:
    return tuple(self._handle(name).get_slice(name).get_shape())

  def dtype(self, name: str) -> str:
    return self._handle(name).get_slice(name).get_dtype()

  def read(self, name: str, index: tuple[slice, ...]) -> np.ndarray:
    """The [index] slice of tensor `name`; only those bytes are read from disk."""
    return self._handle(name).get_slice(name)[index]


# ---- loading -----------------------------------------------------------------------------


def _fused_layers(ckpt: Checkpoint, cfg: Qwen3Config) -> set[int]:
  """Layers whose experts are stored fused; a layer holding both layouts is an error."""
  fused = set()
  for layer in range(cfg.num_layers if cfg.is_moe else 0):
    prefix = f"model.layers.{layer}.mlp.experts."
    has_fused = prefix + "gate_up_proj" in ckpt.file_of
    has_split = prefix + "0.gate_proj.weight" in ckpt.file_of
    if has_fused and has_split:
      raise CheckpointError(f"{ckpt.dir}: layer {layer} has both fused ({prefix}gate_up_proj) and "
                       f"per-expert ({prefix}0.gate_proj.weight) expert weights")
    if has_fused:
      fused.add(layer)
  return fused


def _validate(ckpt: Checkpoint, cfg: Qwen3Config, rules: dict[str, Rule], fused: set[int],
              strict: bool) -> None:
  """Checks every tensor we need exists with the right shape and dtype; reports the rest."""
  used = set()
  for path, rule in rules.items():
    for layer in range(cfg.num_layers) if rule.layered else [None]:
      is_fused = layer in fused
      expected = hf_shape(rule, is_fused)
      for name in hf_names(rule, layer, is_fused):
        if name not in ckpt.file_of:
          raise CheckpointError(f"{ckpt.dir}: missing tensor {name!r} (for parameter {path!r})")
        got = ckpt.shape(name)
        if got != expected:
          raise CheckpointError(f"{ckpt.dir}: tensor {name!r} has shape {list(got)}, expected "
                           f"{list(expected)} from config.json")
        if ckpt.dtype(name) not in ("F32", "BF16", "F16"):
          raise CheckpointError(f"{ckpt.dir}: tensor {name!r} has dtype {ckpt.dtype(name)}; "
                           "only F32, BF16 and F16 are supported")
        used.add(name)
  extra = sorted(n for n in set(ckpt.file_of) - used if not n.endswith(_IGNORED_SUFFIXES))
  if cfg.tie_word_embeddings and "lm_head.weight" in extra:
    _check_tied_head(ckpt)
    extra.remove("lm_head.weight")
  if extra:
    msg = (f"{ckpt.dir}: {len(extra)} tensors are not used by a "
           f"{'MoE' if cfg.is_moe else 'dense'} Qwen3 of this config: {extra[:8]}"
           f"{' ...' if len(extra) > 8 else ''}")
    if strict:
      raise CheckpointError(msg + " (pass strict=False to ignore them)")
    log.warning(msg)


def _check_tied_head(ckpt: Checkpoint) -> None:
  """A tied checkpoint may still store lm_head.weight; accept it only as an exact copy."""
  full = (slice(None), slice(None))
  if not np.array_equal(ckpt.read("lm_head.weight", full),
                        ckpt.read("model.embed_tokens.weight", full)):
    raise CheckpointError(f"{ckpt.dir}: config.json says tie_word_embeddings=true but "
                     "lm_head.weight differs from model.embed_tokens.weight")


def _normalize(index: tuple[slice, ...], shape: tuple[int, ...]) -> tuple[slice, ...]:
  return tuple(slice(*s.indices(n)[:2]) for s, n in zip(index, shape))


def _leaf_callback(ckpt: Checkpoint, rule: Rule, shape, dtype, fused: set[int]):
  """Callback for make_array_from_callback: device index -> that slice, in our layout."""
  cache: dict[tuple, np.ndarray] = {}  # devices holding the same slice share one read

  def callback(index):
    index = _normalize(index, shape)
    key = tuple((s.start, s.stop) for s in index)
    if key not in cache:
      if rule.layered:
        layers = range(index[0].start, index[0].stop)
        cache[key] = np.stack([read_layer_slice(ckpt, rule, l, index[1:], l in fused).astype(dtype)
                               for l in layers])
      else:
        cache[key] = read_layer_slice(ckpt, rule, None, index, False).astype(dtype)
    return cache[key]
  return callback


def load_hf_params(hf_dir: str, cfg: Qwen3Config, shardings: Any = None, *,
                   strict: bool = True) -> dict:
  """Loads an HF checkpoint into our params tree, each leaf placed by `shardings`.

  shardings: a tree of `jax.sharding.Sharding` shaped like the params (e.g.
  `sharding.param_shardings(model.abstract_params(cfg), mesh)`), or None for the default
  device. Leaves get dtype `cfg.param_dtype`. strict=False turns unused tensors into a warning.
  """
  abstract = model_lib.abstract_params(cfg)
  flat, treedef = jax.tree_util.tree_flatten_with_path(abstract)
  if shardings is None:
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    sharding_leaves = [device] * len(flat)
  else:
    sharding_leaves = treedef.flatten_up_to(shardings)
  rules = rules_for(cfg)
  _check_layout(flat, rules, cfg)
  ckpt = Checkpoint(hf_dir)
  fused = _fused_layers(ckpt, cfg)
  _validate(ckpt, cfg, rules, fused, strict)
  leaves = []
  for (path, leaf), leaf_sharding in zip(flat, sharding_leaves):
    callback = _leaf_callback(ckpt, rules[path_str(path)], leaf.shape, leaf.dtype, fused)
    leaves.append(jax.make_array_from_callback(leaf.shape, leaf_sharding, callback))
  return jax.tree_util.tree_unflatten(treedef, leaves)


def _check_layout(flat: list, rules: dict[str, Rule], cfg: Qwen3Config) -> None:
  """The params tree (model's or caller's) must be exactly the one the mapping describes."""
  shapes = {path_str(p): tuple(leaf.shape) for p, leaf in flat}
  expected = {path: ((cfg.num_layers,) if rule.layered else ()) + rule.shape
              for path, rule in rules.items()}
  if shapes != expected:
    diff = sorted(set(shapes.items()) ^ set(expected.items()))
    raise ValueError(f"params tree does not match the HF mapping for this config; "
                     f"differing (path, shape): {diff[:8]}")


def load_hf(hf_dir: str, shardings_fn=None, *, strict: bool = True, **overrides: Any):
  """(cfg, params) from an HF directory; `shardings_fn(abstract_params) -> shardings`."""
  cfg = read_hf_config(hf_dir, **overrides)
  shardings = shardings_fn(model_lib.abstract_params(cfg)) if shardings_fn else None
  return cfg, load_hf_params(hf_dir, cfg, shardings, strict=strict)


# ---- export ------------------------------------------------------------------------------


@jax.jit
def _take_layer(x: jax.Array, layer: jax.Array) -> jax.Array:
  return jax.lax.dynamic_index_in_dim(x, layer, keepdims=False)


def _to_host(x: Any, layer: int | None) -> np.ndarray:
  """One layer (or all) of a leaf as a numpy array; a collective across processes."""
  if isinstance(x, jax.Array):
    part = _take_layer(x, np.int32(layer)) if layer is not None else x
    if not part.is_fully_addressable:
      return np.asarray(multihost_utils.process_allgather(part, tiled=True))
    return np.asarray(part)
  return np.asarray(x)[layer] if layer is not None else np.asarray(x)


def _export_order(rules: dict[str, Rule], cfg: Qwen3Config) -> list[tuple[str, int | None]]:
  """(path, layer) in file order: embedding, layer 0 .. L-1, final norm, lm_head."""
  layered = [p for p, r in rules.items() if r.layered]
  top = [p for p, r in rules.items() if not r.layered]
  return ([(top[0], None)] + [(p, l) for l in range(cfg.num_layers) for p in layered]
          + [(p, None) for p in top[1:]])


def _hf_tensors(flat: dict, rules: dict[str, Rule], order, dtype: np.dtype):
  """Yields (HF name, array) for `order`, gathering one layer of one leaf at a time."""
  for path, layer in order:
    yield from to_hf_tensors(rules[path], layer, _to_host(flat[path], layer).astype(dtype))


def _shard_plan(sizes: list[tuple[str, int]], max_bytes: int) -> list[list[str]]:
  """Greedy split in order, as transformers does: a tensor over the limit gets its own file."""
  shards, current, current_bytes = [], [], 0
  for name, nbytes in sizes:
    if current and current_bytes + nbytes > max_bytes:
      shards.append(current)
      current, current_bytes = [], 0
    current.append(name)
    current_bytes += nbytes
  return shards + [current] if current else shards


def save_hf(params: dict, cfg: Qwen3Config, out_dir: str, *, dtype: str | None = None,
            max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES, tokenizer_dir: str | None = None,
            base_config: dict | None = None, overwrite: bool = False) -> None:
  """Writes `params` as an HF checkpoint directory (atomically; process 0 writes).

  dtype: stored dtype ('float32' | 'bfloat16' | 'float16'), default cfg.param_dtype.
  tokenizer_dir: copy the tokenizer files found there. base_config: config.json fields we do
  not model (token ids, ...). Non-finite weights are refused: they would poison the server.
  Every process must call this (gathering sharded leaves is a collective).
  """
  dtype = dtype or cfg.param_dtype
  np_dtype = np.dtype(dtype)
  out_dir = os.path.abspath(out_dir)
  if os.path.exists(out_dir) and not overwrite:
    raise FileExistsError(f"{out_dir} exists; pass overwrite=True to replace it")
  rules = rules_for(cfg)
  flat_list = jax.tree_util.tree_flatten_with_path(params)[0]
  _check_layout(flat_list, rules, cfg)
  flat = {path_str(p): leaf for p, leaf in flat_list}
  order = _export_order(rules, cfg)
  sizes = [(name, int(np.prod(hf_shape(rules[path], False))) * np_dtype.itemsize)
           for path, layer in order for name in hf_names(rules[path], layer, False)]
  shards = _shard_plan(sizes, max_shard_bytes)
  files = (["model.safetensors"] if len(shards) == 1 else
           [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
  writer = jax.process_index() == 0
  tmp = None
  if writer:
    os.makedirs(os.path.dirname(out_dir), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.tmp-",
                           dir=os.path.dirname(out_dir))
  try:
    tensors = _hf_tensors(flat, rules, order, np_dtype)
    for names, file in zip(shards, files):
      shard = {}
      for name in names:
        got_name, array = next(tensors)
        assert got_name == name, (got_name, name)  # the plan and the stream share one order
        if not np.isfinite(array.astype(np.float32)).all():
          raise ValueError(f"refusing to export: tensor {name!r} has non-finite values")
        shard[name] = np.ascontiguousarray(array)
      if writer:
        save_file(shard, os.path.join(tmp, file), metadata={"format": "pt"})
    if writer:
      weight_map = {name: file for names, file in zip(shards, files) for name in names}
      _write_side_files(tmp, cfg, dtype, base_config, tokenizer_dir, weight_map,
                        sum(size for _, size in sizes))
      _move_into_place(tmp, out_dir, overwrite)
  except BaseException:
    if tmp is not None:
      shutil.rmtree(tmp, ignore_errors=True)
    raise
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(f"save_hf:{out_dir}")


def _write_side_files(tmp: str, cfg: Qwen3Config, dtype: str, base_config: dict | None,
                      tokenizer_dir: str | None, weight_map: dict[str, str],
                      total_bytes: int) -> None:
  with open(os.path.join(tmp, "config.json"), "w") as f:
    json.dump(config_to_hf(cfg, dtype, base_config), f, indent=2, sort_keys=True)
  if len(set(weight_map.values())) > 1:
    index = {"metadata": {"total_size": total_bytes},
             "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(tmp, "model.safetensors.index.json"), "w") as f:
      json.dump(index, f, indent=2)
  if tokenizer_dir:
    for name in TOKENIZER_FILES:
      src = os.path.join(tokenizer_dir, name)
      if os.path.exists(src):
        shutil.copyfile(src, os.path.join(tmp, name))
  os.chmod(tmp, 0o755)  # mkdtemp makes it owner-only; a server may run as another user


def _move_into_place(tmp: str, out_dir: str, overwrite: bool) -> None:
  """Renames the finished temporary directory onto `out_dir` (same filesystem: atomic)."""
  if not os.path.exists(out_dir):
    os.rename(tmp, out_dir)
    return
  if not overwrite:
    raise FileExistsError(f"{out_dir} appeared while exporting; not replacing it")
  old = tmp + ".old"
  os.rename(out_dir, old)
  os.rename(tmp, out_dir)
  shutil.rmtree(old)
