"""What leaving zero-gradient groups out of the train step saves (`batch.skip_zero_gradient`).

Runs the real trainer twice from the same checkpoint, at the same time, each pinned to a core
of its own (on a machine with two or more), for `--steps` RL steps without evaluation: the
peer with `batch.skip_zero_gradient=False` (every group packed, the paper's batch) and the
change with it True (groups whose rewards are all equal left out, the loss still divided by
every group's tokens). Both sample the same episodes at step 1 (request seeds hash the episode
and the weight version), so their first losses and gradient norms agree to float rounding;
after that the two policies drift apart by rounding only. Reports per side: the whole
command's wall time, perf/train_s summed over the steps (each new row count compiles once
inside it: that cost is counted), the rows packed per step, the zero-gradient share, and the
ratio peer / change. Start from a policy that has learned (a main-job RL checkpoint): from
the cold start almost no group is zero-gradient and the two sides do the same work.

    .venv/bin/python benchmarks/bench_zero_gradient.py --init_dir RL_RUN/checkpoints \
        [--config lab/configs/lookup_cpu.py:main] [--steps 8]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from common import REPO

sys.path.insert(0, REPO)
from carr_jax.runs.metrics import read_scalars  # noqa: E402

SERIES = ("perf/train_s", "perf/rollout_s", "perf/step_time_s", "train/packing_rows",
          "rollout/zero_gradient_groups", "train/loss", "train/grad_norm")


def start_side(config: str, init_dir: str, steps: int, skip: bool):
  """(the running process, its workdir, its start time, its stderr file), on core `skip` when
  there are two."""
  workdir = tempfile.mkdtemp(prefix="bench_zero_gradient_")
  pin = ["taskset", "-c", str(int(skip))] if (os.cpu_count() or 1) >= 2 and shutil.which(
      "taskset") else []
  cmd = pin + [sys.executable, "-m", "carr_jax.train", "--config", config, "--workdir", workdir,
               f"--config.train.num_steps={steps}", "--config.train.eval_every=0",
               f"--config.checkpoint.every={steps}",
               f"--config.checkpoint.init_dir={os.path.abspath(init_dir)}",
               f"--config.batch.skip_zero_gradient={skip}"]
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  env.pop("XLA_FLAGS", None)
  err = tempfile.TemporaryFile("w+")  # a pipe left unread could fill and stall the run
  proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err,
                          text=True)
  return proc, workdir, time.perf_counter(), err


def finish_sides(running) -> list[dict]:
  """Waits for every `start_side`; each side's wall time ends when it does."""
  ends = [None] * len(running)
  while None in ends:
    for i, (proc, *_) in enumerate(running):
      if ends[i] is None and proc.poll() is not None:
        ends[i] = time.perf_counter()
    time.sleep(0.2)
  sides = []
  for (proc, workdir, start, err), end in zip(running, ends):
    if proc.returncode:
      err.seek(0)
      raise RuntimeError(f"the trainer failed:\n{err.read()[-3000:]}")
    series = read_scalars(os.path.join(workdir, "tb"), {k: k for k in SERIES})
    sides.append({"wall_s": end - start, **series})
  return sides


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--init_dir", required=True,
                      help="a run's checkpoints (one that has learned)")
  parser.add_argument("--config", default="lab/configs/lookup_cpu.py:main")
  parser.add_argument("--steps", type=int, default=8)
  args = parser.parse_args()
  running = [start_side(args.config, args.init_dir, args.steps, skip) for skip in (False, True)]
  peer, change = finish_sides(running)
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
