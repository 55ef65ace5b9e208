"""Device mesh, parameter partition rules and activation sharding constraints.

Mesh axes (always all four, in this order; size 1 when unused):
- `data`:   pure data parallelism; parameters are replicated across it.
- `fsdp`:   data parallelism with parameters, gradients and optimizer state sharded across it
            (ZeRO-3 style); batch rows are split across it too.
- `expert`: MoE expert parallelism; experts are split across it, and so are batch rows.
- `tensor`: Megatron-style tensor parallelism over heads, FFN width and vocab.

The mesh is declared in config as `{axis: size}` with at most one `-1` (the rest of the
devices) and built only by `make_mesh`. Parameters are placed by ONE ordered rule table of
(regex over the '/'-joined parameter path, PartitionSpec); the first match wins and a
parameter that no rule matches is an error. Activations are constrained with `shard(x, ...)`,
a no-op when no mesh is set (`jax.set_mesh`), so the same model code runs on one device.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXES = ("data", "fsdp", "expert", "tensor")
BATCH = ("data", "fsdp", "expert")  # batch rows are split over every data-like axis

# Ordered (regex, spec) table over parameter paths. Layer parameters have a leading L axis.
PARAM_RULES: tuple[tuple[str, P], ...] = (
    (r"^embed/embedding$", P("tensor", "fsdp")),  # [V, D]
    (r"^lm_head/kernel$", P("fsdp", "tensor")),  # [D, V]
    (r"^layers/attn/(q|k|v)_proj$", P(None, "fsdp", "tensor", None)),  # [L, D, N|K, H]
    (r"^layers/attn/o_proj$", P(None, "tensor", None, "fsdp")),  # [L, N, H, D]
    (r"^layers/attn/(q|k)_norm$", P(None, None)),  # [L, H]
    (r"^layers/(input|post_attn)_norm/scale$", P(None, None)),  # [L, D]
    (r"^layers/mlp/(gate|up)_proj$", P(None, "fsdp", "tensor")),  # [L, D, F]
    (r"^layers/mlp/down_proj$", P(None, "tensor", "fsdp")),  # [L, F, D]
    (r"^layers/moe/router$", P(None, "fsdp", None)),  # [L, D, E]
    (r"^layers/moe/(gate|up)_proj$", P(None, "expert", "fsdp", "tensor")),  # [L, E, D, F]
    (r"^layers/moe/down_proj$", P(None, "expert", "tensor", "fsdp")),  # [L, E, F, D]
    (r"^final_norm/scale$", P(None)),  # [D]
)


def mesh_shape(shape: Mapping[str, int], num_devices: int) -> dict[str, int]:
  """Resolves `{axis: size}` (missing axes 1, at most one -1) for `num_devices` devices."""
  unknown = set(shape) - set(AXES)
  if unknown:
    raise ValueError(f"mesh: unknown axes {sorted(unknown)}; allowed {AXES}")
  sizes = {axis: int(shape.get(axis, 1)) for axis in AXES}
  free = [axis for axis, size in sizes.items() if size == -1]
  if len(free) > 1:
    raise ValueError(f"mesh: at most one axis may be -1, got {free}")
  known = math.prod(size for size in sizes.values() if size != -1)
  if free:
    if num_devices % known:
      raise ValueError(f"mesh: {num_devices} devices not divisible by fixed axes {sizes}")
    sizes[free[0]] = num_devices // known
  if math.prod(sizes.values()) != num_devices:
    raise ValueError(f"mesh: axes {sizes} need {math.prod(sizes.values())} devices, "
                     f"have {num_devices}")
  return sizes


def make_mesh(shape: Mapping[str, int], devices: Sequence[Any] | None = None) -> Mesh:
  """Builds the (data, fsdp, expert, tensor) mesh from `{axis: size}`; one size may be -1."""
  devices = list(jax.devices() if devices is None else devices)
  sizes = mesh_shape(shape, len(devices))
  grid = np.asarray(devices).reshape([sizes[a] for a in AXES])
  return Mesh(grid, AXES)


@dataclasses.dataclass(frozen=True)
class MeshConfig:
  """The config's `mesh` section: a size per named axis (AXES); one may be -1 (all remaining
  devices)."""
  data: int = -1
  fsdp: int = 1
  expert: int = 1
  tensor: int = 1
  target_devices: int = 0  # device count this config is written for (0 = any); checked

  def __post_init__(self):
    sizes = [getattr(self, a) for a in AXES]
    if any(n == 0 or n < -1 for n in sizes) or sizes.count(-1) > 1:
      raise ValueError(f"mesh sizes must be positive, one may be -1; got {self.shape}")
    if self.target_devices < 0:
      raise ValueError(f"mesh.target_devices must be >= 0, got {self.target_devices}")

  @property
  def shape(self) -> dict[str, int]:
    return {a: getattr(self, a) for a in AXES}


def mesh_from_config(cfg: MeshConfig, devices: Sequence[Any] | None = None) -> Mesh:
  """The mesh of `cfg` on `devices` (default: the present ones), checked against
  `target_devices`."""
  devices = list(jax.devices() if devices is None else devices)
  if cfg.target_devices and cfg.target_devices != len(devices):
    raise ValueError(f"this config is written for {cfg.target_devices} devices "
                     f"(mesh.target_devices); {len(devices)} are present. Override "
                     f"--config.mesh.* to fit.")
  return make_mesh(cfg.shape, devices)


def shard(x: jax.Array, *spec: Any) -> jax.Array:
  """Constrains activation `x` to PartitionSpec(*spec) under the current mesh; else no-op."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return x
  return jax.lax.with_sharding_constraint(x, P(*spec))


