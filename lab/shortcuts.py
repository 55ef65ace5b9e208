"""The method comparisons' report: summary.json, a table and a plot from the run dirs.

    python -m lab.shortcut_report OUT_DIR [--wall-s S] [--methods grpo,cgrpo,...]
    python -m lab.shortcut_report --from docs/data/<table>.json [--plot PATH]
    python -m lab.shortcut_report --from A.json B.json --save MERGED.json

reads OUT_DIR/<method>_w<world>_seed<k>/ (or <method>_seed<k>/: world 0; each a
`carr_jax.train` workdir: TensorBoard events in tb/, held-out evaluations in
eval/step_<N>.json, the page-swap probe's page_swap/ and page_swap_start/) for every method of
`--methods` (default grpo, cgrpo; names in `METHODS`), the same (world, seed) pairs for each,
and writes OUT_DIR/summary.json, OUT_DIR/table.md and OUT_DIR/shortcuts.png. With `--from` it
prints the table (and draws the plot) of a summary.json written before; given several, it
merges them first (`merge`: the same methods, disjoint (world, seed) pairs, such as a world
run later or on another machine) and `--save` writes the merged summary.
`scripts/reproduce_shortcuts.sh` (GRPO vs C-GRPO) and `scripts/reproduce_chains.sh` (with the
ablations) run it last.

Metrics (per run; summary.json holds, per method, one value per run, parallel to its top-level
`world_seeds` and `seeds` lists). The first four answer the method's claim without reading
its reward; the rubric readouts below them are what C-GRPO is paid for:
  evidence_only_accuracy
                     avg@k accuracy on the held-out questions with no shortcut (gold flag):
                     on the reference world, those whose relation's usual kind is wrong, so
                     only the page the question's own link finds answers them.
  heldout_accuracy   avg@k outcome accuracy on the held-out questions at the last evaluation
                     (k = train.eval_samples; the trainer's `eval/accuracy`).
  page_swap_follow_plain, page_swap_follow_evidence_only
                     the page-swap probe (lab/probes/page_swap.py) on the last checkpoint: with
                     every held-out page stating the other answer, the share of samples that
                     follow the page, on the questions whose unswapped answer is the usual
                     kind (plain) and on the evidence-only ones; nan without the probe.
  evidence_only_vs_first, evidence_only_vs_first_se
                     evidence_only_accuracy minus the first method's from the same (world,
                     seed), paired over the evidence-only questions, and its standard error.
  shortcut_rate      (rubric readout) on the held-out questions that admit a shortcut (gold
                     flag), the share of correct answers whose rubric reward is below
                     reward.shortcut_threshold (`eval/shortcut_admitting_rate`).
  tool_calls_first / tool_calls_last
                     mean tool calls per training episode over the first / last 10% of steps
                     (at least one step each; `rollout/tool_calls`).
  cited_pages        mean distinct cited URLs per held-out episode at the last evaluation
                     (`eval/cited_pages`).
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
  full_chain_rate    (rubric readout) the share of right held-out answers whose rubric reward
                     is 1: every rubric identified, supported by a cited page and connected to
                     the answer (on the chain world, the connected-chain share: both pages
                     cited; `eval/full_chain_rate`).
  unconnected_rate   the share of held-out episodes with a supported rubric not connected to
                     the answer (`eval/unconnected_rate`: on the chain world, the first page
                     cited without the second, e.g. answering its lure), whether or not the
                     run's judge required connectivity.
  unconnected_first  the same share in the training rollouts of the first 10% of steps (the
                     cold start's, `judge/unconnected_rate`).
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
           "overlap": "C-GRPO, k = 1", "overlapice": "C-GRPO, k = 1, icepop",
           "replay": "C-GRPO (MoE), routing replay", "noreplay": "C-GRPO (MoE), no replay"}
COMPARISON = ("grpo", "cgrpo")  # the default method set
_COLOURS = ("tab:orange", "tab:blue", "tab:green", "tab:red", "tab:purple")
STEP_TAGS = {"outcome_reward": "judge/outcome_reward_mean",
             "rubric_reward": "judge/rubric_reward_mean",
             "tool_calls": "rollout/tool_calls", "shortcut_rate": "judge/shortcut_rate"}
# summary.json's per-method lists, in the table's row order: the claim's measures first
SUMMARY_KEYS = ("start_evidence_only_accuracy", "evidence_only_accuracy",
                "start_heldout_accuracy", "heldout_accuracy", "heldout_gain", "heldout_gain_se",
                "start_page_swap_follow_plain", "page_swap_follow_plain",
                "start_page_swap_follow_evidence_only", "page_swap_follow_evidence_only",
                "evidence_only_vs_first", "evidence_only_vs_first_se", "vs_first",
                "vs_first_se", "start_evidence_only_shortcut_answer",
                "evidence_only_shortcut_answer", "tool_calls_first", "tool_calls_last",
                "start_open_calls", "open_calls", "start_cited_pages", "cited_pages",
                "start_answer_agrees_with_cited", "answer_agrees_with_cited",
                "start_shortcut_rate", "shortcut_rate", "start_full_chain_rate",
                "full_chain_rate", "unconnected_first", "start_unconnected_rate",
                "unconnected_rate")
READOUTS = ("start_shortcut_rate", "shortcut_rate", "start_full_chain_rate", "full_chain_rate")
PAGE_SWAP = {"page_swap": "", "page_swap_start": "start_"}  # probe dir in a run -> key prefix
FOLLOW_FILE = "follow.json"  # what lab/probes/page_swap.py writes in its --out
_RUN = re.compile(r"^(?P<method>[a-z0-9]+?)(?:_w(?P<world>\d+))?_seed(?P<seed>\d+)$")


def edge_mean(values: list[float], last: bool, share: float = 0.1) -> float:
  """Mean over the first (or last) `share` of `values`, at least one value; nan if empty."""
  if not values:
    return math.nan
  n = max(1, round(share * len(values)))
  return float(np.mean(values[-n:] if last else values[:n]))


def _held(row: dict, key: str) -> float:
  """A held-out measure of one evaluation; nan where it lacks it (an older run)."""
  return float(row.get(key, math.nan))


def page_swap(workdir: str) -> dict[str, float]:
  """The page-swap probe's follow rates of a run (nan where the probe did not run)."""
  out = {}
  for directory, prefix in PAGE_SWAP.items():
    path = os.path.join(workdir, directory, FOLLOW_FILE)
    rates = {}
    if os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        rates = json.load(f)
    for split in ("plain", "evidence_only"):
      out[f"{prefix}page_swap_follow_{split}"] = float(rates.get(f"follow_{split}", math.nan))
  return out


