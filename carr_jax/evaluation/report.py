"""Reports over evaluation runs (carr_jax.jobs.evaluate): budget sweeps and the paper's Table 2.

Sweep: one evaluation per (context budget, tool-call budget); `write_sweep` writes
`sweep.json`, a markdown table `sweep.md` and `sweep.png` (accuracy against the context
budget, one line per tool-call budget, and against the tool-call budget, one line per context
budget), the test-time scaling view of the paper's Figure 3.

Table 2 (`compare_runs`): on the questions EVERY compared run solved (at least one correct
sample), over each run's correct samples of those questions: the number of cited pages and
rubric satisfaction (identified / supported / connected, as counts and as fractions of the
rubrics). Benchmarks ship without rubrics; as in the paper, generate rubrics for that subset
(`scripts/generate_rubrics.py`) and pass them as `rubric_records`: the stored trajectories
are then re-judged against them (`rejudge`), nothing is rolled out again.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from carr_common.vocab import is_correct
from carr_jax.evaluation.store import RESULTS, TRAJECTORIES, EvalError

PARTS = ("identified", "supported", "connected")


# ------------------------------------------------------------------ sweeps


def sweep_table(points: Sequence[Mapping[str, Any]]) -> str:
  """Markdown table of sweep points ({context_budget, tool_budget, summary})."""
  head = ("| context budget | tool-call budget | accuracy | pass@k | tool calls | context used "
          "| truncated | tool limit |\n|---:|---:|---:|---:|---:|---:|---:|---:|")
  lines = [head]
  for p in points:
    s = p["summary"]
    k = s["samples_per_question"]
    lines.append(f"| {p['context_budget']} | {p['tool_budget']} | {s['accuracy']:.3f} | "
                 f"{s[f'pass@{k}']:.3f} | {s['tool_calls_mean']:.2f} | "
                 f"{s['context_tokens_mean']:.0f} | {s['truncated_rate']:.3f} | "
                 f"{s['tool_limit_rate']:.3f} |")
  return "\n".join(lines) + "\n"


def plot_sweep(points: Sequence[Mapping[str, Any]], path: str | Path) -> None:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  contexts = sorted({p["context_budget"] for p in points})
  tools = sorted({p["tool_budget"] for p in points})
  acc = {(p["context_budget"], p["tool_budget"]): p["summary"]["accuracy"] for p in points}
  fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
  for t in tools:
    xs = [c for c in contexts if (c, t) in acc]
    left.plot(xs, [acc[(c, t)] for c in xs], marker="o", label=f"{t} tool calls")
  for c in contexts:
    xs = [t for t in tools if (c, t) in acc]
    right.plot(xs, [acc[(c, t)] for t in xs], marker="o", label=f"{c} tokens")
  if len(contexts) > 1:
    left.set_xscale("log", base=2)
  left.set_xticks(contexts, [str(c) for c in contexts])
  right.set_xticks(tools, [str(t) for t in tools])
  left.set_xlabel("context budget (tokens)")
  right.set_xlabel("tool-call budget")
  for ax in (left, right):
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("accuracy")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def write_sweep(points: Sequence[Mapping[str, Any]], out_dir: str | Path) -> str:
  out = Path(out_dir)
  (out / "sweep.json").write_text(json.dumps(list(points), indent=1) + "\n")
  table = sweep_table(points)
  (out / "sweep.md").write_text(table)
  plot_sweep(points, out / "sweep.png")
  return table


# ------------------------------------------------------------------ Table 2


def read_run(run_dir: str | Path) -> dict[str, dict]:
  path = Path(run_dir) / RESULTS
  if not path.exists():
    raise EvalError(f"{run_dir}: no {RESULTS} (not an evaluation output directory)")
  with open(path, encoding="utf-8") as f:
    rows = [json.loads(line) for line in f if line.strip().endswith("}")]
  return {r["id"]: r for r in rows}


def solved_by_all(runs: Mapping[str, Mapping[str, dict]]) -> list[str]:
  """Ids every run has and solved (at least one sample with outcome 1), in a stable order."""
  sets = [{q for q, r in rows.items() if any(is_correct(s["outcome"]) for s in r["samples"])}
          for rows in runs.values()]
  return sorted(set.intersection(*sets)) if sets else []


def _stats(samples: Sequence[Mapping]) -> dict[str, float]:
  out = {"samples": len(samples),
         "cited_pages": float(np.mean([s["cited_pages"] for s in samples])) if samples else 0.0}
  with_rubrics = [s for s in samples if s["rubrics_total"]]
  for part in PARTS:
    counts = [s[f"rubrics_{part}"] for s in with_rubrics]
    out[part] = float(np.mean(counts)) if counts else None
    out[f"{part}_fraction"] = (float(np.mean([s[f"rubrics_{part}"] / s["rubrics_total"]
                                              for s in with_rubrics]))
                               if with_rubrics else None)
  return out


async def rejudge(run_dir: str | Path, ids: Sequence[str], records: Mapping[str, Mapping],
                  judge: Any) -> dict[str, list[dict]]:
  """Re-judges a run's correct samples of `ids` against `records` (which carry rubrics)."""
  from carr_jax.evaluation.samples import sample_row
  wanted = set(ids)
  trajs = []
  with open(Path(run_dir) / TRAJECTORIES, encoding="utf-8") as f:
    for line in f:
      t = json.loads(line)
      if t["id"] in wanted and is_correct(t["judge"]["outcome_reward"]):
        trajs.append(t)
  breakdowns = await judge.score_batch([(t, records[t["id"]]) for t in trajs])
  out: dict[str, list[dict]] = {}
  for t, b in zip(trajs, breakdowns):
    row = sample_row({**t, "num_tool_calls": None}, b, 1, judge.config)
    row["outcome"] = t["judge"]["outcome_reward"]  # correctness stays the run's own grade
    out.setdefault(t["id"], []).append(row)
  return out


def compare_runs(runs: Mapping[str, str | Path], rejudged: Mapping[str, Mapping] | None = None
                 ) -> dict[str, Any]:
  """Table 2 numbers: {"questions": ids, "runs": {name: stats}}; see the module docstring.

  `rejudged` (from `rejudge`) replaces a run's samples with ones judged against rubrics.
  """
  loaded = {name: read_run(d) for name, d in runs.items()}
  ids = solved_by_all(loaded)
  table = {}
  for name, rows in loaded.items():
    if rejudged is not None and name in rejudged:
      samples = [s for q in ids for s in rejudged[name].get(q, [])]
    else:
      samples = [s for q in ids for s in rows[q]["samples"] if is_correct(s["outcome"])]
    table[name] = _stats(samples)
  return {"questions": ids, "runs": table}


def compare_table(result: Mapping[str, Any]) -> str:
  def cell(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"
  lines = [f"{len(result['questions'])} questions solved by every run\n",
           "| run | samples | cited pages | identified | supported | connected | identified % "
           "| supported % | connected % |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for name, s in result["runs"].items():
    lines.append(f"| {name} | {s['samples']} | {cell(s['cited_pages'])} | "
                 + " | ".join(cell(s[p]) for p in PARTS) + " | "
                 + " | ".join(cell(None if s[f'{p}_fraction'] is None
                                   else 100 * s[f'{p}_fraction'], 1) for p in PARTS) + " |")
  return "\n".join(lines) + "\n"
