"""The method comparisons' report: summary.json, a table and a plot from the run dirs.

    python -m carr_jax.shortcut_report OUT_DIR [--wall-s S] [--methods grpo,cgrpo,...]

reads OUT_DIR/<method>_seed<k>/ (each a `carr_jax.train` workdir: TensorBoard events in tb/,
held-out evaluations in eval/step_<N>.json) for every method of `--methods` (default grpo,
cgrpo; names in `METHODS`), the same seeds for each, and writes OUT_DIR/summary.json,
OUT_DIR/table.md and OUT_DIR/shortcuts.png. `scripts/reproduce_shortcuts.sh` (GRPO vs
C-GRPO) and `scripts/reproduce_chains.sh` (with the ablations) run it last.

Metrics (per run; summary.json holds, per method, one value per seed in seed order):
  heldout_accuracy   avg@k outcome accuracy on the held-out questions at the last evaluation
                     (k = train.eval_samples; the trainer's `eval/accuracy`).
  shortcut_rate      on the held-out questions that admit a shortcut (gold flag), the share of
                     correct answers whose rubric reward is below reward.shortcut_threshold:
                     right without the cited evidence (`eval/shortcut_admitting_rate`).
  tool_calls_first / tool_calls_last
                     mean tool calls per training episode over the first / last 10% of steps
                     (at least one step each; `rollout/tool_calls`).
  cited_pages        mean distinct cited URLs per held-out episode at the last evaluation
                     (`eval/cited_pages`).
  evidence_only_accuracy
                     avg@k accuracy on the held-out questions with no shortcut (gold flag):
                     on the reference world, those whose relation's usual kind is wrong, so
                     only the page the question's own link finds answers them.
  evidence_only_shortcut_answer
                     the share of those samples answering the relation's usual kind instead
                     (what a policy that ignores the page would answer): reading vs shortcut.
  answer_agrees_with_cited
                     among held-out answers that cite a page the agent received, the share
                     whose exact answer the cited content states (the judge's
                     `answer_in_cited`); nan for an evaluation with no such answer (the
                     trainer logs 0 there, beside `eval/answers_citing_received` 0).
  heldout_gain, heldout_gain_se
                     the paired change of held-out accuracy from the first evaluation to the
                     last and its standard error (`heldout.change`).
  full_chain_rate    the share of right held-out answers whose rubric reward is 1: every
                     rubric identified, supported by a cited page and connected to the answer
                     (on the chain world, the whole chain cited; `eval/full_chain_rate`).
  start_*            the same held-out measures at step 0 (the run's SFT policy).
  vs_first, vs_first_se
                     held-out accuracy at the last evaluation minus that of the first method
                     of `--methods` from the same seed, paired over the questions, and its
                     standard error (0 for the first method itself).
Per step (the plot, and `steps` in summary.json): outcome reward, rubric reward, tool calls per
episode and the shortcut rate of the training rollouts (`judge/outcome_reward_mean`,
`judge/rubric_reward_mean`, `rollout/tool_calls`, `judge/shortcut_rate`), and held-out
accuracy at each evaluation.
"""
from __future__ import annotations

import json
import math
import os
import re
from typing import Any

import numpy as np

from carr_jax.evaluation import heldout
from carr_jax.runs import metrics

# run-directory name -> label; the RL arguments of each: scripts/run_lanes.sh
METHODS = {"grpo": "GRPO", "cgrpo": "C-GRPO", "noconn": "C-GRPO, no connectivity",
           "rubric": "C-GRPO, a = 1.0", "alpha01": "C-GRPO, a = 0.1",
           "overlap": "C-GRPO, k = 1", "overlapice": "C-GRPO, k = 1, icepop"}
COMPARISON = ("grpo", "cgrpo")  # the default method set
_COLOURS = ("tab:orange", "tab:blue", "tab:green", "tab:red", "tab:purple")
STEP_TAGS = {"outcome_reward": "judge/outcome_reward_mean",
             "rubric_reward": "judge/rubric_reward_mean",
             "tool_calls": "rollout/tool_calls", "shortcut_rate": "judge/shortcut_rate"}
