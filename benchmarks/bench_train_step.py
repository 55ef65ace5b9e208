"""C-GRPO train-step throughput on CPU: carr_jax vs a PyTorch GRPO step on transformers.

Both sides take one optimizer step (AdamW) of the token-level clipped GRPO loss (Eq. 15,
eps 0.2 / 0.28, loss only on generated tokens, normalized by their global count) on the same
~50M-parameter Qwen3 (`bench_50m`), the same [R, S] batch of packed rows, fp32.
- carr_jax: `carr_jax.rl.train_step.make_train_step` (chunked log-probs, scanned micro-batches),
  with logits at every slot ("jax") and only at the loss slots ("jax_gather",
  `batch.loss_positions_multiple` 128, the trainer's default path).
- "jax_recompute": the loss-slots step as RL ran it until 2026-11-26: the old log-probs
  recomputed by a separate forward pass (`train_step.jit_logprob_fn`) before each step; the
  peer of `--old_logprobs_ab`, where "jax_gather" takes them from its own forward
  (`StepConfig.on_policy`, `loss.old_logprobs="trainer"`, the trainers' default).
- peer: transformers' Qwen3ForCausalLM + the same loss written in torch the way TRL's GRPO
  trainer computes it (per-token log-probs from full logits, `torch.clamp` clip, masked
  token mean), `torch.optim.AdamW`.
Also reports our step's FLOPs (XLA cost analysis) as a fraction of this machine's measured
fp32 matmul FLOP/s (a 2048^3 jnp.dot, best of 5).

    .venv/bin/python benchmarks/bench_train_step.py [--rows 4 --seq 512 --steps 3]
        [--gen_fraction 0.7]   # share of slots with loss; agent episodes: mostly observations
        [--old_logprobs_ab]    # only "jax_gather" (on-policy) vs "jax_recompute"
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from common import (REPO, hf_qwen3, peak_mb, print_comparison, print_ratio, rss_mb,
                    run_sides)


def make_batch(rows, seq, vocab, gen_fraction, seed=0):
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, vocab, (rows, seq)).astype(np.int32)
  mask = (rng.random((rows, seq)) < gen_fraction).astype(np.float32)
  mask[:, :32] = 0  # a prompt
  adv = np.repeat(rng.standard_normal((rows, 1)), seq, axis=1).astype(np.float32)
  old = (-rng.random((rows, seq)) * 8).astype(np.float32)
  return tokens, mask, adv, old


def matmul_flops_per_s() -> float:
  import jax
  import jax.numpy as jnp
  n = 2048
  a = jnp.ones((n, n), jnp.float32)
  f = jax.jit(lambda x: x @ x)
  f(a).block_until_ready()
  best = min(_timed(lambda: f(a).block_until_ready()) for _ in range(5))
  return 2 * n**3 / best


def _timed(fn) -> float:
  t = time.perf_counter()
  fn()
  return time.perf_counter() - t


def run_jax(args, gather: bool, recompute: bool = False) -> dict:
  """One side; `recompute`: old log-probs from a separate forward pass before each step."""
  sys.path.insert(0, REPO)
  import jax
  from carr_jax.rl import loss as loss_lib
  from carr_jax.rl import packing
  from carr_jax.model import sharding
  from carr_jax.rl import optim
  from carr_jax.rl import train_step as ts
  from carr_jax.model.config import get_preset
  cfg = get_preset("bench_50m")
  tokens, mask, adv, old = make_batch(args.rows, args.seq, cfg.vocab_size, args.gen_fraction)
  batch = {"tokens": tokens, "positions": np.tile(np.arange(args.seq), (args.rows, 1)),
           "segment_ids": np.ones_like(tokens), "targets": np.roll(tokens, -1, axis=1),
           "loss_mask": mask, "advantages": adv, "old_logprobs": old, "rollout_logprobs": old}
  if gather:
    batch["loss_index"], batch["loss_valid"] = packing.loss_positions(mask > 0, 128)
  mesh = sharding.make_mesh({"data": 1})
  tx = optim.make_optimizer(optim.OptimConfig(learning_rate=1e-6))
  state, shardings = ts.create_train_state(cfg, tx, mesh, seed=0)
  step_cfg = ts.StepConfig(micro_batches=1, logprob_chunk=args.chunk, loss_positions=gather,
                           on_policy=gather and not recompute)
  batch = {k: batch[k] for k in ts.step_batch_keys(loss_lib.LossConfig(), step_cfg)}
  jitted = ts.make_train_step(cfg, loss_lib.LossConfig(), step_cfg, tx, mesh, shardings)
  logprobs = ts.jit_logprob_fn(cfg, step_cfg, mesh, shardings.params)
  keys = ts.logprob_batch_keys(step_cfg)

  def step(state, batch):
    if recompute:
      batch = {**batch, "old_logprobs": logprobs(state.params, {k: batch[k] for k in keys})}
    return jitted(state, batch)
  fn = ts.train_step_fn(cfg, loss_lib.LossConfig(), step_cfg, tx)
  flops = jax.jit(fn).lower(state, batch).compile().cost_analysis().get("flops", 0.0)
  base = rss_mb()
  state, _ = step(state, batch)  # compile + warm-up
  times = []
  for _ in range(args.steps):
    t = time.perf_counter()
    state, m = step(state, batch)
    jax.block_until_ready(m)
    times.append(time.perf_counter() - t)
  dt = float(np.median(times))
  peak = matmul_flops_per_s()
  where = "loss slots only" if gather else "every slot"
  where += ", old log-probs recomputed" if recompute else ""
  return {"impl": f"carr_jax train_step, logits at {where} (jax {jax.__version__})",
          "tokens_per_s": args.rows * args.seq / dt, "step_s": dt, "flops": flops,
          "achieved_flops_per_s": flops / dt, "machine_matmul_flops_per_s": peak,
          "peak_step_mb": peak_mb() - base}


def run_torch(args) -> dict:
  import torch
  import transformers
  model, c = hf_qwen3("bench_50m")
  tokens, mask, adv, old = (torch.from_numpy(x) for x in make_batch(
      args.rows, args.seq, c.vocab_size, args.gen_fraction))
  tokens = tokens.long()
  opt = torch.optim.AdamW(model.parameters(), lr=1e-6, betas=(0.9, 0.98), weight_decay=0.1)

  def step():
    opt.zero_grad(set_to_none=True)
    logits = model(input_ids=tokens).logits  # [R, S, V]
    logp = torch.log_softmax(logits.float(), -1).gather(
        -1, torch.roll(tokens, -1, 1).unsqueeze(-1)).squeeze(-1)
    ratio = torch.exp(torch.clamp(logp - old, -20, 20))
    per_token = -torch.min(ratio * adv, torch.clamp(ratio, 0.8, 1.28) * adv)
    loss = (per_token * mask).sum() / mask.sum()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
  base = rss_mb()
  step()
  times = [_timed(step) for _ in range(args.steps)]
  dt = float(np.median(times))
  return {"impl": f"transformers {transformers.__version__} + torch {torch.__version__} GRPO",
          "tokens_per_s": args.rows * args.seq / dt, "step_s": dt,
          "peak_step_mb": peak_mb() - base}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rows", type=int, default=4)
  parser.add_argument("--seq", type=int, default=512)
  parser.add_argument("--chunk", type=int, default=512)
  parser.add_argument("--steps", type=int, default=3)
  parser.add_argument("--gen_fraction", type=float, default=0.7)
  parser.add_argument("--old_logprobs_ab", action="store_true",
                      help="only the on-policy step vs the step after a recomputation")
  parser.add_argument("--side", choices=["jax", "jax_gather", "jax_recompute", "torch"],
                      help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.side:
    result = (run_torch(args) if args.side == "torch"
              else run_jax(args, gather=args.side != "jax",
                           recompute=args.side == "jax_recompute"))
    print(json.dumps(result))
    return
  if args.old_logprobs_ab:
    results = run_sides(__file__, ["jax_gather", "jax_recompute"], sys.argv[1:])
    print_comparison(results, "jax_gather", "jax_recompute")
    return
  results = run_sides(__file__, ["jax", "jax_gather", "torch"], sys.argv[1:])
  print_comparison(results)
  print_ratio(results, "jax_gather", "torch")
  print_ratio(results, "jax_gather", "jax")
  j = results["jax"]
  print(f"carr_jax step: {j['flops'] / 1e9:.1f} GFLOP, {j['achieved_flops_per_s'] / 1e9:.1f} "
        f"GFLOP/s = {j['achieved_flops_per_s'] / j['machine_matmul_flops_per_s']:.1%} of the "
        f"measured fp32 matmul peak ({j['machine_matmul_flops_per_s'] / 1e9:.1f} GFLOP/s)")


if __name__ == "__main__":
  main()
