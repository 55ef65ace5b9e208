"""Forward+backward throughput and peak memory: our Flax Qwen3 vs transformers (PyTorch).

Same ~50M-parameter Qwen3 config (preset `bench_50m`), same batch, fp32, same CPU, one run:
each side runs in its own subprocess (so peak RSS is its own), computes next-token cross
entropy over full logits and its gradient w.r.t. all parameters, `--steps` timed iterations
after `--warmup` untimed ones. Prints one line per side and the ratio.

    .venv/bin/python benchmarks/bench_model.py [--batch 4 --seq 512 --steps 5]

Peak memory = the process's max RSS (ru_maxrss) minus its RSS after building the model and
batch, i.e. what the step itself adds (activations, gradients, workspace).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from common import REPO, hf_qwen3, peak_mb, print_comparison, rss_mb, run_sides


def run_jax(args) -> dict:
  sys.path.insert(0, REPO)
  import jax
  import jax.numpy as jnp
  import numpy as np
  from carr_jax.model import qwen3 as M
  from carr_jax.model.config import get_preset
  cfg = get_preset("bench_50m")
  params = M.init_params(cfg, jax.random.key(0))
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (args.batch, args.seq)), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(args.seq), tokens.shape)
  segs = jnp.ones_like(tokens)

  def loss(p):
    logits = M.forward_logits(p, cfg, tokens, pos, segs)[:, :-1]
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1))
  step = jax.jit(jax.value_and_grad(loss))
  base = rss_mb()
  for _ in range(args.warmup):
    jax.block_until_ready(step(params))
  t = time.perf_counter()
  for _ in range(args.steps):
    jax.block_until_ready(step(params))
  dt = (time.perf_counter() - t) / args.steps
  return {"impl": f"carr_jax (jax {jax.__version__})", "tokens_per_s": args.batch * args.seq / dt,
          "step_s": dt, "peak_step_mb": peak_mb() - base}


def run_torch(args) -> dict:
  import numpy as np
  import torch
  import transformers
  model, c = hf_qwen3("bench_50m")
  rng = np.random.default_rng(0)
  tokens = torch.tensor(rng.integers(0, c.vocab_size, (args.batch, args.seq)))

  def step():
    model.zero_grad(set_to_none=True)
    out = model(input_ids=tokens, labels=tokens)
    out.loss.backward()
  base = rss_mb()
  for _ in range(args.warmup):
    step()
  t = time.perf_counter()
  for _ in range(args.steps):
    step()
  dt = (time.perf_counter() - t) / args.steps
  return {"impl": f"transformers {transformers.__version__} (torch {torch.__version__}, sdpa)",
          "tokens_per_s": args.batch * args.seq / dt, "step_s": dt,
          "peak_step_mb": peak_mb() - base}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batch", type=int, default=4)
  parser.add_argument("--seq", type=int, default=512)
  parser.add_argument("--steps", type=int, default=5)
  parser.add_argument("--warmup", type=int, default=2)
  parser.add_argument("--side", choices=["jax", "torch"], help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.side:
    print(json.dumps((run_jax if args.side == "jax" else run_torch)(args)))
    return
  results = run_sides(__file__, ["jax", "torch"], sys.argv[1:])
  print_comparison(results)


if __name__ == "__main__":
  main()
