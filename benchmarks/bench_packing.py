"""Packing efficiency on long-tailed trajectory lengths: packed rows vs pad-to-max.

Simulates `--steps` training batches of `--batch` trajectories (16 prompts x 8 rollouts in
the paper) whose lengths follow a long-tailed distribution like deep-search episodes:
lognormal with median 8k tokens, sigma 0.9, clipped to [1k, 60k], everything divided by
`--scale` so it runs fast. Each batch is packed by `carr_jax.rl.packing.pack_trajectories`
with the paper-scale buckets (4k .. 64k) divided by the same scale, rows a multiple of
`--row-multiple`.

Peer, measured on the same batches: pad-to-max, one trajectory per row, every row as long
as the batch's longest trajectory (the usual unpacked [N, max_len] batch). Also shown:
pad-to-bucket (one trajectory per row, row length rounded up to a bucket: what a
shape-static unpacked trainer compiles). Efficiency = real token slots / all slots.

Run (a few seconds):
    .venv/bin/python benchmarks/bench_packing.py --steps 50 --batch 128 --scale 16 \
        --row-multiple 8
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from carr_jax.rl import packing as pk  # noqa: E402

PAPER_BUCKETS = (4096, 8192, 16384, 32768, 65536)


def sample_lengths(rng: np.random.Generator, n: int, scale: int) -> np.ndarray:
  lengths = np.clip(rng.lognormal(np.log(8000), 0.9, size=n), 1000, 60000)
  return np.maximum((lengths / scale).astype(int), 2)


def records(rng: np.random.Generator, lengths: np.ndarray) -> list[dict]:
  out = []
  for n in lengths:
    mask = np.zeros(n, int)
    mask[n // 10:] = 1  # prompt first, then generated (observations do not matter here)
    out.append({"token_ids": rng.integers(0, 1000, size=n).tolist(), "loss_mask": mask.tolist(),
                "rollout_logprobs": np.where(mask == 1, -1.0, 0.0).tolist()})
  return out


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--steps", type=int, default=50)
  p.add_argument("--batch", type=int, default=128)
  p.add_argument("--scale", type=int, default=16)
  p.add_argument("--row-multiple", type=int, default=8)
  p.add_argument("--seed", type=int, default=0)
  a = p.parse_args()
  buckets = tuple(b // a.scale for b in PAPER_BUCKETS)
  cfg = pk.PackingConfig(row_lengths=buckets, row_multiple=a.row_multiple)
  rng = np.random.default_rng(a.seed)

  packed_eff, max_eff, bucket_eff, shapes, pack_seconds, slot_ratio = [], [], [], set(), [], []
  for _ in range(a.steps):
    lengths = sample_lengths(rng, a.batch, a.scale)
    recs = records(rng, lengths)
    t0 = time.perf_counter()
    batch = pk.pack_trajectories(recs, np.zeros(a.batch), cfg)
    pack_seconds.append(time.perf_counter() - t0)
    slots = lengths - 1  # a trajectory of L tokens fills L - 1 slots (packing.py convention)
    r, s = batch.shape
    shapes.add((r, s))
    packed_eff.append(batch.efficiency)
    max_eff.append(slots.sum() / (a.batch * slots.max()))
    bucket = min(b for b in buckets if b >= slots.max())
    bucket_eff.append(slots.sum() / (a.batch * bucket))
    slot_ratio.append(a.batch * slots.max() / (r * s))

  pct = lambda xs: f"{100 * np.mean(xs):5.1f}% (min {100 * np.min(xs):.1f}%)"
  print(f"{a.steps} batches x {a.batch} trajectories, lengths lognormal(median 8k, sigma 0.9) "
        f"in [1k, 60k] / {a.scale}; buckets {buckets}, rows multiple of {a.row_multiple}")
  print(f"  packed (FFD, bucketed)  efficiency {pct(packed_eff)}")
  print(f"  pad-to-max (peer)       efficiency {pct(max_eff)}")
  print(f"  pad-to-bucket           efficiency {pct(bucket_eff)}")
  print(f"  packed / pad-to-max efficiency: {np.mean(packed_eff) / np.mean(max_eff):.2f}x; "
        f"slots pad-to-max / packed: {np.mean(slot_ratio):.2f}x")
  print(f"  distinct packed shapes (compilations): {len(shapes)} {sorted(shapes)}")
  print(f"  pack time per batch: {1e3 * np.mean(pack_seconds):.1f} ms (host, NumPy)")


if __name__ == "__main__":
  main()