# summary.json's per-method lists, in the table's row order
SUMMARY_KEYS = ("start_heldout_accuracy", "heldout_accuracy", "heldout_gain", "heldout_gain_se",
                "start_evidence_only_accuracy",
                "evidence_only_accuracy", "start_evidence_only_shortcut_answer",
                "evidence_only_shortcut_answer", "start_shortcut_rate", "shortcut_rate",
                "tool_calls_first", "tool_calls_last", "start_cited_pages", "cited_pages",
                "start_answer_agrees_with_cited", "answer_agrees_with_cited",
                "start_full_chain_rate", "full_chain_rate", "vs_first", "vs_first_se")
_RUN = re.compile(r"^(?P<method>[a-z0-9]+)_seed(?P<seed>\d+)$")


def edge_mean(values: list[float], last: bool, share: float = 0.1) -> float:
  """Mean over the first (or last) `share` of `values`, at least one value; nan if empty."""
  if not values:
    return math.nan
  n = max(1, round(share * len(values)))
  return float(np.mean(values[-n:] if last else values[:n]))


def _held(row: dict, key: str) -> float:
  """A held-out measure of one evaluation; nan where it lacks it (an older run)."""
  return float(row.get(key, math.nan))


def run_summary(workdir: str) -> dict[str, Any]:
  """The metrics of the module docstring for one run."""
  steps = metrics.read_scalars(os.path.join(workdir, "tb"), STEP_TAGS)
  evals = heldout.load_all(workdir)
  if not evals:
    raise ValueError(f"{workdir}: no held-out evaluation (eval/step_*.json)")
  first, final = evals[0]["metrics"], evals[-1]["metrics"]
  gain = heldout.change(np.array(evals[0]["per_question_accuracy"]),
                        np.array(evals[-1]["per_question_accuracy"]))
  return {
      "heldout_gain": gain["difference"],
      "heldout_gain_se": gain["standard_error"],
      "heldout_accuracy": final["eval/accuracy"],
      "evidence_only_accuracy": _held(final, "eval/evidence_only_accuracy"),
      "evidence_only_shortcut_answer": _held(final, "eval/evidence_only_shortcut_answer"),
      "answer_agrees_with_cited": heldout.cited_agreement(final),
      "start_evidence_only_accuracy": _held(first, "eval/evidence_only_accuracy"),
      "start_evidence_only_shortcut_answer": _held(first, "eval/evidence_only_shortcut_answer"),
      "start_answer_agrees_with_cited": heldout.cited_agreement(first),
      "full_chain_rate": _held(final, "eval/full_chain_rate"),
      "start_full_chain_rate": _held(first, "eval/full_chain_rate"),
      "shortcut_rate": final["eval/shortcut_admitting_rate"],
      "tool_calls_first": edge_mean(steps["tool_calls"], last=False),
      "tool_calls_last": edge_mean(steps["tool_calls"], last=True),
      "cited_pages": final["eval/cited_pages"],
      "start_heldout_accuracy": first["eval/accuracy"],
      "start_shortcut_rate": first["eval/shortcut_admitting_rate"],
      "start_cited_pages": first["eval/cited_pages"],
      "final_per_question": evals[-1]["per_question_accuracy"],
      "eval_steps": [r["step"] for r in evals],
      "heldout_accuracy_per_eval": [r["metrics"]["eval/accuracy"] for r in evals],
      "steps": steps,
  }


def find_runs(out_dir: str, methods=COMPARISON) -> dict[str, dict[int, str]]:
  """method -> seed -> workdir, for the OUT_DIR/<method>_seed<k> directories of `methods`."""
  runs: dict[str, dict[int, str]] = {}
  for name in sorted(os.listdir(out_dir)):
    match = _RUN.match(name)
    if match and match["method"] in methods:
      runs.setdefault(match["method"], {})[int(match["seed"])] = os.path.join(out_dir, name)
  return runs


