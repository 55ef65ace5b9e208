"""Entry point: `python -m carr_jax.convert`; flags and `main()` only.

The conversions (Hugging Face <-> ours) and the logits parity check are
`carr_jax.model.convert`, whose docstring documents this command.
"""
from __future__ import annotations

import argparse
import sys

from carr_jax import cli
from carr_jax.model import convert as lib
from carr_jax.model.convert import check_logits, hf_to_ours, ours_to_hf, parse_mesh, parse_size


def parser() -> argparse.ArgumentParser:
  p = cli.parser("python -m carr_jax.convert", lib.__doc__)
  mode = p.add_mutually_exclusive_group(required=True)
  mode.add_argument("--hf-to-ours", action="store_true", help="import an HF checkpoint (--hf)")
  mode.add_argument("--ours-to-hf", action="store_true", help="export ours (--ckpt) as HF")
  mode.add_argument("--check", action="store_true",
                    help="compare our logits with transformers' on --hf (needs torch)")
  a = p.add_argument
  a("--hf", help="Hugging Face model directory (input)")
  a("--ckpt", help="our checkpoint directory (input)")
  a("--out", help="output directory")
  a("--param-dtype", choices=["float32", "bfloat16"],
    help="dtype of our params (default: the HF checkpoint's dtype)")
  a("--dtype", choices=["float32", "bfloat16", "float16"],
    help="stored HF dtype (default: our params' dtype)")
  a("--max-shard-size", default="5GB", help="split safetensors above this (default: 5GB)")
  a("--mesh", default="fsdp=-1", help="device mesh, e.g. 'data=2,fsdp=-1' (default: fsdp=-1)")
  a("--no-strict", action="store_true",
    help="warn (instead of failing) on HF tensors the model does not use")
  a("--overwrite", action="store_true", help="replace an existing --out")
  a("--seed", type=int, default=0, help="--check: seed of the random tokens")
  a("--batch", type=int, default=3, help="--check: rows compared (default: 3)")
  a("--seq-len", type=int, default=16, help="--check: tokens per row (default: 16)")
  a("--atol", type=float, default=1e-4,
    help="--check: largest allowed |logit difference|; above it the exit status is 1")
  return p


def _convert(args: argparse.Namespace) -> int:
  def need(*names):
    missing = [n for n in names if not getattr(args, n)]
    if missing:
      raise cli.UsageError(f"this mode needs {', '.join('--' + n for n in missing)}")

  if args.check:
    need("hf")
    diff = check_logits(args.hf, seed=args.seed, batch=args.batch, seq_len=args.seq_len)
    print(f"max_abs_logit_diff={diff:.3e}")
    return 0 if diff <= args.atol else 1  # NaN fails too
  if args.hf_to_ours:
    need("hf", "out")
    cfg = hf_to_ours(args.hf, args.out, param_dtype=args.param_dtype,
                     mesh_shape=parse_mesh(args.mesh), strict=not args.no_strict,
                     overwrite=args.overwrite)
    print(f"wrote {args.out} ({'MoE' if cfg.is_moe else 'dense'}, {cfg.param_dtype})")
    return 0
  need("ckpt", "out")
  ours_to_hf(args.ckpt, args.out, dtype=args.dtype,
             max_shard_bytes=parse_size(args.max_shard_size),
             mesh_shape=parse_mesh(args.mesh), overwrite=args.overwrite)
  print(f"wrote {args.out}")
  return 0


def main(argv: list[str] | None = None) -> int:
  return cli.run(_convert, parser(), argv)


if __name__ == "__main__":
  sys.exit(main())
