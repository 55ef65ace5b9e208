"""Held-out accuracy of a run: per-question scores, their change, and the run's closing summary.

The trainer evaluates the policy on the same held-out questions (k samples each, the rollout
temperature) before its first step and every `train.eval_every` steps, and keeps each
evaluation's per-question accuracy in `workdir/eval/step_<N>.json`, so a resumed run still
knows where it started. Accuracy here is avg@k: the mean over questions of the share of a
question's k samples whose answer the judge accepts (outcome reward 1). The standard error of
the change is that of the mean of per-question differences (paired: the same questions at
both ends), sqrt(var(d) / n).
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Sequence

import numpy as np

from carr_common.vocab import TOOL_KINDS, is_correct
from carr_jax.rl import step_stats
from carr_jax.runs import metrics as metrics_lib
from judge.backends import named_by_answer


def per_question_accuracy(breakdowns: Sequence[Any], num_questions: int) -> np.ndarray:
  """[Q*k] breakdowns in question-major order -> [Q] share of correct samples per question."""
  outcome = np.array([is_correct(b.outcome_reward) for b in breakdowns], np.float64)
  return outcome.reshape(num_questions, -1).mean(axis=1)


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


def change(start: np.ndarray, end: np.ndarray) -> dict:
  """Paired comparison of two [Q] per-question accuracies."""
  diff = np.asarray(end, np.float64) - np.asarray(start, np.float64)
  n = len(diff)
  se = float(np.std(diff, ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
  return {"start": float(np.mean(start)), "end": float(np.mean(end)),
          "difference": float(np.mean(diff)), "standard_error": se, "n": n}


def shortcut_flags(records: Sequence[dict]) -> list[bool]:
  """[Q] each record's gold `shortcut` flag (False where it has none: evidence-only)."""
  return [bool((r.get("metadata") or {}).get("gold", {}).get("shortcut")) for r in records]


def save(workdir: str, step: int, accuracy: np.ndarray, samples: int, metrics: dict,
         shortcut: Sequence[bool] = ()) -> None:
  """workdir/eval/step_<step>.json: per-question accuracy [Q], the questions' gold shortcut
  flags [Q] (the evidence-only split is where they are False) and the metrics."""
  directory = os.path.join(workdir, "eval")
  os.makedirs(directory, exist_ok=True)
  row = {"step": step, "samples": samples, "per_question_accuracy": accuracy.tolist(),
         "per_question_shortcut": list(shortcut), "metrics": metrics}
  with open(os.path.join(directory, f"step_{step}.json"), "w", encoding="utf-8") as f:
    json.dump(row, f)


def load_all(workdir: str) -> list[dict]:
  """Every saved evaluation of the run, by step."""
  directory = os.path.join(workdir, "eval")
  if not os.path.isdir(directory):
    return []
  rows = []
  for name in os.listdir(directory):
    if name.startswith("step_") and name.endswith(".json"):
      with open(os.path.join(directory, name), encoding="utf-8") as f:
        rows.append(json.load(f))
  return sorted(rows, key=lambda r: r["step"])


def summary_line(start: float, end: float, n: int, samples: int) -> str:
  """The run's last console line."""
  return f"heldout_accuracy start={start:.4f} end={end:.4f} n={n} samples={samples}"


def step_line(label: str, metrics: dict) -> str:
  """`first step: reward_mean 0.1250 | outcome ... | pass@G ... | tool_calls 1.50` (nan when
  missing); pass@G is the share of the step's groups with at least one correct episode."""
  return (f"{label}: reward_mean {metrics.get('rollout/reward_mean', float('nan')):.4f} | "
          f"outcome {metrics.get('judge/outcome_reward_mean', float('nan')):.4f} | "
          f"pass@G {metrics.get('rollout/pass_at_group', float('nan')):.4f} | "
          f"rubric {metrics.get('judge/rubric_reward_mean', float('nan')):.4f} | "
          f"tool_calls {metrics.get('rollout/tool_calls', float('nan')):.2f}")


def cited_agreement(metrics: dict) -> float:
  """`eval/answer_agrees_with_cited` of one evaluation; nan where it lacks it or where no answer
  cited a received page (the trainer logs 0 there, beside `eval/answers_citing_received` 0)."""
  if metrics.get("eval/answers_citing_received") == 0:
    return math.nan
  return float(metrics.get("eval/answer_agrees_with_cited", math.nan))


def _measure(metrics: dict, key: str) -> str:
  """One held-out measure as printed: an agreement share with no cited answer is none."""
  if key == "eval/answer_agrees_with_cited" and math.isnan(cited_agreement(metrics)):
    return "none (no answer cited a received page)"
  return f"{metrics[key]:.4f}"


def subset_lines(first: dict, final: dict) -> list[str]:
  """Start -> end of the held-out subsets' measures that both evaluations hold."""
  names = (("eval/evidence_only_accuracy", "evidence-only accuracy"),
           ("eval/evidence_only_shortcut_answer", "evidence-only answers naming the shortcut"),
           ("eval/shortcut_admitting_rate", "shortcut rate"),
           ("eval/answer_agrees_with_cited", "answers agreeing with the page they cite"),
           ("eval/tool_calls", "tool calls per episode"),
           *((f"eval/tool_calls_{k}", f"{k} calls per episode") for k in TOOL_KINDS))
  return [f"held-out {label}: {_measure(first, key)} -> {_measure(final, key)}"
          for key, label in names if key in first and key in final]


def closing_summary(config: Any, workdir: str, steps_done: int, last: dict,
                    first: dict | None = None) -> list[str]:
  """The lines a run ends with: what was trained, the key metrics of its first and last step
  (`first`: this process's first step), where the outputs are, held-out accuracy (last)."""
  lines = [f"trained {config.model.preset} with reward.mode={config.reward.mode} for "
           f"{steps_done} steps on data.source={config.data.source}"]
  if first:
    lines.append(step_line("first step", first))
  lines.append(step_line("last step", last))
  lines += metrics_lib.output_lines(workdir)
  evals = load_all(workdir)
  if len(evals) >= 2:
    first_eval, final = evals[0], evals[-1]
    c = change(np.array(first_eval["per_question_accuracy"]),
               np.array(final["per_question_accuracy"]))
    lines += subset_lines(first_eval["metrics"], final["metrics"])
    lines.append(f"held-out avg@{final['samples']} accuracy: step {first_eval['step']} "
                 f"{c['start']:.4f} -> step {final['step']} {c['end']:.4f} "
                 f"(change {c['difference']:+.4f} +- {c['standard_error']:.4f} s.e.)")
    lines.append(summary_line(c["start"], c["end"], c["n"], final["samples"]))
  return lines
