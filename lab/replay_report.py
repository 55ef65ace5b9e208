"""Routing replay's learning check (scripts/reproduce_replay.sh), per run and over runs.

    python -m lab.replay_report OUT_DIR [--out OUT_DIR/replay.json]
    python -m lab.replay_report --from docs/data/replay.json [MORE.json ...]

Reads OUT_DIR/summary.json (lab.shortcut_report, methods replay and noreplay) for held-out
accuracy at the start and the end, and each run's TensorBoard for what replay changes, each the
mean over the run's train steps:
  rollout_k3        Schulman's k3 estimate of KL(engine || trainer) on the sampled tokens
                    (train/rollout_k3): how far the float32 trainer's log-probs are from the
                    bfloat16 engine's;
  rollout_gap       mean |trainer log-prob - engine log-prob| (train/rollout_gap);
  is_zeroed         share of loss tokens icepop gives no gradient, their weight outside its
                    band (train/is_zeroed_frac);
  route_mismatch    with replay, share of (token, layer) routes where the trainer's own top-k
                    is not the engine's (train/replay_route_mismatch; 0 without replay: not
                    measured there).
Prints the table (mean +- s.e. over runs, then per run) and the paired held-out gain difference
replay - noreplay with its s.e.; writes the numbers to --out. `--from` with several files
prints their runs as one table (runs measured in separate sessions or on other machines: each
replay / noreplay pair shares its own cold start, so the pairs stay paired).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np

from carr_jax.runs import metrics
from lab.shortcuts import concat_runs

METHODS = ("replay", "noreplay")
TAGS = {"rollout_k3": "train/rollout_k3", "rollout_gap": "train/rollout_gap",
        "is_zeroed": "train/is_zeroed_frac", "route_mismatch": "train/replay_route_mismatch"}


def mean_se(values: list[float]) -> tuple[float, float]:
  """Mean and standard error (0 for one value)."""
  x = np.asarray(values, float)
  se = float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else 0.0
  return float(x.mean()), se


def collect(out_dir: str) -> dict:
  """summary.json's runs with each method's step means from TensorBoard."""
  with open(os.path.join(out_dir, "summary.json")) as f:
    summary = json.load(f)
  tags = [f"w{w}_seed{s}" for w, s in zip(summary["world_seeds"], summary["seeds"])]
  result = {"world_seeds": summary["world_seeds"], "seeds": summary["seeds"]}
  for method in METHODS:
    rows = {k: summary[method][k]
            for k in ("start_heldout_accuracy", "heldout_accuracy", "heldout_gain")}
    for name, tag in TAGS.items():
      rows[name] = [float(np.mean(metrics.read_scalars(
          os.path.join(out_dir, f"{method}_{t}", "tb"), {name: tag})[name] or [math.nan]))
                    for t in tags]
    result[method] = rows
  gain = np.subtract(result["replay"]["heldout_gain"], result["noreplay"]["heldout_gain"])
  result["gain_difference"] = gain.tolist()
  return result


def merge(results: list[dict]) -> dict:
  """Several `collect` results -> one, their runs in order (`shortcuts.concat_runs`: a
  (world, seed) run twice is an error, it would count one cold start twice)."""
  return concat_runs(results, METHODS, top=("gain_difference",))


def table(result: dict) -> str:
  keys = ("start_heldout_accuracy", "heldout_accuracy", "heldout_gain", *TAGS)
  runs = [f"w{w}/s{s}" for w, s in zip(result["world_seeds"], result["seeds"])]
  lines = [f"| metric (runs: {', '.join(runs)}) | replay | no replay |", "|---|---|---|"]
  for key in keys:
    cells = []
    for method in METHODS:
      values = result[method][key]
      m, se = mean_se(values)
      cells.append(f"{m:.4g} +- {se:.2g} ({', '.join(f'{v:.4g}' for v in values)})")
    lines.append(f"| {key} | {cells[0]} | {cells[1]} |")
  m, se = mean_se(result["gain_difference"])
  lines.append(f"\nheld-out gain, replay - no replay (paired over runs): {m:+.3f} +- {se:.3f}")
  return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser("python -m lab.replay_report", description=__doc__.split("\n")[0])
  p.add_argument("out_dir", nargs="?", help="scripts/reproduce_replay.sh's OUT_DIR")
  p.add_argument("--from", dest="saved", nargs="+", default=None,
                 help="print replay.json files written before, their runs as one table")
  p.add_argument("--out", default=None, help="where to write (default OUT_DIR/replay.json)")
  args = p.parse_args(argv)
  if args.saved:
    saved = []
    for path in args.saved:
      with open(path) as f:
        saved.append(json.load(f))
    try:
      result = merge(saved)
    except (KeyError, ValueError) as e:
      p.error(f"--from: {e}")
  elif args.out_dir:
    result = collect(args.out_dir)
    with open(args.out or os.path.join(args.out_dir, "replay.json"), "w") as f:
      json.dump(result, f, indent=1)
  else:
    p.error("give OUT_DIR or --from")
  print(table(result))
  return 0


if __name__ == "__main__":
  sys.exit(main())
