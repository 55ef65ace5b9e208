"""Cold-start SFT on multi-turn trajectories: `python -m carr_jax.sft --config ... --workdir DIR`.

    python -m carr_jax.sft --config lab/configs/demo_cpu.py:sft --workdir workdir/sft
    python -m carr_jax.train --config lab/configs/demo_cpu.py --workdir workdir/rl \\
        --config.checkpoint.init_dir=workdir/sft/checkpoints        # RL from the SFT policy

The data (`sft.data`: trajectory files, or "expert") and the loop are described in
carr_jax/jobs/sft_train.py, the objective in carr_jax/coldstart/step.py; this module is the
command line and the lines the run ends with.
"""
from __future__ import annotations

import argparse
import os
import sys

import jax

from carr_jax import cli
from carr_jax.jobs.sft_train import train_sft
from carr_jax.runs import metrics as metrics_lib


def parser() -> argparse.ArgumentParser:
  p = cli.parser("python -m carr_jax.sft", __doc__.split("\n")[0],
                 config="SFT config, e.g. lab/configs/demo_cpu.py:sft or "
                 "configs/cgrpo_qwen3_4b.py:tpu,sft.")
  p.add_argument("--workdir", required=True,
                 help="run directory (checkpoints, TensorBoard, HF exports); a rerun resumes")
  cli.add_multihost_flag(p)
  return p


def closing_summary(history: list[dict], workdir: str) -> list[str]:
  """The lines an SFT run ends with: steps run, loss at both ends, where the outputs are."""
  lines = [f"sft: {len(history)} steps run by this process"]
  if history:
    lines.append(f"loss: first step {history[0]['train/loss']:.4f} -> last step "
                 f"{history[-1]['train/loss']:.4f}")
  return lines + metrics_lib.output_lines(workdir)


def _train(args: argparse.Namespace) -> None:
  cli.init_multihost(args)
  history = train_sft(args.config, args.workdir)
  if jax.process_index() == 0:
    print("\n".join(closing_summary(history, os.path.abspath(args.workdir))), flush=True)


def main(argv: list[str] | None = None) -> int:
  return cli.run(_train, parser(), argv)


if __name__ == "__main__":
  sys.exit(main())