def summarize(out_dir: str, wall_s: float | None = None,
              methods=COMPARISON) -> dict[str, Any]:
  unknown = [m for m in methods if m not in METHODS]
  if unknown or not methods:
    raise ValueError(f"methods must be some of {sorted(METHODS)}, got {list(methods)}")
  runs = find_runs(out_dir, methods)
  seed_sets = {m: sorted(runs.get(m, {})) for m in methods}
  seeds = seed_sets[methods[0]]
  if not seeds or any(s != seeds for s in seed_sets.values()):
    raise ValueError(f"{out_dir}: need <method>_seed<k> of every method in {list(methods)} "
                     f"for the same seeds, found {seed_sets}")
  per_run = {m: [run_summary(runs[m][s]) for s in seeds] for m in methods}
  for m in methods:
    for run, first in zip(per_run[m], per_run[methods[0]]):
      vs = heldout.change(np.array(first["final_per_question"]),
                          np.array(run["final_per_question"]))
      run["vs_first"], run["vs_first_se"] = vs["difference"], vs["standard_error"]
  summary: dict[str, Any] = {"seeds": seeds, "wall_time_s": wall_s, "methods": list(methods)}
  for m in methods:
    summary[m] = {k: [r[k] for r in per_run[m]] for k in SUMMARY_KEYS}
    summary[m]["runs"] = per_run[m]
  return summary


def _mean_se(values: list[float]) -> str:
  """"mean +- s.e." over the seeds with a value (nan: none to state), "over n of N seeds"
  when some have none; the value alone for one seed (no spread to state)."""
  v = np.asarray(values, np.float64)
  known = v[~np.isnan(v)]
  if len(known) < 2:
    text = f"{known[0]:.3f}" if len(known) else "nan"
  else:
    text = f"{np.mean(known):.3f} +- {np.std(known, ddof=1) / math.sqrt(len(known)):.3f}"
  return text if len(known) in (0, len(v)) else f"{text} over {len(known)} of {len(v)} seeds"


def table(summary: dict[str, Any]) -> str:
  """Markdown: one row per metric, per method the mean +- s.e. over seeds and the values."""
  methods = summary["methods"]
  rows = ["| metric | " + " | ".join(METHODS[m] for m in methods) + " |",
          "|---" * (len(methods) + 1) + "|"]
  for k in SUMMARY_KEYS:
    cells = [f"{_mean_se(summary[m][k])} ({', '.join(f'{x:.3f}' for x in summary[m][k])})"
             for m in methods]
    rows.append(f"| {k} | " + " | ".join(cells) + " |")
  return "\n".join(rows) + "\n"


def plot(summary: dict[str, Any], path: str) -> None:
  """Per-step curves (mean over seeds, one colour per method) and held-out accuracy."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  panels = list(STEP_TAGS) + ["heldout_accuracy"]
  fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2))
  for m, colour in zip(summary["methods"], _COLOURS):
    label, runs = METHODS[m], summary[m]["runs"]
    for ax, name in zip(axes, panels):
      if name == "heldout_accuracy":
        x, ys = runs[0]["eval_steps"], [r["heldout_accuracy_per_eval"] for r in runs]
      else:
        ys = [r["steps"][name] for r in runs]
        x = list(range(1, min(len(y) for y in ys) + 1))
      ys = np.array([y[:len(x)] for y in ys], np.float64)
      for y in ys:
        ax.plot(x, y, color=colour, alpha=0.25, linewidth=0.8)
      ax.plot(x, ys.mean(axis=0), color=colour, label=label, linewidth=2)
      ax.set_title(name.replace("_", " "))
      ax.set_xlabel("step")
  axes[0].legend()
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def write_report(out_dir: str, wall_s: float | None = None,
                 methods=COMPARISON) -> dict[str, Any]:
  summary = summarize(out_dir, wall_s, methods)
  with open(os.path.join(out_dir, "summary.json"), "w", encoding="utf-8") as f:
    json.dump(summary, f, indent=1)
  with open(os.path.join(out_dir, "table.md"), "w", encoding="utf-8") as f:
    f.write(table(summary))
  plot(summary, os.path.join(out_dir, "shortcuts.png"))
  return summary
