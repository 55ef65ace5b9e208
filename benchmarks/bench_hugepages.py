"""The main job's steps with glibc's malloc asking for transparent huge pages (ours:
scripts/job_env.sh sets GLIBC_TUNABLES=glibc.malloc.hugetlb=1 for every runner) against the
default 4 KiB pages (the peer: every run before 2026-12-07).

XLA:CPU takes each execution's temporary buffers as one block (the main job's SFT step: ~860
MB), which glibc maps afresh with mmap and unmaps after the step, so the kernel faults in and
zeroes it 4 KiB at a time on every step. With the tunable, malloc marks its mappings for huge
pages (madvise), so the same block faults in 2 MiB at a time. The numerics are untouched.

Sides, each a fresh process, alternating for `--rounds` rounds:
  sft  the SFT step of lab/configs/lookup_cpu.py:sft on one packed batch (the first of the
       loader), `--steps` steps after two warm-up steps: median step seconds and minor page
       faults per step (getrusage), and the losses;
  rl   with `--init_dir` (a cold start's checkpoints): `--rl_steps` steps of
       lab/configs/lookup_cpu.py:main through the real trainer, no evaluation: median
       rollout, train and step seconds over the steps after the first.
Prints each round, then the medians over rounds and the ratio peer / ours, and whether the two
sides' losses are equal.

    .venv/bin/python benchmarks/bench_hugepages.py --rounds 3 --steps 10 \
        [--init_dir WORKDIR/sft/checkpoints --rl_steps 4]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time

from common import REPO, run_sides, run_trainer

sys.path.insert(0, REPO)

HUGE = "glibc.malloc.hugetlb=1"
SIDES = {"4k pages (peer)": "", "huge pages (ours)": HUGE}
RL_KEYS = {"rollout": "perf/rollout_s", "train": "perf/train_s", "step": "perf/step_time_s",
           "loss": "train/loss"}


def sft_side(steps: int) -> dict:
  """In this process: the main job's SFT step on one batch; JSON-able timings and losses."""
  import jax

  from carr_jax.coldstart.step import make_batch
  from carr_jax.jobs.sft_train import SFTTrainer
  from lab.configs import lookup_cpu
  config = lookup_cpu.get_config("sft")
  config.checkpoint.every = 10**9
  trainer = SFTTrainer(config, tempfile.mkdtemp(prefix="bench_hugepages_"))
  batch, _ = make_batch(trainer.loader.next(), trainer.pack_cfg,
                        trainer.pack_cfg.loss_positions_multiple, trainer.step_cfg.vocab)
  def step() -> float:  # one step's loss
    trainer.state, out = trainer.step(trainer.state, batch)
    return float(jax.block_until_ready(out["loss"]))

  losses = [step(), step()]  # warm-up: compiles
  times = []
  first_faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  for _ in range(steps):
    start = time.perf_counter()
    losses.append(step())
    times.append(time.perf_counter() - start)
  faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - first_faults) / steps
  return {"step_s": statistics.median(times), "faults": faults, "loss": losses}


def run_sft(tunables: str, steps: int) -> dict:
  return run_sides(__file__, ["sft"], ["--steps", str(steps)],
                   env={"GLIBC_TUNABLES": tunables})["sft"]


def run_rl(tunables: str, steps: int, init_dir: str) -> dict:
  from carr_jax.runs.metrics import read_scalars
  workdir = run_trainer("lab/configs/lookup_cpu.py:main", steps, init_dir,
                        env={"GLIBC_TUNABLES": tunables})
  series = read_scalars(os.path.join(workdir, "tb"), RL_KEYS)
  out = {f"{k}_s": statistics.median(v[1:]) for k, v in series.items() if k != "loss"}
  return {**out, "loss": series["loss"]}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--side", choices=["sft"], help=argparse.SUPPRESS)
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--steps", type=int, default=10, help="timed SFT steps per side")
  parser.add_argument("--init_dir", default="", help="a cold start's checkpoints: adds rl")
  parser.add_argument("--rl_steps", type=int, default=4)
  args = parser.parse_args()
  if args.side:
    print(json.dumps(sft_side(args.steps)))
    return
  results = {side: [] for side in SIDES}
  for r in range(args.rounds):
    order = list(SIDES) if r % 2 == 0 else list(SIDES)[::-1]
    for side in order:
      res = {"sft": run_sft(SIDES[side], args.steps)}
      if args.init_dir:
        res["rl"] = run_rl(SIDES[side], args.rl_steps, args.init_dir)
      results[side].append(res)
      print(f"round {r} {side}: " + json.dumps(
          {part: {k: v for k, v in d.items() if k != "loss"} for part, d in res.items()}),
          flush=True)
  peer, ours = list(SIDES)
  fields = [("sft", "step_s"), ("sft", "faults")]
  if args.init_dir:
    fields += [("rl", "rollout_s"), ("rl", "train_s"), ("rl", "step_s")]
  print(f"| median over {args.rounds} rounds | {peer} | {ours} | peer / ours |")
  print("|---|---|---|---|")
  for part, key in fields:
    a, b = (statistics.median(x[part][key] for x in results[s]) for s in (peer, ours))
    print(f"| {part} {key} | {a:.3f} | {b:.3f} | {a / b:.2f}x |")
  for part in ("sft", "rl") if args.init_dir else ("sft",):
    same = all(x[part]["loss"] == y[part]["loss"] for x, y in zip(results[peer], results[ours]))
    print(f"{part}: the two sides' losses are {'equal' if same else 'NOT equal'}")


if __name__ == "__main__":
  main()