def run_summary(workdir: str) -> dict[str, Any]:
  """The metrics of the module docstring for one run."""
  steps = metrics.read_scalars(os.path.join(workdir, "tb"),
                               {**STEP_TAGS, "unconnected": "judge/unconnected_rate"})
  unconnected = steps.pop("unconnected")  # not a plotted curve: `steps` stays STEP_TAGS'
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
      "unconnected_rate": _held(final, "eval/unconnected_rate"),
      "start_unconnected_rate": _held(first, "eval/unconnected_rate"),
      "unconnected_first": edge_mean(unconnected, last=False),
      "shortcut_rate": final["eval/shortcut_admitting_rate"],
      "tool_calls_first": edge_mean(steps["tool_calls"], last=False),
      "tool_calls_last": edge_mean(steps["tool_calls"], last=True),
      "cited_pages": final["eval/cited_pages"],
      "start_heldout_accuracy": first["eval/accuracy"],
      "start_shortcut_rate": first["eval/shortcut_admitting_rate"],
      "start_cited_pages": first["eval/cited_pages"],
      "open_calls": _held(final, "eval/tool_calls_open"),
      "start_open_calls": _held(first, "eval/tool_calls_open"),
      **page_swap(workdir),
      "start_per_question": evals[0]["per_question_accuracy"],
      "final_per_question": evals[-1]["per_question_accuracy"],
      "per_question_shortcut": evals[-1].get("per_question_shortcut", []),
      "eval_steps": [r["step"] for r in evals],
      "heldout_accuracy_per_eval": [r["metrics"]["eval/accuracy"] for r in evals],
      "steps": steps,
  }


def find_runs(out_dir: str, methods=COMPARISON) -> dict[str, dict[tuple[int, int], str]]:
  """method -> (world seed, seed) -> workdir, for the OUT_DIR/<method>[_w<world>]_seed<k>
  directories of `methods` (no world: world 0)."""
  runs: dict[str, dict[tuple[int, int], str]] = {}
  for name in sorted(os.listdir(out_dir)):
    match = _RUN.match(name)
    if match and match["method"] in methods:
      key = (int(match["world"] or 0), int(match["seed"]))
      runs.setdefault(match["method"], {})[key] = os.path.join(out_dir, name)
  return runs


def evidence_only(per_question: list[float], shortcut: list[bool]) -> np.ndarray:
  """[Q'] the per-question accuracies of the evidence-only questions (shortcut flag False)."""
  if len(shortcut) != len(per_question):
    raise ValueError("an evaluation without per-question shortcut flags (written before "
                     "heldout.save kept them) has no evidence-only split")
  return np.asarray(per_question, np.float64)[~np.asarray(shortcut, bool)]


def paired_leads(run: dict, first: dict) -> dict[str, float]:
  """`run`'s end-of-run lead over `first` (the same world and seed), paired over the held-out
  questions and over the evidence-only ones, with standard errors."""
  vs = heldout.change(np.array(first["final_per_question"]), np.array(run["final_per_question"]))
  out = {"vs_first": vs["difference"], "vs_first_se": vs["standard_error"],
         "evidence_only_vs_first": math.nan, "evidence_only_vs_first_se": math.nan}
  if run["per_question_shortcut"] and first["per_question_shortcut"]:
    ev = heldout.change(evidence_only(first["final_per_question"],
                                      first["per_question_shortcut"]),
                        evidence_only(run["final_per_question"], run["per_question_shortcut"]))
    out.update(evidence_only_vs_first=ev["difference"],
               evidence_only_vs_first_se=ev["standard_error"])
  return out


