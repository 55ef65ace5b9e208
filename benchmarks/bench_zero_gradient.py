"""What leaving zero-gradient groups out of the train step saves (`batch.skip_zero_gradient`).

Runs the real trainer twice from the same checkpoint, in a fresh process each, for `--steps`
RL steps without evaluation: the peer with `batch.skip_zero_gradient=False` (every group
packed, the paper's batch) and the change with it True (groups whose rewards are all equal
left out, the loss still divided by every group's tokens). Both sample the same episodes at
step 1 (request seeds hash the episode and the weight version), so their first losses and
gradient norms agree to float rounding; after that the two policies drift apart by rounding
only. Reports per side: the whole command's wall time, perf/train_s summed over the steps
(each new row count compiles once inside it: that cost is counted), the rows packed per step,
and the ratio peer / change.

    .venv/bin/python benchmarks/bench_zero_gradient.py --init_dir SFT_RUN/checkpoints \
        [--config lab/configs/lookup_cpu.py:main] [--steps 8]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from common import REPO

sys.path.insert(0, REPO)
from carr_jax.runs.metrics import read_scalars  # noqa: E402

SERIES = ("perf/train_s", "perf/rollout_s", "perf/step_time_s", "train/packing_rows",
          "rollout/zero_gradient_groups", "train/loss", "train/grad_norm")


def run_side(config: str, init_dir: str, steps: int, skip: bool) -> dict:
  workdir = tempfile.mkdtemp(prefix="bench_zero_gradient_")
  cmd = [sys.executable, "-m", "carr_jax.train", "--config", config, "--workdir", workdir,
         f"--config.train.num_steps={steps}", "--config.train.eval_every=0",
         f"--config.checkpoint.every={steps}",
         f"--config.checkpoint.init_dir={os.path.abspath(init_dir)}",
         f"--config.batch.skip_zero_gradient={skip}"]
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  env.pop("XLA_FLAGS", None)
  start = time.perf_counter()
  subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True)
  wall = time.perf_counter() - start
  series = read_scalars(os.path.join(workdir, "tb"), {k: k for k in SERIES})
  return {"wall_s": wall, **series}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--init_dir", required=True, help="an SFT run's checkpoints")
  parser.add_argument("--config", default="lab/configs/lookup_cpu.py:main")
  parser.add_argument("--steps", type=int, default=8)
  args = parser.parse_args()
  peer = run_side(args.config, args.init_dir, args.steps, skip=False)
  change = run_side(args.config, args.init_dir, args.steps, skip=True)
  print(f"| side | wall s | train s (sum) | rollout s (sum) | rows / step | zero-gradient "
        f"groups | step 1 loss | step 1 grad norm |\n|---|---|---|---|---|---|---|---|")
  for name, side in (("every group (peer)", peer), ("skip_zero_gradient", change)):
    print(f"| {name} | {side['wall_s']:.1f} | {sum(side['perf/train_s']):.1f} | "
          f"{sum(side['perf/rollout_s']):.1f} | "
          f"{sum(side['train/packing_rows']) / args.steps:.1f} | "
          f"{sum(side['rollout/zero_gradient_groups']) / args.steps:.2f} | "
          f"{side['train/loss'][0]:.6f} | {side['train/grad_norm'][0]:.6f} |")
  print(f"peer / change: wall {peer['wall_s'] / change['wall_s']:.2f}x, train "
        f"{sum(peer['perf/train_s']) / sum(change['perf/train_s']):.2f}x")


if __name__ == "__main__":
  main()
