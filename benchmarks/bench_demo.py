"""Wall time per step of a CPU demo, split by phase, and its scaling with G and prompts.

Runs the real trainer (`--config`: lab/configs/demo_cpu.py, the multi-hop demo,
lab/configs/kinds_cpu.py, the tool-free job, or lab/configs/lookup_cpu.py, the main job) for
`--steps` steps per setting in a fresh process each and reports the LAST step's phase times
(earlier steps include compilation): rollout (in-process engine + BM25 tools), judge (gold
backend), train (old log-probs + jitted step) and sync (in-memory weight update). Settings:
prompts_per_step x group_size. The peer for the scaling columns is the smallest setting
measured in the same run: the ratio "time / (trajectories ratio)" shows how far from linear
each phase scales.

    .venv/bin/python benchmarks/bench_demo.py [--steps 3] [--settings 1x2 2x2 2x4 4x4]
        [--init_dir SFT_RUN/checkpoints]   # start from a cold-start SFT policy
        [--config lab/configs/kinds_cpu.py]
"""
from __future__ import annotations

import argparse
import os
import sys

from common import REPO, run_trainer

sys.path.insert(0, REPO)
from carr_jax.runs.metrics import read_scalars  # noqa: E402

PHASES = ("perf/rollout_s", "perf/judge_s", "perf/train_s", "perf/sync_s", "perf/step_time_s")


def run_setting(config: str, prompts: int, group: int, steps: int,
                init_dir: str) -> dict[str, float]:
  workdir = run_trainer(config, steps, init_dir, [f"--config.data.prompts_per_step={prompts}",
                                                  f"--config.data.group_size={group}"])
  series = read_scalars(os.path.join(workdir, "tb"), {k: k for k in PHASES})
  return {k: values[-1] for k, values in series.items()}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--steps", type=int, default=3)
  parser.add_argument("--settings", nargs="+", default=["1x2", "2x2", "2x4", "4x4"])
  parser.add_argument("--init_dir", default="", help="checkpoint.init_dir (default: random)")
  parser.add_argument("--config", default="lab/configs/demo_cpu.py", help="trainer config")
  args = parser.parse_args()
  rows = []
  for setting in args.settings:
    prompts, group = (int(x) for x in setting.split("x"))
    rows.append((prompts, group,
                 run_setting(args.config, prompts, group, args.steps, args.init_dir)))
  base_n = rows[0][0] * rows[0][1]
  print("| prompts x G | trajectories | rollout s | judge s | train s | sync s | step s |"
        " step / linear |")
  print("|---|---|---|---|---|---|---|---|")
  for prompts, group, t in rows:
    n = prompts * group
    linear = rows[0][2]["perf/step_time_s"] * n / base_n
    print(f"| {prompts} x {group} | {n} | " + " | ".join(f"{t[k]:.2f}" for k in PHASES)
          + f" | {t['perf/step_time_s'] / linear:.2f} |")


if __name__ == "__main__":
  main()
