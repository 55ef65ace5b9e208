"""Attention on CPU: the model's forward + backward with dense (peer) vs blockwise attention.

Both sides run the same preset's `Qwen3` body on one packed row of T tokens (one segment),
fp32, and differentiate a sum of the hidden states; only `Qwen3Config.attention` differs:
- "dense": the [B, K, G, T, S] fp32 scores at once (the reference, the peer);
- "blockwise": online softmax over blocks of `carr_jax.model.attention.BLOCK`, own backward pass.
Each side runs in its own process; times are medians after compilation, memory is XLA's
`memory_analysis()` of the compiled gradient (temporaries).

    .venv/bin/python benchmarks/bench_attention.py [--preset demo_dense --seqs 1024,2048,4096]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from common import REPO, run_sides


def side(args) -> dict:
  sys.path.insert(0, REPO)
  import jax
  import jax.numpy as jnp
  from carr_jax.model import qwen3 as model_lib
  from carr_jax.model.config import get_preset
  cfg = get_preset(args.preset, attention=args.side)
  params = model_lib.init_params(cfg, jax.random.key(0))
  out = {"impl": args.side}
  for t in (int(s) for s in args.seqs.split(",")):
    tokens = jnp.ones((1, t), jnp.int32)
    positions = jnp.arange(t, dtype=jnp.int32)[None]
    segments = jnp.ones((1, t), jnp.int32)

    def objective(p):
      hidden = model_lib.Qwen3(cfg).apply({"params": p}, tokens, positions, segments)
      return jnp.sum(hidden.astype(jnp.float32) ** 2)
    compiled = jax.jit(jax.grad(objective)).lower(params).compile()
    temp_mb = compiled.memory_analysis().temp_size_in_bytes / 2**20
    jax.block_until_ready(compiled(params))
    times = []
    for _ in range(args.repeats):
      start = time.perf_counter()
      jax.block_until_ready(compiled(params))
      times.append(time.perf_counter() - start)
    out[str(t)] = {"s": statistics.median(times), "temp_mb": temp_mb}
  return out


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--side", choices=["dense", "blockwise"])
  parser.add_argument("--preset", default="demo_dense")
  parser.add_argument("--seqs", default="1024,2048,4096")
  parser.add_argument("--repeats", type=int, default=3)
  args, _ = parser.parse_known_args()
  if args.side:
    print(json.dumps(side(args)))
    return
  results = run_sides(__file__, ["dense", "blockwise"], sys.argv[1:])
  dense, block = results["dense"], results["blockwise"]
  print(f"{'T':>6} {'dense s':>9} {'blockwise s':>12} {'speed-up':>9} "
        f"{'dense temp MiB':>15} {'blockwise temp MiB':>19} {'memory':>8}")
  for t in args.seqs.split(","):
    d, b = dense[t], block[t]
    print(f"{t:>6} {d['s']:9.3f} {b['s']:12.3f} {d['s'] / b['s']:8.2f}x "
          f"{d['temp_mb']:15.0f} {b['temp_mb']:19.0f} {d['temp_mb'] / b['temp_mb']:7.1f}x")


if __name__ == "__main__":
  main()
