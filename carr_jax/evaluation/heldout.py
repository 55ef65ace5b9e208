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
from carr_jax.runs import metrics as metrics_lib


def per_question_accuracy(breakdowns: Sequence[Any], num_questions: int) -> np.ndarray:
  """[Q*k] breakdowns in question-major order -> [Q] share of correct samples per question."""
  outcome = np.array([is_correct(b.outcome_reward) for b in breakdowns], np.float64)
  return outcome.reshape(num_questions, -1).mean(axis=1)


def change(start: np.ndarray, end: np.ndarray) -> dict:
  """Paired comparison of two [Q] per-question accuracies."""
  diff = np.asarray(end, np.float64) - np.asarray(start, np.float64)
  n = len(diff)
  se = float(np.std(diff, ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
  return {"start": float(np.mean(start)), "end": float(np.mean(end)),
          "difference": float(np.mean(diff)), "standard_error": se, "n": n}


def save(workdir: str, step: int, accuracy: np.ndarray, samples: int, metrics: dict,
         per_question: dict[str, Sequence] | None = None) -> None:
  """workdir/eval/step_<step>.json: per-question accuracy [Q], the task source's per-question
  lists [Q] (`per_question`, name -> list, saved as `per_question_<name>`; e.g. the CPU
  laboratory's shortcut flags) and the metrics."""
  directory = os.path.join(workdir, "eval")
  os.makedirs(directory, exist_ok=True)
  row = {"step": step, "samples": samples, "per_question_accuracy": accuracy.tolist(),
         **{f"per_question_{k}": list(v) for k, v in (per_question or {}).items()},
         "metrics": metrics}
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


def subset_lines(first: dict, final: dict, source_names: Sequence[tuple[str, str]] = ()
                 ) -> list[str]:
  """Start -> end of the held-out measures that both evaluations hold: the task source's
  (`source_names`, (metric key, label) pairs), then the run's own."""
  names = (*source_names,
           ("eval/answer_agrees_with_cited", "answers agreeing with the page they cite"),
           ("eval/tool_calls", "tool calls per episode"),
           *((f"eval/tool_calls_{k}", f"{k} calls per episode") for k in TOOL_KINDS))
  return [f"held-out {label}: {_measure(first, key)} -> {_measure(final, key)}"
          for key, label in names if key in first and key in final]


def closing_summary(trained: str, workdir: str, last: dict, first: dict | None = None,
                    source_names: Sequence[tuple[str, str]] = ()) -> list[str]:
  """The lines a run ends with: what was `trained` (a line), the key metrics of its first and
  last step (`first`: this process's first step), where the outputs are, held-out measures
  (the task source's `source_names` among them) and accuracy (last)."""
  lines = [trained]
  if first:
    lines.append(step_line("first step", first))
  lines.append(step_line("last step", last))
  lines += metrics_lib.output_lines(workdir)
  evals = load_all(workdir)
  if len(evals) >= 2:
    first_eval, final = evals[0], evals[-1]
    c = change(np.array(first_eval["per_question_accuracy"]),
               np.array(final["per_question_accuracy"]))
    lines += subset_lines(first_eval["metrics"], final["metrics"], source_names)
    lines.append(f"held-out avg@{final['samples']} accuracy: step {first_eval['step']} "
                 f"{c['start']:.4f} -> step {final['step']} {c['end']:.4f} "
                 f"(change {c['difference']:+.4f} +- {c['standard_error']:.4f} s.e.)")
    lines.append(summary_line(c["start"], c["end"], c["n"], final["samples"]))
  return lines
