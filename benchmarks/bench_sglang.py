"""Rollout throughput: the real SGLang CPU server (HTTP) vs the in-process JAX engine.

  python benchmarks/bench_sglang.py [--new-tokens 64] [--prompt-len 64] [--streams 1 8]
      [--rounds 3]

Both engines serve the same tiny random fp32 Qwen3 checkpoint (real 151,936 vocab) and
generate greedily, without stop tokens, so every request yields exactly --new-tokens tokens.
For each concurrency level the script runs one warm-up round (JAX compiles; SGLang fills its
caches), then times --rounds rounds of `streams` concurrent requests (fresh random prompts
each round) and prints the median generated tokens/s for both, their ratio (SGLang / JAX),
and the fraction of greedy tokens the two engines agree on (a cross-check of the two
implementations, not a speed figure).
The sides run one after the other (the server is stopped before the JAX side starts).
Needs the SGLang venv (scripts/setup_sglang_cpu.sh).  Not a test.
"""
from __future__ import annotations

import argparse
import asyncio
import pathlib
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from carr_jax.model import hf_io  # noqa: E402
from carr_jax.model.engine import JaxEngine  # noqa: E402
from rollout.engines import SamplingParams, SGLangEngine  # noqa: E402
from rollout.engines import sglang_launcher  # noqa: E402
from tests.sglang_server import make_tiny_qwen3  # noqa: E402


async def timed_round(engine, prompts, params) -> tuple[float, list]:
  start = time.perf_counter()
  results = await engine.generate_many(prompts, params)
  elapsed = time.perf_counter() - start
  bad = [r for r in results if not r.ok]
  if bad:
    raise RuntimeError(f"{type(engine).__name__}: {bad[0].finish_reason}: {bad[0].error}")
  return elapsed, results


async def measure(engine, rounds_of_prompts, params) -> tuple[float, list]:
  """Median tokens/s over the timed rounds after the first (warm-up) round; last results.

  Every round has fresh prompts, so SGLang's prefix cache cannot skip a prefill.
  """
  await timed_round(engine, rounds_of_prompts[0], params)
  times = []
  for prompts in rounds_of_prompts[1:]:
    elapsed, results = await timed_round(engine, prompts, params)
    times.append(elapsed)
  return sum(len(r.output_ids) for r in results) / float(np.median(times)), results


async def run_sglang(url: str, workloads, params) -> list[tuple[float, list]]:
  engine = SGLangEngine(url, max_concurrency=max(len(w[0]) for w in workloads))
  try:
    await engine.wait_until_ready()
    return [await measure(engine, rounds, params) for rounds in workloads]
  finally:
    await engine.close()


async def run_jax(model_dir: pathlib.Path, workloads, params) -> list[tuple[float, list]]:
  cfg, jax_params = hf_io.load_hf(str(model_dir))
  engine = JaxEngine(jax_params, cfg, max_batch=max(len(w[0]) for w in workloads))
  try:
    return [await measure(engine, rounds, params) for rounds in workloads]
  finally:
    await engine.close()


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--new-tokens", type=int, default=64)
  p.add_argument("--prompt-len", type=int, default=64)
  p.add_argument("--streams", type=int, nargs="+", default=[1, 8])
  p.add_argument("--rounds", type=int, default=3, help="timed rounds; the median is shown")
  args = p.parse_args()
  rng = np.random.default_rng(0)
  workloads = [[rng.integers(0, 151_643, size=(n, args.prompt_len)).tolist()
                for _ in range(args.rounds + 1)] for n in args.streams]
  params = SamplingParams(temperature=0.0, max_new_tokens=args.new_tokens, stop_token_ids=())
  with tempfile.TemporaryDirectory() as tmp:
    model_dir = make_tiny_qwen3(pathlib.Path(tmp) / "tiny", seed=0)
    # One side at a time: an idle SGLang server still busy-polls a core.
    server = sglang_launcher.launch(str(model_dir), dtype="float32",
                                    max_running_requests=max(8, max(args.streams)))
    try:
      sglang = asyncio.run(run_sglang(server.url, workloads, params))
    finally:
      server.stop()
    jax_side = asyncio.run(run_jax(model_dir, workloads, params))
  print(f"tiny Qwen3 (D=64, L=2, V=151936, fp32), prompt {args.prompt_len}, "
        f"{args.new_tokens} new tokens/request, greedy")
  print(f"{'streams':>7} {'sglang tok/s':>13} {'jax tok/s':>10} {'sglang/jax':>11} "
        f"{'greedy agree':>13}")
  for streams, (sg, sg_res), (jx, jx_res) in zip(args.streams, sglang, jax_side):
    agree = np.mean([a == b for x, y in zip(sg_res, jx_res)
                     for a, b in zip(x.output_ids, y.output_ids)])
    print(f"{streams:>7} {sg:>13.1f} {jx:>10.1f} {sg / jx:>10.2f}x {agree:>13.3f}")


if __name__ == "__main__":
  main()
