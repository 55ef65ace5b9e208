"""Entry point: `python -m carr_jax.aot`; flags and `main()` only.

The TPU compile check is `carr_jax.jobs.aot`, whose docstring documents this command.
"""
from __future__ import annotations

import argparse
import sys

from carr_jax import cli
from carr_jax.jobs import aot as lib
from carr_jax.jobs.aot import (GIB, chip_of, compile_config, fits, format_roofline, format_table,
                              topology_devices)


def parser() -> argparse.ArgumentParser:
  p = cli.parser("python -m carr_jax.aot", lib.__doc__.split("\n")[0],
                 config="RL or SFT config, e.g. configs/cgrpo_qwen3_4b.py:tpu.")
  p.add_argument("--topology", required=True, help="libtpu topology name, e.g. v5p:4x4x4")
  p.add_argument("--rows", type=int, default=0, help="batch rows (0 = the config's worst case)")
  p.add_argument("--row-length", type=int, default=0,
                 help="row length (0 = the config's longest bucket)")
  p.add_argument("--headroom", type=float, default=0.1,
                 help="share of HBM a step must leave free (default: 0.1)")
  return p


def _check(args: argparse.Namespace) -> int:
  topology = args.topology
  try:
    chip = chip_of(topology)
  except ValueError as e:
    raise cli.UsageError(str(e)) from e
  devices = topology_devices(topology)
  reports, facts = compile_config(args.config, devices, args.rows, args.row_length)
  mesh = " x ".join(f"{a} {n}" for a, n in facts["mesh"].items())
  print(f"{topology}: {len(devices)} chips of {chip.hbm_bytes / GIB:.2f} GiB HBM, "
        f"{chip.peak_flops / 1e12:.0f} TFLOP/s bf16, HBM {chip.hbm_bandwidth / 1e9:,.0f} GB/s, "
        f"ICI {chip.ici_bandwidth / 1e9:,.0f} GB/s out; mesh {mesh}; attention "
        f"{facts['attention']}")
  print(f"batch: {facts['rows']} rows x {facts['row_length']:,} tokens, "
        f"{facts['micro_batches']} micro-batches; train step model FLOPs "
        f"{facts['model_flops']:.3g}")
  print(format_table(reports, chip))
  print("roofline per step (each time a lower bound; FLOPs executed, remat included; "
        "bytes per chip):")
  print(format_roofline(reports, chip, len(devices)))
  ok = all(fits(r, chip, args.headroom) for r in reports)
  print(f"fits with {args.headroom:.0%} headroom: {'yes' if ok else 'NO'}")
  return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
  return cli.run(_check, parser(), argv)


if __name__ == "__main__":
  sys.exit(main())
