"""Does a policy follow the page? The held-out set with every deciding page swapped.

    python -m lab.probes.page_swap --config lab/configs/lookup_cpu.py:main \
        --checkpoint RUN/checkpoints --out RUN/page_swap [--samples 4]

Evaluates the policy (`carr_jax.evaluate`'s loop: the rollout engine, tools and judge of the
config) on the reference world's held-out questions that the RL job evaluates (the first
`train.eval_questions`), built with `world.swap_eval_pages`: each question's thing is of the
other kind, so its page states the other answer and the gold follows the page. An answer that
follows the page is right there; one that takes the relation's usual kind, or remembers the
unswapped page, is not. It writes OUT/follow.json (the comparisons' report reads RUN/page_swap/follow.json)
and prints one line,

    page_swap follow=<float> follow_plain=<float> follow_evidence_only=<float> n=<questions>

follow_plain: on the questions whose unswapped answer is the relation's usual kind (the plain
split), the share of samples answering what the swapped page states, against the shortcut;
follow_evidence_only: the same on the evidence-only split, where the swapped page now states
the usual kind. Unlike the shortcut rate, no reward pays for this directly: a policy that
always cites a page and answers the usual kind scores 0 on the plain split.
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any, Sequence

import numpy as np

from carr_common.vocab import is_correct
from carr_jax import cli
from carr_jax.jobs import components
from lab.shortcuts import FOLLOW_FILE


def follow_rates(rows: Sequence[dict], plain: Sequence[bool]) -> dict[str, Any]:
  """Follow rates from results.jsonl rows of the swapped evaluation and each question's
  unswapped split (`plain[i]`: its usual kind was its answer); rows in question order."""
  follow = np.array([np.mean([is_correct(s["outcome"]) for s in r["samples"]]) for r in rows],
                    np.float64)  # [Q]
  plain = np.asarray(plain, bool)
  share = lambda sel: float(follow[sel].mean()) if sel.any() else float("nan")  # noqa: E731
  return {"follow": share(np.ones_like(plain)), "follow_plain": share(plain),
          "follow_evidence_only": share(~plain), "per_question_follow": follow.tolist(),
          "plain": plain.tolist(), "n": len(rows),
          "samples": len(rows[0]["samples"]) if rows else 0}


def swap_config(config: Any) -> Any:
  """The config with the swapped held-out pages."""
  if config.world.style != "reference":
    raise cli.UsageError(f"the page swap needs the reference world, got world.style="
                         f"{config.world.style!r}")
  swapped = config.copy_and_resolve_references()
  swapped.world.swap_eval_pages = True
  return swapped


def _probe(args: argparse.Namespace) -> None:
  from carr_jax.jobs import tasks as data_lib
  from carr_jax.jobs.evaluate import EvalOptions, run_evaluations
  config = swap_config(args.config)
  n = components.train_config(config).eval_questions
  swapped = data_lib.load_tasks(config)[1][:n]
  run_evaluations(config, EvalOptions(out=args.out, data="source:eval",
                                      checkpoint=args.checkpoint, samples=args.samples,
                                      max_questions=n, questions_in_flight=n))
  rows = {}
  with open(os.path.join(args.out, "results.jsonl"), encoding="utf-8") as f:
    for line in f:
      row = json.loads(line)
      rows[row["id"]] = row
  # a swapped question's shortcut flag is flipped: plain before the swap = not plain after
  plain = [not r["metadata"]["gold"]["shortcut"] for r in swapped]
  rates = follow_rates([rows[r["id"]] for r in swapped], plain)
  with open(os.path.join(args.out, FOLLOW_FILE), "w", encoding="utf-8") as f:
    json.dump(rates, f)
  print(f"page_swap follow={rates['follow']:.4f} follow_plain={rates['follow_plain']:.4f} "
        f"follow_evidence_only={rates['follow_evidence_only']:.4f} n={rates['n']}")


def parser() -> argparse.ArgumentParser:
  p = cli.parser("python -m lab.probes.page_swap", __doc__.split("\n")[0],
                 config="The run's config (lab/configs/lookup_cpu.py:main or :stale).")
  p.add_argument("--checkpoint", required=True, help="checkpoint root or one step directory")
  p.add_argument("--out", required=True, help="output directory (resumes when rerun)")
  p.add_argument("--samples", type=int, default=4, help="samples per question")
  return p


if __name__ == "__main__":
  raise SystemExit(cli.run(_probe, parser()))
