"""The resumable store of one evaluation run: results.jsonl + trajectories.jsonl.

A question is committed by its line in results.jsonl, written after its trajectories; every
write is one atomic append, so a kill leaves at most a torn last line, which the next run
drops (that question is redone). `eval_config.json` holds the run's settings, and a rerun with
other settings into the same directory is an `EvalError`.
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from carr_common.safe_text import json_line

logger = logging.getLogger(__name__)

RESULTS, TRAJECTORIES, SETTINGS = "results.jsonl", "trajectories.jsonl", "eval_config.json"


class EvalError(ValueError):
  """Bad evaluation input or an output directory that holds a different run."""


class ResultStore:
  """results.jsonl + trajectories.jsonl of one run directory, appended atomically."""

  def __init__(self, out_dir: str, settings: Mapping[str, Any], retry_failed: bool = False):
    self.dir = Path(out_dir)
    self.dir.mkdir(parents=True, exist_ok=True)
    self._check_settings(dict(settings))
    self.rows = self._load(retry_failed)

  def _check_settings(self, settings: dict) -> None:
    path = self.dir / SETTINGS
    if path.exists():
      before = json.loads(path.read_text())
      for key in sorted(set(before) | set(settings)):
        if before.get(key) != settings.get(key):
          raise EvalError(f"{self.dir} holds a run with {key}={before.get(key)!r}, this one "
                          f"has {settings.get(key)!r}; use another --out to evaluate these "
                          "settings")
    else:
      path.write_text(json.dumps(settings, indent=1, sort_keys=True) + "\n")

  def _load(self, retry_failed: bool) -> dict[str, dict]:
    path = self.dir / RESULTS
    if not path.exists():
      return {}
    raw = path.read_bytes()
    cut = raw.rfind(b"\n") + 1
    if cut < len(raw):  # a write torn by a kill: drop it, that question is redone
      logger.warning("%s: dropping a torn last line (%d bytes)", path, len(raw) - cut)
    rows = {}
    for lineno, line in enumerate(raw[:cut].decode("utf-8").splitlines(), 1):
      try:
        row = json.loads(line)
      except json.JSONDecodeError as e:
        raise EvalError(f"{path}:{lineno}: corrupt line ({e.msg})") from None
      rows[row["id"]] = row
    if retry_failed:
      rows = {k: r for k, r in rows.items()
              if all(s["status"] != "failed" for s in r["samples"])}
    if cut < len(raw) or retry_failed:
      self._rewrite(rows)
    return rows

  def _rewrite(self, rows: Mapping[str, dict]) -> None:
    """Keeps only committed questions in both files (atomic replace)."""
    for name, keep in ((RESULTS, list(rows.values())),
                       (TRAJECTORIES, [t for t in _read_lines(self.dir / TRAJECTORIES)
                                       if t.get("id") in rows])):
      tmp = self.dir / (name + ".tmp")
      tmp.write_text("".join(json_line(r) for r in keep), encoding="utf-8")
      os.replace(tmp, self.dir / name)

  def append(self, row: dict, trajectories: Sequence[dict]) -> None:
    """Trajectories first, then the result line that commits the question."""
    _append_atomic(self.dir / TRAJECTORIES,
                   "".join(json_line(t) for t in trajectories))
    _append_atomic(self.dir / RESULTS, json_line(row))  # json_line: surrogates never raise
    self.rows[row["id"]] = row


def _append_atomic(path: Path, text: str) -> None:
  fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
  try:
    os.write(fd, text.encode("utf-8"))  # one write: a kill leaves at most a torn tail
    os.fsync(fd)
  finally:
    os.close(fd)


def _read_lines(path: Path) -> list[dict]:
  if not path.exists():
    return []
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip().endswith("}")]