def path_str(path: Sequence[Any]) -> str:
  """A jax tree path -> 'layers/attn/q_proj'."""
  parts = []
  for key in path:
    for attr in ("key", "name", "idx"):
      if hasattr(key, attr):
        parts.append(str(getattr(key, attr)))
        break
  return "/".join(parts)


def spec_for(path: str, rules=PARAM_RULES) -> P:
  for pattern, spec in rules:
    if re.search(pattern, path):
      return spec
  raise KeyError(f"no sharding rule matches parameter {path!r}")


def _check_divisible(path: str, shape: Sequence[int], spec: P, mesh: Mesh) -> None:
  if len(spec) != len(shape):
    raise ValueError(f"{path}: rule {spec} has rank {len(spec)}, parameter shape {shape}")
  for dim, axes in zip(shape, spec):
    names = axes if isinstance(axes, tuple) else (axes,) if axes else ()
    size = math.prod(mesh.shape[a] for a in names)
    if dim % size:
      raise ValueError(f"{path}: dim {dim} not divisible by mesh axes {names} (size {size})")


def param_specs(params: Any, mesh: Mesh | None = None, rules=PARAM_RULES) -> Any:
  """Tree of PartitionSpecs for a (possibly abstract) params tree; checks divisibility."""
  def one(path, leaf):
    name = path_str(path)
    spec = spec_for(name, rules)
    if mesh is not None:
      _check_divisible(name, leaf.shape, spec, mesh)
    return spec
  return jax.tree_util.tree_map_with_path(one, params)


def param_shardings(params: Any, mesh: Mesh, rules=PARAM_RULES) -> Any:
  """Tree of NamedShardings for a (possibly abstract) params tree."""
  specs = param_specs(params, mesh, rules)
  return jax.tree.map(lambda s: NamedSharding(mesh, s), specs,
                      is_leaf=lambda x: isinstance(x, P))


def batch_sharding(mesh: Mesh, rank: int = 2) -> NamedSharding:
  """Rows over every data-like axis, the rest replicated."""
  return NamedSharding(mesh, P(BATCH, *([None] * (rank - 1))))
