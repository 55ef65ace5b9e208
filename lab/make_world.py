"""Writes the synthetic deep-search world to a directory.

  python -m lab.make_world --seed 0 --num-questions 200 --out world

Output: corpus.jsonl (one page per entity), train.jsonl and eval.jsonl (CaRR records with gold
annotations), manifest.json (sizes). Same arguments -> identical files.
"""
from __future__ import annotations

import argparse
import json

from lab.world import build_world, write_world


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python -m lab.make_world",
                              description=__doc__.splitlines()[0])
  a = p.add_argument
  a("--seed", type=int, default=0, help="world seed (default: 0)")
  a("--num-questions", type=int, required=True, help="questions, train and eval together")
  a("--num-entities", type=int, default=None, help="default: max(200, 2 * num_questions)")
  a("--eval-fraction", type=float, default=0.2, help="share of eval questions (default: 0.2)")
  a("--shortcut-fraction", type=float, default=0.25,
    help="share of questions whose last hop alone suggests the answer (default: 0.25)")
  a("--min-hops", type=int, default=2, help="fewest hops of a question (default: 2)")
  a("--max-hops", type=int, default=4, help="most hops of a question (default: 4)")
  a("--out", required=True, help="output directory")
  return p


def main(argv: list[str] | None = None) -> None:
  args = parser().parse_args(argv)
  num_entities = args.num_entities or max(200, 2 * args.num_questions)
  world = build_world(args.seed, num_entities, args.num_questions,
                      eval_fraction=args.eval_fraction,
                      shortcut_fraction=args.shortcut_fraction, min_hops=args.min_hops,
                      max_hops=args.max_hops)
  print(json.dumps(write_world(world, args.out), indent=2))


if __name__ == "__main__":
  main()
