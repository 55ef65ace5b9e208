"""The main job's rollout generation with the prompts' shared prefix computed once per batch
(`batch.prefix_multiple` 64, the config's) against whole prompts (0, the peer).

Both sides build the in-process engine `python -m carr_jax.train --config
lab/configs/lookup_cpu.py:main` builds (its model and world output vocabulary, 64 rows a
batch) over random weights of that model, and the same requests: a step's 8 training
questions x 8 samples rendered with the real Qwen3 chat template and tools (turn 1), then the
same prompts each followed by `--extra` random tokens of its own (turn 2's shape, where a tool
call and a page follow the prompt), sampled at temperature 1 with the agent's stop ids and
the config's 64 new tokens a turn (random weights rarely stop, so nearly every row decodes
all 64: an upper bound on the decoding a real turn does). Each side runs in its own process;
times are medians of `--rounds` rounds after one warm-up round (compiles). The sides' first
sampled tokens agree and their log-probs to float rounding (tests/carr_jax/test_engine_prefix.py
checks it).

    .venv/bin/python benchmarks/bench_engine_prefix.py [--rounds 5 --extra 96]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

from common import REPO, run_sides

SIDES = {"whole": 0, "shared": 64}  # side -> batch.prefix_multiple


def side(args) -> dict:
  sys.path.insert(0, REPO)
  import jax
  import numpy as np
  from carr_jax.jobs import components
  from carr_jax.jobs.tasks import load_tasks
  from carr_jax.model import qwen3
  from lab.configs import lookup_cpu
  from rollout import agent
  from rollout.chat import ChatFormat
  from tests.carr_jax.test_tokenizer import qwen3_tokenizer
  config = lookup_cpu.get_config("main")
  config.batch.prefix_multiple = SIDES[args.side]
  fmt = ChatFormat(qwen3_tokenizer())
  rollout_cfg = components.rollout_config(config)
  train = load_tasks(config)[0][:config.data.prompts_per_step]
  first = [fmt.prompt_ids(agent.initial_messages(r, rollout_cfg), agent.record_tools(r))
           for r in train for _ in range(config.data.group_size)]
  rng = np.random.default_rng(0)
  second = [p + rng.integers(0, 151_643, args.extra).tolist() for p in first]
  cfg, vocab = components.model_config(config), components.output_vocab(config)
  params = qwen3.init_params(cfg, jax.random.key(config.seed))
  engine = components.engine(config, params, cfg, "0", vocab)
  sampling = rollout_cfg.sampling(rollout_cfg.max_turn_tokens)
  loop = asyncio.new_event_loop()

  def one_round(prompts):
    start = time.perf_counter()
    results = loop.run_until_complete(engine.generate_many(prompts, sampling))
    return time.perf_counter() - start, results

  out = {"side": args.side, "rows": len(first), "prompt": len(first[0])}
  for name, prompts in (("turn1", first), ("turn2", second)):
    one_round(prompts)
    times, results = zip(*(one_round(prompts) for _ in range(args.rounds)))
    out[name] = {"s": statistics.median(times), "prefix": engine.prefix_lengths[-1],
                 "new_tokens": sum(len(r.output_ids) for r in results[0]),
                 "first_token": [r.output_ids[0] for r in results[0]],
                 "first_logprob": [r.logprobs[0] for r in results[0]]}
  loop.run_until_complete(engine.close())
  return out


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--side")  # whole | shared
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--extra", type=int, default=96)
  args, _ = parser.parse_known_args()
  if args.side:
    print(json.dumps(side(args)))
    return
  results = run_sides(__file__, list(SIDES), sys.argv[1:])
  whole, shared = results["whole"], results["shared"]
  for r in (whole, shared):
    for turn in ("turn1", "turn2"):
      t = r[turn]
      print(f"{r['side']:>7} {turn}: {t['s']:.3f} s for {r['rows']} rows "
            f"({t['new_tokens']} new tokens), shared prefix {t['prefix']}")
  for turn in ("turn1", "turn2"):
    same = sum(a == b for a, b in zip(whole[turn]["first_token"], shared[turn]["first_token"]))
    gap = max(abs(a - b) for a, b in zip(whole[turn]["first_logprob"],
                                         shared[turn]["first_logprob"]))
    speed = whole[turn]["s"] / shared[turn]["s"]
    print(f"ratio shared / whole (peer), {turn}: speed {speed:.2f}x; "
          f"first tokens equal {same}/{whole['rows']}, log-prob gap {gap:.1e}")


if __name__ == "__main__":
  main()
