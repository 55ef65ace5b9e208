"""Agent-loop overhead against a real SGLang server: full episodes vs raw /generate.

Ours: `rollout.agent.rollout_groups` runs multi-turn episodes on the synthetic world (BM25
tools, chat template, parsing, observations) against a real SGLang CPU server serving a tiny
random Qwen3. A random policy never writes a valid tool call, so `stop_on_ill_formed=False`
keeps every episode going turn after turn (each ill-formed turn gets an error observation)
until its context budget: real multi-turn traffic. Peer, measured in the same run on the
same server: raw `/generate` of the same token volume, i.e. one request per episode with the
episode's first prompt and `max_new_tokens` = the tokens that episode generated, same
concurrency. Reported: generated tokens/s of both and ours / peer (target >= 90%).

    .venv/bin/python benchmarks/bench_agent_sglang.py [--episodes 8 --rounds 3]
Needs the SGLang venv (scripts/setup_sglang_cpu.sh). Not a test.
"""
from __future__ import annotations

import argparse
import asyncio
import pathlib
import statistics
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from lab.world import build_world  # noqa: E402
from rollout.agent import RolloutConfig, rollout_groups  # noqa: E402
from rollout.chat import ChatFormat  # noqa: E402
from rollout.engines import SamplingParams, SGLangEngine  # noqa: E402
from rollout.engines import sglang_launcher  # noqa: E402
from tests.sglang_server import make_tiny_qwen3  # noqa: E402
from tests.carr_jax.test_tokenizer import qwen3_tokenizer  # noqa: E402


async def one_round(engine, fmt, backend, records, cfg):
  start = time.perf_counter()
  groups = await rollout_groups(engine, fmt, backend, records, 1, cfg, progress=False)
  episodes_s = time.perf_counter() - start
  trajs = [g[0] for g in groups]
  generated = [t["timings"]["generated_tokens"] for t in trajs]
  prompts = [fmt.prompt_ids(r["input_messages"], r["tools"]) for r in records]
  start = time.perf_counter()
  raw = await asyncio.gather(*(
      engine.generate(p, SamplingParams(temperature=cfg.temperature, max_new_tokens=n,
                                        stop_token_ids=()))
      for p, n in zip(prompts, generated)))
  raw_s = time.perf_counter() - start
  assert all(r.ok and len(r.output_ids) == n for r, n in zip(raw, generated))
  turns = statistics.mean(t["timings"]["turns"] for t in trajs)
  return sum(generated) / episodes_s, sum(generated) / raw_s, turns


async def main_async(args):
  world = build_world(0, 40, max(args.episodes, 8))
  records = (world.train + world.eval)[:args.episodes]
  backend = world.corpus_backend()
  fmt = ChatFormat(qwen3_tokenizer())
  cfg = RolloutConfig(temperature=1.0, max_turn_tokens=args.turn_tokens,
                      max_context_tokens=args.context, max_tool_calls=16,
                      stop_on_ill_formed=False, concurrency=args.episodes)
  model = make_tiny_qwen3(pathlib.Path(tempfile.mkdtemp()) / "policy", seed=0)
  server = sglang_launcher.launch(str(model), dtype="float32", context_length=args.context,
                                  max_total_tokens=args.context * args.episodes,
                                  max_running_requests=args.episodes, timeout=300.0)
  engine = SGLangEngine(server.url)
  try:
    await one_round(engine, fmt, backend, records, cfg)  # warm-up
    rows = [await one_round(engine, fmt, backend, records, cfg) for _ in range(args.rounds)]
  finally:
    await engine.close()
    server.stop()
  ours = statistics.median(r[0] for r in rows)
  peer = statistics.median(r[1] for r in rows)
  turns = statistics.mean(r[2] for r in rows)
  print(f"episodes: {args.episodes} concurrent, {turns:.1f} turns each on average")
  print(f"agent loop (full episodes)  {ours:8.1f} generated tok/s")
  print(f"raw /generate (same volume) {peer:8.1f} generated tok/s")
  print(f"ours / peer: {ours / peer:.1%}")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--episodes", type=int, default=8)
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--turn-tokens", type=int, default=48)
  parser.add_argument("--context", type=int, default=1024)
  asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
  main()
