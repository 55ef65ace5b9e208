"""Training questions: loading CaRR records (or an in-process task source) and a resumable loader.

`load_tasks(config)` returns (train records, eval records, corpus pages): CaRR-format jsonl
files plus an offline corpus (`data.source="jsonl"`), or the tasks of the module `data.source`
names (`task_source`; the CPU laboratory's, lab/tasks.py, builds the synthetic world of its
`world` section). That module is the one seam between the jobs and the CPU laboratory: tasks,
their output vocabulary, the scripted expert's SFT data, the config section it owns and what it
adds to held-out evaluations all come through it, by name. Malformed
records are rejected with the file, line and field named. `TaskLoader` yields `prompts_per_step`
records per step in a per-epoch seeded shuffle; its position is a small dict saved with every
checkpoint, so a resumed run sees exactly the questions an uninterrupted run would have seen.
"""
from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from carr_common import jsonl
from carr_common.sections import from_section


class DataError(ValueError):
  """A malformed data file or record (the message names file, line and field)."""


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """The config's `data` section (`data_config`)."""
  source: str = "jsonl"  # "jsonl" (CaRR records) | a task source module making tasks
  # in-process (`task_source`), set with its own config section by base.use_task_source
  train_path: str = ""  # CaRR-format jsonl (source=jsonl)
  eval_path: str = ""  # held-out jsonl, same format (optional)
  corpus_path: str = ""  # offline corpus jsonl for tools.backend=corpus (a task source: its own)
  prompts_per_step: int = 16  # questions per step (paper: 16)
  group_size: int = 8  # rollouts per question, G (paper: 8)
  epochs: int = 3  # passes over the training questions (paper: 3); bounds train.num_steps

  def __post_init__(self):
    if min(self.prompts_per_step, self.group_size, self.epochs) < 1:
      raise ValueError(f"data.prompts_per_step, .group_size and .epochs must be >= 1, got "
                       f"{self.prompts_per_step}, {self.group_size}, {self.epochs}")


def data_config(config: Any) -> DataConfig:
  """The `data` section's builder: here, with the data seam, not in carr_jax.jobs.components,
  which imports this module (the task source's output ids)."""
  return from_section(DataConfig, config.data)


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


def task_source(data_cfg: DataConfig):
  """The module named by `data.source` (any but "jsonl"), which makes tasks in-process: it
  defines `SECTION` and `config_section()` (the config section it owns, added by
  configs/base.py use_task_source), `tasks(config)` -> (train, eval, corpus records),
  `output_ids(config, fmt)` (the sorted token ids its tasks can need) and
  `expert_trajectories(config, fmt)` (SFT episodes of its scripted expert), and optionally
  `eval_metrics` and `SUMMARY_NAMES` (`source_evaluation`). The CPU laboratory's is
  lab/tasks.py; it is imported by name, so the jobs never import the laboratory."""
  try:
    return importlib.import_module(data_cfg.source)
  except ModuleNotFoundError as e:
    if not data_cfg.source.startswith(e.name or "\0"):
      raise  # the source exists; a module it imports is missing
    raise DataError(f"data.source must be 'jsonl' or an importable task source module, got "
                    f"{data_cfg.source!r} ({e})") from e


def source_evaluation(config: Any, records: Sequence[dict], breakdowns: Sequence[Any]
                      ) -> tuple[dict, dict[str, list]]:
  """What the task source adds to a held-out evaluation: its `eval_metrics(config, records,
  breakdowns)` -> (metrics, per-question lists by name), where it defines one; else nothing."""
  data_cfg = data_config(config)
  if data_cfg.source == "jsonl":
    return {}, {}
  hook = getattr(task_source(data_cfg), "eval_metrics", None)
  return hook(config, records, breakdowns) if hook else ({}, {})


def source_summary_names(config: Any) -> tuple[tuple[str, str], ...]:
  """(metric key, label) of the task source's held-out measures in a run's closing summary
  (its `SUMMARY_NAMES`; none for jsonl)."""
  data_cfg = data_config(config)
  if data_cfg.source == "jsonl":
    return ()
  return tuple(getattr(task_source(data_cfg), "SUMMARY_NAMES", ()))


def load_tasks(config: Any) -> tuple[list[dict], list[dict], list[dict]]:
  """(train records, eval records, corpus page records) for `data.source`."""
  data_cfg = data_config(config)
  if data_cfg.source != "jsonl":
    return task_source(data_cfg).tasks(config)
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
