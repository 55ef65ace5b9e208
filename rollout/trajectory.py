"""The Trajectory record the agent loop produces (docs/design.md section 2), and its JSONL dump.

A `Trajectory` grows turn by turn: the prompt, then each generated turn (loss mask 1, the
engine's log-probs) and each observation (loss mask 0, log-prob 0.0).  `to_record()` gives the
JSON-serialisable dict the judge and the trainer read:

  prompt_id, sample_index       which CaRR record, which of its G samples
  token_ids, loss_mask,         the whole episode; the three lists have equal length
  rollout_logprobs
  weight_version                version of the first generated turn (the oldest, so a trainer
                                measuring staleness sees the worst case); the engine's version
                                when nothing was generated
  turn_weight_versions          one per generated turn, in order (differs from
                                [weight_version] * turns only when weights changed mid-episode)
  status                        completed | truncated | ill_formed | tool_limit | failed
  error_kind, error             why the episode ended (null for completed): see rollout/agent.py
  format_errors                 kinds of ill-formed turns that were fed back (continue mode)
  num_tool_calls                {"search", "open", "find"}: calls executed, successful or not
  tool_errors                   {error code: count} of executed calls whose result was not ok
  history                       messages in the judge's format (judge/records.py)
  timings                       generation_s, tool_s, total_s (wall clock, seconds; generation
                                includes waiting in the engine's queue), turns,
                                prompt_tokens, generated_tokens
  routed_experts                only when the engine records routes (MoE routing replay):
                                the experts of positions 0 .. L-2, rollout/routes.py's JSON form

  write_jsonl(path, records)  /  read_jsonl(path)   for inspection and replay.
  rollout_stats(records)                             scalars for TensorBoard.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from carr_common import jsonl
from carr_common.safe_text import json_line
from carr_common.vocab import STATUSES, TOOL_KINDS
from rollout import routes as routes_lib


@dataclasses.dataclass
class Trajectory:
  """Mutable episode state; see the module docstring for the fields of the record."""

  prompt_id: str
  sample_index: int
  token_ids: list[int]
  loss_mask: list[int]
  rollout_logprobs: list[float]
  history: list[dict]
  prompt_tokens: int
  fallback_version: str = ""  # reported when no turn was generated
  turn_weight_versions: list[str] = dataclasses.field(default_factory=list)
  status: str | None = None
  error_kind: str | None = None
  error: str | None = None
  format_errors: list[str] = dataclasses.field(default_factory=list)
  num_tool_calls: dict[str, int] = dataclasses.field(
      default_factory=lambda: dict.fromkeys(TOOL_KINDS, 0))
  tool_errors: dict[str, int] = dataclasses.field(default_factory=dict)
  generation_s: float = 0.0
  tool_s: float = 0.0
  total_s: float = 0.0
  routes: list = dataclasses.field(default_factory=list)  # [n, layers, k] chunks of the
  # routed experts, positions 0 .. (rollout/routes.py), when the engine records them

  @classmethod
  def start(cls, prompt_id: str, sample_index: int, prompt_ids: Sequence[int],
            messages: Sequence[dict], fallback_version: str = "") -> "Trajectory":
    n = len(prompt_ids)
    return cls(prompt_id, sample_index, list(prompt_ids), [0] * n, [0.0] * n,
               [dict(m) for m in messages], n, fallback_version)

  def __len__(self) -> int:
    return len(self.token_ids)

  @property
  def generated_tokens(self) -> int:
    return sum(self.loss_mask)

  @property
  def total_tool_calls(self) -> int:
    return sum(self.num_tool_calls.values())

  def add_generated(self, ids: Sequence[int], logprobs: Sequence[float], version: str) -> None:
    if len(ids) != len(logprobs):
      raise ValueError(f"{len(ids)} generated ids but {len(logprobs)} log-probs")
    self.token_ids += ids
    self.loss_mask += [1] * len(ids)
    self.rollout_logprobs += [float(x) for x in logprobs]
    self.turn_weight_versions.append(str(version))

  def add_observation(self, ids: Sequence[int]) -> None:
    self.token_ids += ids
    self.loss_mask += [0] * len(ids)
    self.rollout_logprobs += [0.0] * len(ids)

  @property
  def routed_positions(self) -> int:
    """Positions whose routed experts the trajectory holds (from 0, in order)."""
    return sum(len(r) for r in self.routes)

  def count_tool(self, kind: str | None, error: str | None) -> None:
    if kind in self.num_tool_calls:
      self.num_tool_calls[kind] += 1
    if error:
      self.tool_errors[error] = self.tool_errors.get(error, 0) + 1

  def finish(self, status: str, error_kind: str | None = None, error: str | None = None) -> None:
    if status not in STATUSES:
      raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    self.status, self.error_kind, self.error = status, error_kind, error

  def to_record(self) -> dict[str, Any]:
    if self.status is None:
      raise ValueError(f"trajectory {self.prompt_id}/{self.sample_index} is not finished")
    versions = self.turn_weight_versions
    return {
        "prompt_id": self.prompt_id, "sample_index": self.sample_index,
        "token_ids": list(self.token_ids), "loss_mask": list(self.loss_mask),
        "rollout_logprobs": list(self.rollout_logprobs),
        "weight_version": versions[0] if versions else self.fallback_version,
        "turn_weight_versions": list(versions),
        "status": self.status, "error_kind": self.error_kind, "error": self.error,
        "format_errors": list(self.format_errors),
        "num_tool_calls": dict(self.num_tool_calls), "tool_errors": dict(self.tool_errors),
        "history": self.history,
        "timings": {"generation_s": self.generation_s, "tool_s": self.tool_s,
                    "total_s": self.total_s, "turns": len(versions),
                    "prompt_tokens": self.prompt_tokens,
                    "generated_tokens": self.generated_tokens},
        **({routes_lib.KEY: routes_lib.to_json(np.concatenate(self.routes))}
           if self.routes else {}),
    }


def failed_record(prompt_id: str, sample_index: int, error_kind: str, error: str,
                  version: str = "") -> dict[str, Any]:
  """A record for an episode that could not even start (or crashed): no tokens, status failed."""
  traj = Trajectory.start(prompt_id, sample_index, [], [], version)
  traj.finish("failed", error_kind, error)
  return traj.to_record()


def check_record(record: dict[str, Any]) -> None:
  """Raises ValueError naming the field when a record breaks the contract (used by tests)."""
  where = f"trajectory {record.get('prompt_id')!r}/{record.get('sample_index')!r}"
  n = len(record["token_ids"])
  for key in ("loss_mask", "rollout_logprobs"):
    if len(record[key]) != n:
      raise ValueError(f"{where}: len({key}) = {len(record[key])} != len(token_ids) = {n}")
  if any(m not in (0, 1) for m in record["loss_mask"]):
    raise ValueError(f"{where}: loss_mask holds values other than 0/1")
  for i, (m, lp) in enumerate(zip(record["loss_mask"], record["rollout_logprobs"])):
    # A log-prob can round to a hair above 0 for a near-certain token; more is a bug.
    if (m == 0 and lp != 0.0) or not math.isfinite(lp) or lp > 1e-5:
      raise ValueError(f"{where}: rollout_logprobs[{i}] = {lp} with loss_mask {m}")
  if record["status"] not in STATUSES:
    raise ValueError(f"{where}: status {record['status']!r} not in {STATUSES}")
  if (record["status"] == "completed") != (record["error_kind"] is None):
    raise ValueError(f"{where}: error_kind must be null exactly when status is completed")
  if sorted(record["num_tool_calls"]) != sorted(TOOL_KINDS):
    raise ValueError(f"{where}: num_tool_calls keys {sorted(record['num_tool_calls'])}")


def rollout_stats(records: Sequence[dict[str, Any]]) -> dict[str, float]:
  """Scalars for logging a batch of records: status fractions, and means over the episodes
  that did not fail (failed ones are excluded from training, so they would skew the means)."""
  n = len(records)
  stats = {f"status/{s}": sum(r["status"] == s for r in records) / max(n, 1) for s in STATUSES}
  kept = [r for r in records if r["status"] != "failed"]
  m = max(len(kept), 1)
  for kind in TOOL_KINDS:
    stats[f"tool_calls/{kind}"] = sum(r["num_tool_calls"][kind] for r in kept) / m
  stats["tool_calls/total"] = sum(sum(r["num_tool_calls"].values()) for r in kept) / m
  stats["tool_calls/error_rate"] = (
      sum(sum(r["tool_errors"].values()) for r in kept) / max(stats["tool_calls/total"] * m, 1))
  for key in ("turns", "generated_tokens", "generation_s", "tool_s", "total_s"):
    stats[f"episode/{key}"] = sum(r["timings"][key] for r in kept) / m
  stats["episode/tokens"] = sum(len(r["token_ids"]) for r in kept) / m
  stats["episodes"] = float(n)
  return stats


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> int:
  """Writes one record per line (UTF-8, non-ASCII kept); returns the number written."""
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  n = 0
  with path.open("w", encoding="utf-8") as f:
    for record in records:
      f.write(json_line(record))  # never raises on a lone surrogate
      n += 1
  return n


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
  """The records of a trajectory file; a line that is not JSON raises naming its place."""
  with Path(path).open(encoding="utf-8") as f:
    return [value for _, value in jsonl.numbered_records(f, str(path), ValueError)]
