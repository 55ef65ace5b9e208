"""Entry point: `python -m carr_jax.train --config configs/<experiment>.py --workdir DIR`.

Flags and `main()` only; the loop is `carr_jax.jobs.rl_train.train_and_evaluate`, which tests call
directly. Override config keys with `--config.a.b=value`; unknown keys are an error (the
config is locked). Launch on several hosts with the same command on every host
(`scripts/launch_tpu_pod.sh`): `jax.distributed.initialize()` runs first when
`--multihost` is given (or JAX_COORDINATOR_ADDRESS is set). The command-line conventions
(config errors, --verbose, --debug) are carr_jax/cli.py's.
"""
from __future__ import annotations

import argparse
import sys

from carr_jax import cli


def parser() -> argparse.ArgumentParser:
  p = cli.parser("python -m carr_jax.train", __doc__.split("\n")[0],
                 config="Experiment config, e.g. lab/configs/demo_cpu.py or "
                 "configs/cgrpo_qwen3_4b.py:tpu.")
  p.add_argument("--workdir", required=True,
                 help="run directory (checkpoints, TensorBoard, trajectories); a rerun resumes")
  cli.add_multihost_flag(p)
  return p


def _train(args: argparse.Namespace) -> None:
  cli.init_multihost(args)
  from carr_jax.jobs.rl_train import train_and_evaluate
  train_and_evaluate(args.config, args.workdir)


def main(argv: list[str] | None = None) -> int:
  return cli.run(_train, parser(), argv)


if __name__ == "__main__":
  sys.exit(main())
