"""Training questions: loading CaRR records (or the synthetic world) and a resumable loader.

`load_tasks(config.data, config.world)` returns (train records, eval records, corpus pages):
either the synthetic world built in-process from the `world` section (`world_tasks`, the CPU
default), or CaRR-format jsonl files plus an offline corpus. This module is the one seam between
the jobs and the CPU laboratory (carr_jax/world): the world's questions, its output vocabulary
(`world_output_ids`) and the scripted expert's SFT data (`expert_trajectories`). Malformed
records are rejected with the file, line and field named. `TaskLoader` yields `prompts_per_step`
records per step in a per-epoch seeded shuffle; its position is a small dict saved with every
checkpoint, so a resumed run sees exactly the questions an uninterrupted run would have seen.
"""
from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from carr_common import jsonl
from carr_common.sections import from_section


class DataError(ValueError):
  """A malformed data file or record (the message names file, line and field)."""


def validate_record(record: Any, where: str) -> dict:
  """Checks the CaRR fields the rollout and judge rely on; returns the record."""
  if not isinstance(record, dict):
    raise DataError(f"{where}: record must be a JSON object")
  messages = record.get("input_messages")
  if not isinstance(messages, list) or not messages or not all(
      isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
    raise DataError(f"{where}: input_messages must be a non-empty list of messages with text")
  if not isinstance(record.get("label"), str):
    raise DataError(f"{where}: label must be a string")
  env = record.get("metadata", {}).get("remote_env_info", {})
  rubrics = env.get("rubrics", [])
  if not isinstance(rubrics, list) or not all(isinstance(r, str) for r in rubrics):
    raise DataError(f"{where}: metadata.remote_env_info.rubrics must be a list of strings")
  forbidden = env.get("search_forbidden_strs", [])
  if not isinstance(forbidden, list):
    raise DataError(f"{where}: metadata.remote_env_info.search_forbidden_strs must be a list")
  if not isinstance(record.get("tools", []), list):
    raise DataError(f"{where}: tools must be a list of schemas")
  return record


def numbered_jsonl(path: str | Path) -> list[tuple[str, Any]]:
  """(place "<path>:<line number>", value) of each non-blank line; bad JSON: DataError."""
  with open(path, encoding="utf-8") as f:
    return list(jsonl.numbered_records(f, str(path), DataError))


def read_jsonl(path: str | Path) -> list[Any]:
  return [value for _, value in numbered_jsonl(path)]


def load_records(path: str | Path) -> list[dict]:
  return [validate_record(r, place) for place, r in numbered_jsonl(path)]


def world_tasks(world_cfg: Any) -> tuple[list[dict], list[dict], list[dict]]:
  """(train records, eval records, corpus page records) of the synthetic world of `world.*`."""
  from carr_jax.world import build_world
  w = world_cfg
  world = build_world(w.seed, w.entities, w.questions, eval_fraction=w.eval_fraction,
                      shortcut_fraction=w.shortcut_fraction, min_hops=w.min_hops,
                      max_hops=w.max_hops, style=w.style, locality=w.locality,
                      distractors=w.distractors, short_names=w.short_names, prompt=w.prompt,
                      mark_names=w.mark_names, eval_shortcut_fraction=w.eval_shortcut_fraction,
                      stale_fraction=w.stale_fraction)
  return world.train, world.eval, world.corpus()


def world_output_ids(world_cfg: Any, more_worlds: int, fmt) -> tuple[int, ...]:
  """The sorted token ids that the world of `world.*`, and the `more_worlds` worlds seeded
  after it, can need (carr_jax.world.output_vocab); `fmt` a rollout.chat.ChatFormat."""
  from carr_jax.world.output_vocab import world_output_ids as ids_of
  cfg, ids = world_cfg.copy_and_resolve_references(), set()
  for k in range(1 + more_worlds):
    cfg.seed = world_cfg.seed + k
    ids.update(ids_of(*world_tasks(cfg), fmt))
  return tuple(sorted(ids))


def expert_trajectories(config: Any, fmt) -> list[dict]:
  """The scripted expert's trajectories (carr_jax.world.expert, set by `sft.expert_*`) on the
  training questions of at most `sft.expert_max_hops` hops, `sft.expert_samples` each."""
  from carr_jax.world import expert
  from rollout.tools.corpus import CorpusBackend
  s = config.sft
  train, _, corpus = load_tasks(config.data, config.world)
  train = [r for r in train if r["metadata"]["gold"]["hops"] <= s.expert_max_hops]
  return asyncio.run(expert.expert_trajectories(
      train, CorpusBackend.from_records(corpus), fmt,
      from_section(expert.ExpertConfig, s, expert.SFT_KEYS), s.expert_samples))


def load_tasks(data_cfg: Any, world_cfg: Any) -> tuple[list[dict], list[dict], list[dict]]:
  """(train records, eval records, corpus page records) for the configured source."""
  if data_cfg.source == "world":
    return world_tasks(world_cfg)
  if data_cfg.source != "jsonl":
    raise DataError(f"data.source must be 'world' or 'jsonl', got {data_cfg.source!r}")
  if not data_cfg.train_path:
    raise DataError("data.train_path is required with data.source='jsonl'")
  train = load_records(data_cfg.train_path)
  evals = load_records(data_cfg.eval_path) if data_cfg.eval_path else []
  corpus = read_jsonl(data_cfg.corpus_path) if data_cfg.corpus_path else []
  if not train:
    raise DataError(f"{data_cfg.train_path}: no records")
  return train, evals, corpus


@dataclasses.dataclass
class TaskLoader:
  """Deterministic epoch-shuffled batches of records; `position` survives checkpoints."""
  records: Sequence[dict]
  batch_size: int
  seed: int
  epochs: int
  position: dict = dataclasses.field(default_factory=lambda: {"epoch": 0, "index": 0})

  def __post_init__(self):
    if self.batch_size < 1 or self.batch_size > len(self.records):
      raise DataError(f"data.prompts_per_step={self.batch_size} must be in "
                      f"[1, {len(self.records)}] (the number of training questions)")

  @property
  def steps_per_epoch(self) -> int:
    return len(self.records) // self.batch_size  # the ragged tail of an epoch is dropped

  @property
  def total_steps(self) -> int:
    return self.steps_per_epoch * self.epochs

  def _order(self, epoch: int) -> np.ndarray:
    return np.random.default_rng([self.seed, epoch]).permutation(len(self.records))

  def next(self) -> list[dict]:
    """The next batch; raises StopIteration after the last epoch."""
    epoch, index = self.position["epoch"], self.position["index"]
    if index + self.batch_size > len(self.records):
      epoch, index = epoch + 1, 0
    if epoch >= self.epochs:
      raise StopIteration
    chosen = self._order(epoch)[index:index + self.batch_size]
    self.position = {"epoch": epoch, "index": index + self.batch_size}
    return [self.records[i] for i in chosen]
