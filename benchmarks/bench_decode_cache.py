"""Decoding with the KV cache written in place inside the layers' scan (ours) against the same
generation at a peer commit (default 885e321, the parent of 9b5154c: the scan took the cache
as an input and returned it as an output, copying every layer's K and V twice per step).

Both sides run `decode.generate_jit` of their own checkout (the peer's is unpacked from git
into a temp dir) on random `demo_dense` weights (seed 0), 64 rows of random prompt ids, a
4,096-id output vocabulary, greedy, no stop id: `--new` tokens a row (decode) and 1 token
(the prefill alone), at each prompt length of `--lengths`. Each side runs in its own process,
the sides alternating `--repeats` times; a process compiles once, then times `--rounds` calls
in CPU seconds of the process (all threads: time.process_time, which a machine shared with
other work inflates less than wall time). Prints the medians per side, the ratio of the
decoding part (calls minus prefill) peer / ours, and whether the greedy tokens agree.

    .venv/bin/python benchmarks/bench_decode_cache.py [--peer 885e321 --lengths 320,1024]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

from common import REPO


def side(args) -> dict:
  sys.path.insert(0, args.checkout)
  import jax
  import jax.numpy as jnp
  import numpy as np
  from carr_jax.model import decode, qwen3
  from carr_jax.model.config import get_preset
  from carr_jax.model.restricted_vocab import RestrictedVocab
  cfg = get_preset("demo_dense")
  params = qwen3.init_params(cfg, jax.random.key(0))
  rng = np.random.default_rng(0)
  vocab = RestrictedVocab(tuple(sorted(rng.choice(cfg.vocab_size, 4096, replace=False).tolist())))
  rows, out = 64, {}
  for length in args.lengths:
    tokens = jnp.asarray(rng.choice(vocab.ids, (rows, length)), jnp.int32)
    timings = {}
    for name, steps in (("prefill", 1), ("generate", args.new)):
      call = lambda: decode.generate_jit(  # noqa: E731
          params, cfg, tokens, jnp.full((rows,), length, jnp.int32),
          jnp.arange(rows, dtype=jnp.uint32), jnp.zeros((rows,)), jnp.ones((rows,)),
          jnp.zeros((rows,), jnp.int32), jnp.full((rows,), steps, jnp.int32),
          jnp.full((rows, 1), -1, jnp.int32), max_steps=steps, vocab=vocab)
      result = jax.block_until_ready(call())  # compiles
      times = []
      for _ in range(args.rounds):
        start = time.process_time()
        jax.block_until_ready(call())
        times.append(time.process_time() - start)
      timings[name] = statistics.median(times)
    timings["tokens"] = np.asarray(result["tokens"]).tolist()
    out[str(length)] = timings
  return out


def unpack(ref: str, into: str) -> str:
  """The tree at git `ref`, unpacked under `into`."""
  archive = subprocess.run(["git", "-C", REPO, "archive", ref], check=True,
                           capture_output=True).stdout
  path = os.path.join(into, "tar")
  with open(path, "wb") as f:
    f.write(archive)
  with tarfile.open(path) as tar:
    tar.extractall(into, filter="data")
  return into


def run_side(checkout: str, argv: list[str]) -> dict:
  out = subprocess.run([sys.executable, __file__, "--side", "--checkout", checkout] + argv,
                       capture_output=True, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
  if out.returncode != 0:
    raise RuntimeError(f"side {checkout} failed:\n{out.stderr[-3000:]}")
  return json.loads(out.stdout.strip().splitlines()[-1])


def report(peer: list[dict], ours: list[dict], args) -> None:
  for length in map(str, args.lengths):
    cols = {}
    for label, runs in (("peer", peer), ("ours", ours)):
      cols[label] = {k: statistics.median(r[length][k] for r in runs)
                     for k in ("prefill", "generate")}
      print(f"T={length} {label:<4} prefill {cols[label]['prefill']:.2f} s  "
            f"{args.new} tokens {cols[label]['generate']:.2f} s  (CPU s, median)")
    decoding = {k: v["generate"] - v["prefill"] for k, v in cols.items()}
    same = all(p[length]["tokens"] == o[length]["tokens"] for p in peer for o in ours)
    print(f"T={length} ratio peer / ours, decoding part: "
          f"{decoding['peer'] / decoding['ours']:.2f}x  whole call: "
          f"{cols['peer']['generate'] / cols['ours']['generate']:.2f}x  same greedy tokens: {same}")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--side", action="store_true")
  parser.add_argument("--checkout", default=REPO)
  parser.add_argument("--peer", default="885e321")
  parser.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")],
                      default=[320, 1024])
  parser.add_argument("--new", type=int, default=64)
  parser.add_argument("--rounds", type=int, default=2)
  parser.add_argument("--repeats", type=int, default=2)
  args = parser.parse_args()
  if args.side:
    print(json.dumps(side(args)))
    return
  argv = ["--lengths", ",".join(map(str, args.lengths)), "--new", str(args.new),
          "--rounds", str(args.rounds)]
  with tempfile.TemporaryDirectory() as tmp:
    checkout = unpack(args.peer, tmp)
    peer, ours = [], []
    for _ in range(args.repeats):
      peer.append(run_side(checkout, argv))
      ours.append(run_side(REPO, argv))
  print(f"peer: {args.peer} (cache scanned as input and output); ours: {REPO}")
  report(peer, ours, args)


if __name__ == "__main__":
  main()
