"""The main job's SFT step with the shared prefix computed once (`batch.prefix_multiple` 64, the
config's) against the whole rows (0, the peer).

Both sides build what `python -m carr_jax.sft --config lab/configs/lookup_cpu.py:sft` builds:
the expert's episodes rendered with the real Qwen3 chat template and tools, the config's
batches of 16 (the loader's order from `--seed`), its model, output vocabulary, optimizer and
jitted step on one CPU device. Only the packing of the batch and the step's prefix input
differ: the system turn with the tool signatures (193 tokens) is the prefix every row shares,
192 of it cut off at multiples of 64. Each side runs in its own process; times are medians of
`--steps` steps after `--warmup` (each new loss-position shape compiles once), memory is XLA's
`memory_analysis()` temporaries of the first batch's compiled step. The sides' first-step
losses are printed: they agree to float rounding (tests/lab/test_shared_prefix.py checks it).

    .venv/bin/python benchmarks/bench_shared_prefix.py [--steps 20 --warmup 6 --seed 0]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

from common import REPO, run_sides

SIDES = {"whole": 0, "shared": 64}  # side -> batch.prefix_multiple


def side(args) -> dict:
  sys.path.insert(0, REPO)
  import jax
  from carr_jax.coldstart import step as sft_step
  from carr_jax.jobs import components
  from carr_jax.jobs.sft_train import sft_examples
  from carr_jax.jobs.tasks import TaskLoader
  from carr_jax.model import sharding
  from carr_jax.rl import optim
  from carr_jax.rl import train_step as ts
  from lab.configs import lookup_cpu
  from rollout.chat import ChatFormat
  from tests.carr_jax.test_tokenizer import qwen3_tokenizer
  config = lookup_cpu.get_config("sft")
  config.batch.prefix_multiple = SIDES[args.side]
  with tempfile.TemporaryDirectory() as tmp:
    examples = sft_examples(config, ChatFormat(qwen3_tokenizer()), tmp)
  loader = TaskLoader(examples, config.sft.batch_size, args.seed, config.sft.epochs)
  cfg, vocab = components.model_config(config), components.output_vocab(config)
  tx = optim.make_optimizer(components.optim_config(config))
  mesh = sharding.make_mesh({"data": 1}, jax.devices()[:1])
  state, shardings = ts.create_train_state(cfg, tx, mesh, config.seed)
  step_cfg = components.sft_step_config(config, vocab)
  pack_cfg = components.packing_config(config, mesh, cfg.vocab_size)
  step = sft_step.make_sft_step(cfg, step_cfg, tx, mesh, shardings)
  keys = sft_step.sft_batch_keys(step_cfg)
  times, losses, temp_mb, prefix = [], [], None, 0
  for i in range(args.warmup + args.steps):
    batch, stats = sft_step.make_batch(loader.next(), pack_cfg,
                                       config.batch.loss_positions_multiple, vocab)
    if temp_mb is None:
      with jax.set_mesh(mesh):
        compiled = ts.jit_step(sft_step.sft_step_fn(cfg, step_cfg, tx), mesh, shardings,
                               keys).lower(
            state, ts.global_batch(batch, mesh, keys)).compile()
      temp_mb, prefix = compiled.memory_analysis().temp_size_in_bytes / 2**20, stats["prefix"]
    start = time.perf_counter()
    state, metrics = step(state, batch)
    losses.append(float(jax.device_get(metrics["loss"])))
    if i >= args.warmup:
      times.append(time.perf_counter() - start)
  return {"side": args.side, "step_s": statistics.median(times), "temp_mb": temp_mb,
          "prefix": prefix, "first_loss": losses[0], "row_length": int(batch["tokens"].shape[1])}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--side")  # whole | shared
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--warmup", type=int, default=6)
  parser.add_argument("--seed", type=int, default=0)
  args, _ = parser.parse_known_args()
  if args.side:
    print(json.dumps(side(args)))
    return
  results = run_sides(__file__, list(SIDES), sys.argv[1:])
  for r in results.values():
    print(f"{r['side']:>7}: step {r['step_s']:.3f} s, rows of {r['row_length']} after a "
          f"{r['prefix']}-token prefix, temporaries {r['temp_mb']:.0f} MiB, "
          f"first loss {r['first_loss']:.6f}")
  whole, shared = results["whole"], results["shared"]
  print(f"ratio shared / whole (peer): speed {whole['step_s'] / shared['step_s']:.2f}x, "
        f"temporaries {shared['temp_mb'] / whole['temp_mb']:.2f}x")


if __name__ == "__main__":
  main()