def summarize(out_dir: str, wall_s: float | None = None,
              methods=COMPARISON) -> dict[str, Any]:
  unknown = [m for m in methods if m not in METHODS]
  if unknown or not methods:
    raise ValueError(f"methods must be some of {sorted(METHODS)}, got {list(methods)}")
  runs = find_runs(out_dir, methods)
  pair_sets = {m: sorted(runs.get(m, {})) for m in methods}
  pairs = pair_sets[methods[0]]
  if not pairs or any(s != pairs for s in pair_sets.values()):
    raise ValueError(f"{out_dir}: need <method>[_w<world>]_seed<k> of every method in "
                     f"{list(methods)} for the same (world, seed) pairs, found {pair_sets}")
  per_run = {m: [run_summary(runs[m][p]) for p in pairs] for m in methods}
  for m in methods:
    for run, first in zip(per_run[m], per_run[methods[0]]):
      run.update(paired_leads(run, first))
  summary: dict[str, Any] = {"world_seeds": [w for w, _ in pairs],
                             "seeds": [s for _, s in pairs], "wall_time_s": wall_s,
                             "methods": list(methods)}
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
  """Markdown: one row per metric, per method the mean +- s.e. over runs and the values, in
  the order of the (world, seed) pairs the header names; rubric readouts say so."""
  methods = summary["methods"]
  pairs = ", ".join(f"w{w}/s{s}" for w, s in run_pairs(summary))
  rows = [f"| metric (runs: {pairs}) | " + " | ".join(METHODS[m] for m in methods) + " |",
          "|---" * (len(methods) + 1) + "|"]
  for k in SUMMARY_KEYS:
    if k not in summary[methods[0]]:
      continue  # a summary written before the metric existed
    cells = [f"{_mean_se(summary[m][k])} ({', '.join(f'{x:.3f}' for x in summary[m][k])})"
             for m in methods]
    label = f"{k} (rubric readout)" if k in READOUTS else k
    rows.append(f"| {label} | " + " | ".join(cells) + " |")
  return "\n".join(rows) + "\n"


def read_summary(path: str) -> dict[str, Any]:
  """A summary.json written by `write_report` (such as docs/data/<table>.json)."""
  with open(path, encoding="utf-8") as f:
    summary = json.load(f)
  missing = [k for k in ("methods", "seeds") if k not in summary]
  if missing:
    raise ValueError(f"{path}: not a comparison summary (no {', '.join(missing)})")
  return summary


def run_pairs(summary: dict[str, Any]) -> list[tuple[int, int]]:
  """[(world seed, seed)] of a summary's runs (one without world seeds: world 0)."""
  return list(zip(summary.get("world_seeds", [0] * len(summary["seeds"])), summary["seeds"]))


def concat_runs(parts: list[dict[str, Any]], methods, top: tuple[str, ...] = ()
                ) -> dict[str, Any]:
  """Several reports over disjoint (world, seed) runs -> one: world_seeds and seeds, each
  method's per-run lists and the `top` per-run lists concatenated in the given order. A run in
  two parts (it would count one cold start twice) or a method whose metrics differ between
  parts is a ValueError."""
  pairs = [p for part in parts for p in run_pairs(part)]
  if len(set(pairs)) != len(pairs):
    raise ValueError(f"a (world, seed) run appears in more than one part: {pairs}")
  out: dict[str, Any] = {"world_seeds": [w for w, _ in pairs], "seeds": [k for _, k in pairs]}
  for m in methods:
    keys = [sorted(part[m]) for part in parts]
    if any(k != keys[0] for k in keys):
      raise ValueError(f"method {m!r} has other metrics in some part: {keys}")
    out[m] = {k: [v for part in parts for v in part[m][k]] for k in parts[0][m]}
  out.update({k: [v for part in parts for v in part[k]] for k in top})
  return out


def merge(summaries: list[dict[str, Any]]) -> dict[str, Any]:
  """Summaries with the same methods over disjoint (world, seed) runs -> one (`concat_runs`);
  the wall time is the sum when every part states one, else None."""
  methods = summaries[0]["methods"]
  if any(s["methods"] != methods for s in summaries):
    raise ValueError(f"summaries to merge need the same methods, got "
                     f"{[s['methods'] for s in summaries]}")
  walls = [s.get("wall_time_s") for s in summaries]
  out = concat_runs(summaries, methods)
  return {"world_seeds": out.pop("world_seeds"), "seeds": out.pop("seeds"),
          "wall_time_s": None if None in walls else sum(walls), "methods": list(methods),
          **out}


def write_summary(summary: dict[str, Any], path: str) -> None:
  """summary.json's format (docs/data/<table>.json)."""
  with open(path, "w", encoding="utf-8") as f:
    json.dump(summary, f, indent=1)


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
  write_summary(summary, os.path.join(out_dir, "summary.json"))
  with open(os.path.join(out_dir, "table.md"), "w", encoding="utf-8") as f:
    f.write(table(summary))
  plot(summary, os.path.join(out_dir, "shortcuts.png"))
  return summary
