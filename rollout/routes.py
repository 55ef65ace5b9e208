"""Routed experts on a trajectory (MoE routing replay, R3): compact storage, decoding, checks.

A mixture-of-experts policy chooses, at every position and MoE layer, the top-k experts of its
router. The trainer recomputes the router at its own precision and kernels, so on near-tied
tokens it can choose other experts than the engine that sampled the tokens did; routing replay
(arXiv 2510.11370) records the engine's choice and makes the trainer use it. A trajectory of
`token_ids` x_0 .. x_{L-1} carries `routed_experts` [L - 1, layers, k]: the experts chosen at
positions 0 .. L-2, every position the trainer computes (x_{L-1} is only a target: packing
gives it no slot, carr_jax/rl/packing.py), prompt and tool outputs included.

Storage: uint8 where the model has at most 256 experts, else uint16 (`route_dtype`): the
paper's MoE (Qwen3-30B-A3B: 48 layers, top-8 of 128 experts) costs 65,536 x 48 x 8 bytes =
24 MiB per 64k-token row. In a JSON dump the array is {"dtype", "shape", "b64"}.
SGLang (`--enable-return-routed-experts`, `return_routed_experts` on /generate) returns them
as base64 of int32 [positions, layers, k] (`decode_sglang`).

`check` tells whether a trajectory's routes can be replayed by a model of the given shape:
it names what is wrong in one line (missing, mis-shaped, out of range), and the trainer
drops such a trajectory as a counted failure instead of training it without replay.
"""
from __future__ import annotations

import base64
from typing import Any, Mapping

import numpy as np

KEY = "routed_experts"  # the trajectory record's field


def route_dtype(num_experts: int) -> np.dtype:
  """The smallest unsigned dtype holding every expert id."""
  if num_experts < 1 or num_experts > 65536:
    raise ValueError(f"num_experts must be in [1, 65536], got {num_experts}")
  return np.dtype(np.uint8 if num_experts <= 256 else np.uint16)


def compact(routes: Any, num_experts: int) -> np.ndarray:
  """[N, layers, k] integer expert ids -> the same in `route_dtype`; ids out of range raise."""
  routes = np.asarray(routes)
  if routes.ndim != 3 or not np.issubdtype(routes.dtype, np.integer):
    raise ValueError(f"routes must be an integer [positions, layers, k] array, got "
                     f"{routes.dtype} {routes.shape}")
  if routes.size and (routes.min() < 0 or routes.max() >= num_experts):
    raise ValueError(f"expert ids must be in [0, {num_experts}), got [{routes.min()}, "
                     f"{routes.max()}]")
  return routes.astype(route_dtype(num_experts))


def decode_sglang(b64: str, layers: int, k: int) -> np.ndarray:
  """SGLang's `meta_info.routed_experts` (base64 of int32) -> int32 [positions, layers, k]."""
  raw = base64.b64decode(b64, validate=True)
  if len(raw) % (4 * layers * k):
    raise ValueError(f"routed_experts holds {len(raw)} bytes, not a whole number of "
                     f"[{layers}, {k}] int32 positions")
  return np.frombuffer(raw, dtype="<i4").reshape(-1, layers, k)


def to_json(routes: np.ndarray) -> dict:
  """A compact route array as a JSON-safe dict (trajectory dumps)."""
  routes = np.ascontiguousarray(routes)
  return {"dtype": routes.dtype.str, "shape": list(routes.shape),
          "b64": base64.b64encode(routes.tobytes()).decode("ascii")}


def from_json(value: Mapping[str, Any]) -> np.ndarray:
  """`to_json`'s dict -> the array (little-endian unsigned dtypes only)."""
  dtype = np.dtype(value["dtype"])
  if dtype not in (np.dtype("<u2"), np.dtype("u1")):
    raise ValueError(f"routed_experts dtype must be uint8 or uint16, got {value['dtype']!r}")
  raw = base64.b64decode(value["b64"], validate=True)
  return np.frombuffer(raw, dtype=dtype).reshape([int(n) for n in value["shape"]])


def check(record: Mapping[str, Any], layers: int, k: int, num_experts: int) -> str | None:
  """Why `record`'s routes cannot be replayed by a model of `layers` MoE layers choosing `k`
  of `num_experts` experts, in one line; None when they can."""
  routes = record.get(KEY)
  if routes is None:
    return "no routed_experts"
  if isinstance(routes, Mapping):
    try:
      routes = from_json(routes)
    except (KeyError, TypeError, ValueError) as e:
      return f"routed_experts unreadable: {e}"
  routes = np.asarray(routes)
  want = (max(len(record.get("token_ids", ())) - 1, 0), layers, k)
  if routes.shape != want:
    return f"routed_experts shape {tuple(routes.shape)}, want {want}"
  if not np.issubdtype(routes.dtype, np.integer):
    return f"routed_experts dtype {routes.dtype} is not an integer type"
  if routes.size and (routes.min() < 0 or routes.max() >= num_experts):
    return f"routed_experts ids in [{routes.min()}, {routes.max()}], outside [0, {num_experts})"
  return None
