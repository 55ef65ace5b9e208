"""Attention on CPU: the model's forward + backward with dense (peer) vs blockwise attention.

Both sides run the same preset's `Qwen3` body on `--rows` packed rows of T tokens (one segment
each), fp32, and differentiate a sum of the hidden states; only `Qwen3Config.attention`
differs:
- "dense": the [B, K, G, T, S] fp32 scores at once (the reference, the peer);
- "blockwise": online softmax over blocks of at most `carr_jax.model.attention.max_block()`
  (the CPU's), own backward pass;
- with `--peer-block N`, a third side "blockwise@N": the same with blocks of at most N, the
  peer of the block size.
Each side runs in its own process; times are medians after compilation, memory is XLA's
`memory_analysis()` of the compiled gradient (temporaries).

    .venv/bin/python benchmarks/bench_attention.py [--preset demo_dense --seqs 1024,2048,4096
        --rows 1 --peer-block 512]
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
  from carr_jax.model import attention
  impl, _, block = args.side.partition("@")
  if block:
    attention.BLOCKS["cpu"] = int(block)
  cfg = get_preset(args.preset, attention=impl)
  params = model_lib.init_params(cfg, jax.random.key(0))
  out = {"impl": args.side}
  for t in (int(s) for s in args.seqs.split(",")):
    tokens = jnp.ones((args.rows, t), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (args.rows, t))
    segments = jnp.ones((args.rows, t), jnp.int32)

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
  parser.add_argument("--side")  # dense | blockwise | blockwise@N
  parser.add_argument("--preset", default="demo_dense")
  parser.add_argument("--seqs", default="1024,2048,4096")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--rows", type=int, default=1)
  parser.add_argument("--peer-block", type=int, default=0)
  args, _ = parser.parse_known_args()
  if args.side:
    print(json.dumps(side(args)))
    return
  peer = [f"blockwise@{args.peer_block}"] if args.peer_block else []
  results = run_sides(__file__, ["dense", "blockwise"] + peer, sys.argv[1:])
  dense, block = results["dense"], results["blockwise"]
  print(f"{'T':>6} {'dense s':>9} {'blockwise s':>12} {'speed-up':>9} "
        f"{'dense temp MiB':>15} {'blockwise temp MiB':>19} {'memory':>8}")
  for t in args.seqs.split(","):
    d, b = dense[t], block[t]
    print(f"{t:>6} {d['s']:9.3f} {b['s']:12.3f} {d['s'] / b['s']:8.2f}x "
          f"{d['temp_mb']:15.0f} {b['temp_mb']:19.0f} {d['temp_mb'] / b['temp_mb']:7.1f}x")
  if peer:
    p = results[peer[0]]
    print(f"ratio blockwise / {peer[0]} (peer): "
          + ", ".join(f"T={t} {p[t]['s'] / block[t]['s']:.2f}x" for t in args.seqs.split(",")))


if __name__ == "__main__":
  main()
