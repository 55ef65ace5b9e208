"""Restricted output vocabulary on CPU: train step and sampling, full 151,936-id softmax vs V' ids.

Both sides use the same model preset, the same packed [R, S] batch (loss on `gen_fraction` of
the slots, logits only at loss slots, AdamW) and the same `decode.generate` call (B rows,
prompt of P tokens, N new tokens at temperature 1):
- "full": no restricted vocabulary (`vocab=None`), the softmax over every id (the peer);
- "subset": a `RestrictedVocab` of V' sorted ids (`--ids`; the named demo world needs about
  950), passed to the train step (`StepConfig.vocab`) and to `decode.generate`.
Each side runs in its own process; times are medians after compilation.

    .venv/bin/python benchmarks/bench_output_vocab.py [--preset demo_dense --rows 2 --seq 1024
        --ids 950 --steps 3 --batch 8 --prompt 256 --new 64]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from common import REPO, run_sides


def _median_time(fn, repeats: int) -> float:
  fn()  # compile
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def side(args) -> dict:
  sys.path.insert(0, REPO)
  import jax
  import jax.numpy as jnp
  from carr_jax.model import decode
  from carr_jax.rl import packing
  from carr_jax.model import sharding
  from carr_jax.rl import loss as loss_lib
  from carr_jax.rl import optim
  from carr_jax.rl import train_step as ts
  from carr_jax.model import restricted_vocab
  from carr_jax.model.config import get_preset
  from carr_jax.model.restricted_vocab import RestrictedVocab
  rng = np.random.default_rng(0)
  cfg = get_preset(args.preset)
  ids = np.sort(rng.choice(cfg.vocab_size, args.ids, replace=False)).astype(np.int64)
  vocab = RestrictedVocab(tuple(int(i) for i in ids)) if args.side == "subset" else None
  mesh = sharding.make_mesh({"data": 1, "fsdp": 1, "expert": 1, "tensor": 1}, jax.devices()[:1])
  tx = optim.make_optimizer(optim.OptimConfig(learning_rate=1e-4))
  state, shardings = ts.create_train_state(cfg, tx, mesh, 0)
  step_cfg = ts.StepConfig(logprob_chunk=512, loss_positions=True, vocab=vocab)
  step = ts.make_train_step(cfg, loss_lib.LossConfig(), step_cfg, tx, mesh, shardings)
  r, s = args.rows, args.seq
  tokens = rng.choice(ids, (r, s)).astype(np.int32)  # in the subset: both sides score them
  mask = rng.random((r, s)) < args.gen_fraction
  index, valid = packing.loss_positions(mask, 128)
  batch = {"tokens": tokens, "targets": np.roll(tokens, -1, axis=1),
           "positions": np.tile(np.arange(s, dtype=np.int32), (r, 1)),
           "segment_ids": np.ones((r, s), np.int32), "loss_mask": mask.astype(np.float32),
           "advantages": np.ones((r, s), np.float32),
           "old_logprobs": np.full((r, s), -7.0, np.float32),
           "rollout_logprobs": np.full((r, s), -7.0, np.float32),
           "loss_index": index, "loss_valid": valid}
  holder = {"state": state}

  def train():
    holder["state"], metrics = step(holder["state"], batch)
    jax.block_until_ready(metrics)
  train_s = _median_time(train, args.steps)
  b, p = args.batch, args.prompt
  prompt = jnp.asarray(rng.choice(ids, (b, p)).astype(np.int32))
  gen_args = dict(lengths=jnp.full((b,), p, jnp.int32), seeds=jnp.arange(b, dtype=jnp.uint32),
                  temperature=jnp.ones((b,), jnp.float32), top_p=jnp.ones((b,), jnp.float32),
                  top_k=jnp.full((b,), -1, jnp.int32),
                  max_new_tokens=jnp.full((b,), args.new, jnp.int32),
                  stop_ids=jnp.full((b, 1), -1, jnp.int32))

  def sample():
    out = decode.generate_jit(holder["state"].params, cfg, prompt, **gen_args,
                              max_steps=args.new, vocab=vocab)
    jax.block_until_ready(out)
  sample_s = _median_time(sample, args.steps)
  return {"impl": f"{args.side} ({restricted_vocab.size(vocab, cfg.vocab_size)} output ids)",
          "train_step_s": train_s, "train_tokens_per_s": float(mask.sum()) / train_s,
          "generate_s": sample_s, "generated_tokens_per_s": b * args.new / sample_s}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--side", choices=["full", "subset"])
  parser.add_argument("--preset", default="demo_dense")
  parser.add_argument("--rows", type=int, default=2)
  parser.add_argument("--seq", type=int, default=1024)
  parser.add_argument("--gen_fraction", type=float, default=0.2)
  parser.add_argument("--ids", type=int, default=950)
  parser.add_argument("--steps", type=int, default=3)
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--prompt", type=int, default=256)
  parser.add_argument("--new", type=int, default=64)
  args, rest = parser.parse_known_args()
  if args.side:
    print(json.dumps(side(args)))
    return
  results = run_sides(__file__, ["full", "subset"], sys.argv[1:])
  for r in results.values():
    print(f"{r['impl']:<32} train step {r['train_step_s']:.3f} s "
          f"({r['train_tokens_per_s']:.0f} loss tok/s)  generate {r['generate_s']:.3f} s "
          f"({r['generated_tokens_per_s']:.0f} tok/s)")
  full, sub = results["full"], results["subset"]
  print(f"ratio subset / full: train throughput {full['train_step_s'] / sub['train_step_s']:.2f}x"
        f", sampling throughput {full['generate_s'] / sub['generate_s']:.2f}x")


if __name__ == "__main__":
  main()
