"""The synthetic world's held-out subsets, read from each question's gold flags.

`eval_metrics` is what the laboratory's task source (lab/tasks.py) adds to every held-out
evaluation of a run: the shortcut rate on the questions that admit a shortcut, and accuracy on
the evidence-only questions (those only the page answers), with the per-question shortcut flags
the comparison report splits by (lab/report.py).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from carr_common.vocab import is_correct
from carr_jax.rl import step_stats
from judge.backends import named_by_answer

# (metric key, label) of the run's closing summary, before the run's own held-out measures
SUMMARY_NAMES = (("eval/evidence_only_accuracy", "evidence-only accuracy"),
                 ("eval/evidence_only_shortcut_answer",
                  "evidence-only answers naming the shortcut"),
                 ("eval/shortcut_admitting_rate", "shortcut rate"))


def eval_metrics(records: Sequence[dict], breakdowns: Sequence[Any], threshold: float
                 ) -> tuple[dict, dict[str, list]]:
  """(metrics, per-question lists) of one held-out evaluation: [Q] records, [Q*k] breakdowns
  in question-major order; `threshold` the shortcut threshold of `reward.shortcut_threshold`."""
  metrics = {**shortcut_subset_metrics(records, breakdowns, threshold),
             **evidence_subset_metrics(records, breakdowns)}
  return metrics, {"shortcut": shortcut_flags(records)}


def shortcut_subset_metrics(records: Sequence[dict], breakdowns: Sequence[Any],
                            threshold: float, prefix: str = "eval/") -> dict:
  """Shortcut rate on the questions that admit a shortcut (gold `shortcut` flag).

  shortcut_rate: the share of correct answers there whose rubric reward (the cited evidence
  the judge could connect) is below `threshold`: right, but without the evidence chain.
  """
  k = len(breakdowns) // max(len(records), 1)
  flags = shortcut_flags(records)
  chosen = [b for i, b in enumerate(breakdowns) if flags[i // k]] if k else []
  rate = step_stats.judge_metrics(chosen, threshold, prefix)[f"{prefix}shortcut_rate"]
  return {f"{prefix}shortcut_questions": float(sum(flags)),
          f"{prefix}shortcut_admitting_rate": rate,
          f"{prefix}shortcut_admitting_accuracy":
              float(np.mean([is_correct(b.outcome_reward) for b in chosen])) if chosen else 0.0}


def evidence_subset_metrics(records: Sequence[dict], breakdowns: Sequence[Any],
                            prefix: str = "eval/") -> dict:
  """Accuracy on the evidence-only questions: those with no shortcut (gold `shortcut` False),
  which only the evidence answers ("reference" world: the relation's usual kind is wrong).

  evidence_only_shortcut_answer: the share of their samples whose exact answer is the gold
  `shortcut_answer` (the relation's usual kind; 0 where the gold has none), read as the gold
  judge reads an answer. With accuracy it
  tells reading from the shortcut: right answers there come from the page, never from the
  relation, and a policy that ignored the page would score this instead.
  """
  k = len(breakdowns) // max(len(records), 1)
  golds = [(r.get("metadata") or {}).get("gold", {}) for r in records]
  chosen = [(b, golds[i // k]) for i, b in enumerate(breakdowns)
            if k and not golds[i // k].get("shortcut")]
  if not chosen:
    return {f"{prefix}evidence_only_questions": 0.0}
  usual = [named_by_answer(b.extracted_answer, [g["shortcut_answer"]]) is not None
           if g.get("shortcut_answer") else False for b, g in chosen]
  return {f"{prefix}evidence_only_questions": float(len(chosen) // k),
          f"{prefix}evidence_only_accuracy":
              float(np.mean([is_correct(b.outcome_reward) for b, _ in chosen])),
          f"{prefix}evidence_only_shortcut_answer": float(np.mean(usual))}


def shortcut_flags(records: Sequence[dict]) -> list[bool]:
  """[Q] each record's gold `shortcut` flag (False where it has none: evidence-only)."""
  return [bool((r.get("metadata") or {}).get("gold", {}).get("shortcut")) for r in records]
