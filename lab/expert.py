"""Entry point: `python -m lab.expert`; flags and `main()` only.

The scripted expert is `lab.world.expert`, whose docstring documents this command.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys

from carr_jax import cli
from lab.world import expert as lib
from lab.world.expert import ExpertConfig, expert_trajectories, search_examples
from rollout import chat


def parser() -> argparse.ArgumentParser:
  p = cli.parser("python -m lab.expert", lib.__doc__.split("\n")[0],
                 config="Config whose data section builds the world, e.g. "
                 "lab/configs/demo_cpu.py:sft.")
  a = p.add_argument
  a("--out", required=True, help="output JSONL of expert trajectories")
  a("--split", choices=["train", "eval"], default="train", help="which split of questions")
  a("--search-results", type=int, default=ExpertConfig.search_results,
    help=f"`num` of each search (default: {ExpertConfig.search_results})")
  a("--find", action=argparse.BooleanOptionalAction, default=ExpertConfig.use_find,
    help="confirm each hop with browser.find")
  a("--search-examples", type=int, default=0, metavar="K",
    help="instead of episodes, write the copy warm-up examples (`search_examples`) of the "
    "expert's episodes on every question of the K worlds seeded world.seed+1 .. +K "
    "(never the configured world itself)")
  return p


def _write_search_examples(args: argparse.Namespace, fmt: chat.ChatFormat,
                           cfg: ExpertConfig) -> None:
  from lab.tasks import world_tasks
  from rollout.tools.corpus import CorpusBackend
  from rollout.trajectory import write_jsonl
  world_cfg = args.config.world
  rows = []
  for _ in range(args.search_examples):
    world_cfg.seed += 1
    train, evals, corpus = world_tasks(world_cfg)
    episodes = asyncio.run(expert_trajectories(train + evals, CorpusBackend.from_records(corpus),
                                               fmt, cfg))
    rows += [ex for ep in episodes for ex in search_examples(ep, fmt)]
  write_jsonl(args.out, rows)
  print(json.dumps({"examples": len(rows), "worlds": args.search_examples,
                    "tokens_mean": sum(len(r["token_ids"]) for r in rows) / max(len(rows), 1)}))


def _write_episodes(args: argparse.Namespace) -> None:
  from carr_jax.jobs import components
  from carr_jax.jobs import tasks as data_lib
  from judge import Judge, JudgeConfig
  from rollout.tools.corpus import CorpusBackend
  from rollout.trajectory import write_jsonl
  config = args.config
  fmt = chat.ChatFormat(components.tokenizer(config))
  cfg = ExpertConfig(search_results=args.search_results, use_find=args.find)
  if args.search_examples:
    return _write_search_examples(args, fmt, cfg)
  train, evals, corpus = data_lib.load_tasks(config)
  records = train if args.split == "train" else evals
  backend = CorpusBackend.from_records(corpus)

  async def run():
    trajs = await expert_trajectories(records, backend, fmt, cfg)
    judge = Judge(JudgeConfig(backend="gold", use_cache=False))
    scores = await judge.score_batch(list(zip(trajs, records)))
    return [{**t, "judge": b.to_dict()} for t, b in zip(trajs, scores)]
  rows = asyncio.run(run())
  write_jsonl(args.out, rows)
  n = max(len(rows), 1)
  print(json.dumps({
      "episodes": len(rows),
      "outcome_reward_mean": sum(r["judge"]["outcome_reward"] for r in rows) / n,
      "rubric_reward_mean": sum(r["judge"]["rubric_reward"] for r in rows) / n,
      "tokens_mean": sum(len(r["token_ids"]) for r in rows) / n,
      "tokens_max": max((len(r["token_ids"]) for r in rows), default=0),
      "generated_tokens_mean": sum(sum(r["loss_mask"]) for r in rows) / n}))


def main(argv: list[str] | None = None) -> int:
  return cli.run(_write_episodes, parser(), argv)


if __name__ == "__main__":
  sys.exit(main())
