"""Benchmark evaluation of a search agent, budget sweeps, and the paper's Table 2 analysis.

    python -m carr_jax.evaluate --config configs/cgrpo_qwen3_4b.py:tpu \\
        --data browsecomp.jsonl --checkpoint /ckpt/run/checkpoints --out /eval/bc --samples 1
    python -m carr_jax.evaluate --config lab/configs/demo_cpu.py:sft --data source:eval \\
        --checkpoint workdir/sft/checkpoints --out workdir/eval --config.rollout.temperature=0
    # sweeps (the paper evaluates at 64k and 128k):
    ... --context-budgets=65536,131072 --tool-budgets=50,100
    # Table 2: questions every run solved -> cited pages and rubric satisfaction per run
    python -m carr_jax.evaluate --compare sft=/eval/sft,grpo=/eval/grpo,cgrpo=/eval/cgrpo \\
        --out /eval/table2 [--rubrics browsecomp_with_rubrics.jsonl --config ...]

Data: a JSONL file of CaRR records (`input_messages`, `label`,
`tools`, optional `metadata.remote_env_info.rubrics`), i.e. decrypted BrowseComp,
BrowseComp-ZH, xbench-DeepSearch, GAIA text-only files (`carr_jax.evaluation.crypto`), or
`source:eval` / `source:train` for a split of the in-process task source `data.source` names
(e.g. the CPU laboratory's). A record
without `id` gets `<file stem>-<line>`, so ids are stable across restarts. The model,
rollout, tools and judge come from the config (`rollout.*` budgets and sampling, `tools.*`
backend; `data.corpus_path` for an offline corpus); the policy's weights from `--checkpoint`
(an orbax checkpoint root or step directory), else `checkpoint.init_dir`, else
`model.hf_path`, else random init (with a warning).

Every question is run `--samples` (k) times through the agent loop (rollout/agent.py), graded
by the outcome judge (and the rubric judge when the record has rubrics). Outputs in `--out`:
  results.jsonl       one line per question: per-sample status, outcome, rubric satisfaction,
                      citations, tool calls, turns, context used. Appended atomically (one
                      write + fsync per question) when the question is graded: the log of
                      what is done.
  trajectories.jsonl  the judged histories (for inspection and re-judging), one per sample.
  eval_config.json    the settings of the run; a resumed run must match them.
  summary.json        accuracy (= avg@k), pass@k, mean tool calls, context used, status rates
                      (truncation, failure, ...), well-formed turn rates, rubric means.
Resuming: rerun the same command. Graded questions are read back and neither rolled out nor
judged again; a line torn by a kill is dropped and its question redone. `--retry-failed`
also redoes questions that have an engine-failed sample.

Well-formed turns (`carr_jax.rl.step_stats.turn_stats`, also logged by the RL trainer):
`well_formed_tool_call_rate` = turns with well-formed tool calls / all turns,
`well_formed_turn_rate` = 1 - ill-formed turns / all turns (final answers count as well-formed).
"""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from carr_common.vocab import STATUSES, TOOL_KINDS, is_correct
from carr_jax.evaluation.samples import sample_row
from carr_jax.evaluation.store import EvalError, ResultStore
from carr_jax.jobs import components
from carr_jax.jobs import tasks as data_lib

logger = logging.getLogger(__name__)

SUMMARY = "summary.json"


# ------------------------------------------------------------------ data


def load_eval_records(path: str) -> list[dict]:
  """CaRR records of an eval file; missing ids become `<stem>-<line>`; duplicates are errors."""
  records, seen = [], set()
  stem = Path(path).name.split(".")[0]
  for where, record in data_lib.numbered_jsonl(path):
    lineno = int(where.rsplit(":", 1)[1])
    record = data_lib.validate_record(record, where)
    rid = str(record.get("id", f"{stem}-{lineno:05d}"))
    if rid in seen:
      raise EvalError(f"{where}: duplicate id {rid!r}")
    seen.add(rid)
    records.append({**record, "id": rid})
  if not records:
    raise EvalError(f"{path}: no records")
  return records


# ------------------------------------------------------------------ running


def run_settings(rollout_cfg: Any, samples: int, data: str, policy: str) -> dict[str, Any]:
  keys = ("temperature", "top_p", "top_k", "max_turn_tokens", "max_context_tokens",
          "max_tool_calls", "stop_on_ill_formed")
  return {"data": data, "policy": policy, "samples": samples,
          **{k: getattr(rollout_cfg, k) for k in keys}}


async def evaluate_records(records: Sequence[Mapping], engine: Any, fmt: Any, backend: Any,
                           judge: Any, rollout_cfg: Any, store: ResultStore, samples: int,
                           questions_in_flight: int = 8, progress: bool = True) -> dict:
  """Runs and grades every question `store` does not hold yet; returns the summary."""
  from tqdm.auto import tqdm

  from rollout.agent import check_carr_record, rollout_groups
  for k, record in enumerate(records):  # a bad record fails here, before any work
    check_carr_record(record, f"records[{k}]")
  todo = [r for r in records if r["id"] not in store.rows]
  slots = asyncio.Semaphore(questions_in_flight)
  with tqdm(total=len(records), initial=len(records) - len(todo), desc="eval", unit="q",
            disable=not progress, dynamic_ncols=True) as bar:

    async def one(record):
      async with slots:
        (group,) = await rollout_groups(engine, fmt, backend, [record], samples, rollout_cfg,
                                        progress=False)
        breakdowns = await judge.score_batch([(t, record) for t in group])
      row = {"id": record["id"], "label": record["label"],
             "samples": [sample_row(t, b, rollout_cfg.max_context_tokens, judge.config)
                         for t, b in zip(group, breakdowns)]}
      trajs = [{"id": record["id"], "sample_index": t["sample_index"], "status": t["status"],
                "error_kind": t.get("error_kind"), "history": t["history"],
                "judge": b.to_dict()} for t, b in zip(group, breakdowns)]
      store.append(row, trajs)
      bar.update(1)

    await asyncio.gather(*(one(r) for r in todo))
  wanted = [store.rows[r["id"]] for r in records]
  summary = summarize(wanted, store.dir.name)
  (store.dir / SUMMARY).write_text(json.dumps(summary, indent=1) + "\n")
  return summary


# ------------------------------------------------------------------ summaries


def _mean(values) -> float:
  values = list(values)
  return float(np.mean(values)) if values else 0.0


def summarize(rows: Sequence[Mapping], name: str = "") -> dict[str, Any]:
  """Aggregates results.jsonl rows (see the module docstring for the fields)."""
  samples = [s for r in rows for s in r["samples"]]
  correct = [[is_correct(s["outcome"]) for s in r["samples"]] for r in rows]
  k = min((len(c) for c in correct), default=0)
  with_rubrics = [s for s in samples if s["rubrics_total"]]
  turns = sum(s["turns"] for s in samples)
  out: dict[str, Any] = {
      "name": name, "questions": len(rows), "samples_per_question": k,
      "samples": len(samples),
      "accuracy": _mean(itertools.chain.from_iterable(correct)),
      f"avg@{k}": _mean(_mean(c) for c in correct),
      f"pass@{k}": _mean(any(c) for c in correct),
      "tool_calls_mean": _mean(sum(s["tool_calls"].values()) for s in samples),
      **{f"tool_calls_{kind}_mean": _mean(s["tool_calls"][kind] for s in samples)
         for kind in TOOL_KINDS},
      "turns_mean": _mean(s["turns"] for s in samples),
      "context_tokens_mean": _mean(s["context_tokens"] for s in samples),
      "context_fraction_mean": _mean(s["context_fraction"] for s in samples),
      "generated_tokens_mean": _mean(s["generated_tokens"] for s in samples),
      **{f"{status}_rate": _mean(s["status"] == status for s in samples)
         for status in STATUSES},
      "well_formed_tool_call_rate": sum(s["tool_call_turns"] for s in samples) / max(turns, 1),
      "well_formed_turn_rate": 1.0 - sum(s["ill_formed_turns"] for s in samples) / max(turns, 1),
      "rubric_reward_mean": _mean(s["rubric_reward"] for s in with_rubrics),
      "cited_pages_mean": _mean(s["cited_pages"] for s in samples),
      "judge_error_rate": _mean(s["judge_errors"] > 0 for s in samples),
  }
  out["truncation_rate"], out["failure_rate"] = out["truncated_rate"], out["failed_rate"]
  for part in ("identified", "supported", "connected"):
    out[f"rubrics_{part}_mean"] = _mean(s[f"rubrics_{part}"] / s["rubrics_total"]
                                        for s in with_rubrics)
  return out


def format_summary(summary: Mapping[str, Any]) -> str:
  keys = [k for k in summary if k.startswith(("accuracy", "avg@", "pass@"))] + [
      "tool_calls_mean", "context_tokens_mean", "well_formed_tool_call_rate",
      "truncation_rate", "failure_rate", "rubric_reward_mean"]
  return " | ".join(f"{k} {summary[k]:.4g}" for k in keys)


# ------------------------------------------------------------------ command line


def policy_params(config: Any, cfg: Any, checkpoint: str) -> tuple[Any, str]:
  """(params on the config's mesh, where they came from): see the module docstring."""
  import jax

  from carr_jax.runs import checkpointing as ckpt_lib
  from carr_jax.model import qwen3 as model_lib
  from carr_jax.model import sharding
  mesh = sharding.mesh_from_config(components.mesh_config(config))
  abstract = model_lib.abstract_params(cfg)
  shardings = sharding.param_shardings(abstract, mesh)
  source = checkpoint or components.checkpoint_config(config).init_dir
  if source:
    return ckpt_lib.restore_params(source, ckpt_lib.with_shardings(abstract, shardings)), source
  hf_path = components.model_source(config).hf_path
  if hf_path:
    from carr_jax.model.hf_io import load_hf_params
    return load_hf_params(hf_path, cfg, shardings), hf_path
  logger.warning("no --checkpoint, checkpoint.init_dir or model.hf_path: evaluating a RANDOM "
                 "policy")
  with jax.set_mesh(mesh):
    params = jax.jit(lambda k: model_lib.init_params(cfg, k), out_shardings=shardings)(
        jax.random.key(config.seed))
  return params, f"random:{config.seed}"


def eval_data(config: Any, spec: str) -> tuple[list[dict], list[dict]]:
  """(records, corpus pages) for `--data` (a file, or source:eval / source:train)."""
  if spec.startswith("source:"):
    split = spec.split(":", 1)[1]
    if split not in ("eval", "train"):
      raise EvalError(f"--data={spec!r}: use source:eval or source:train")
    train, evals, corpus = data_lib.load_tasks(config)
    return (evals if split == "eval" else train), corpus
  path = data_lib.data_config(config).corpus_path
  return load_eval_records(spec), data_lib.read_jsonl(path) if path else []


def _budgets(text: str, default: int) -> list[int]:
  values = [int(v) for v in text.split(",") if v.strip()] if text else [default]
  if any(v < 1 for v in values):
    raise EvalError(f"budgets must be positive ints, got {text!r}")
  return values


@dataclasses.dataclass(frozen=True)
class EvalOptions:
  """What to evaluate and where (the command's flags; `python -m carr_jax.evaluate --help`)."""
  out: str  # output directory; a rerun resumes
  data: str  # eval JSONL of CaRR records, or source:eval / source:train
  checkpoint: str = ""  # orbax checkpoint root or step dir ("" = the config's policy)
  samples: int = 1  # samples per question
  questions_in_flight: int = 8
  max_questions: int = 0  # only the first N questions (0 = all)
  context_budgets: str = ""  # comma-separated max_context_tokens values (a sweep)
  tool_budgets: str = ""  # comma-separated max_tool_calls values (a sweep)
  retry_failed: bool = False  # redo questions with an engine-failed sample


def run_evaluations(config: Any, opts: EvalOptions) -> list[dict]:
  """One evaluation per (context, tool-call) budget; a sweep report when there are several."""
  from carr_jax.evaluation.report import write_sweep
  from rollout.chat import ChatFormat
  served = components.engine_config(config).engine == "sglang"  # by a server, not in-process
  if served and opts.checkpoint:
    raise EvalError("--checkpoint with rollout.engine=sglang: the server samples from the "
                    "weights it was launched with; launch it on the checkpoint's HF export "
                    "(checkpoint.hf_export_every) and drop --checkpoint")
  records, corpus = eval_data(config, opts.data)
  if opts.max_questions:
    records = records[:opts.max_questions]
  base_cfg = components.rollout_config(config)
  contexts = _budgets(opts.context_budgets, base_cfg.max_context_tokens)
  tools = _budgets(opts.tool_budgets, base_cfg.max_tool_calls)
  config.rollout.max_context_tokens = max(contexts)  # the engine must fit the largest budget
  cfg, vocab = components.model_config(config), components.output_vocab(config)
  params, policy = (None, "sglang") if served else policy_params(
      config, cfg, opts.checkpoint)
  fmt = ChatFormat(components.tokenizer(config))
  backend = components.tool_backend(config, corpus)
  out = Path(opts.out)
  out.mkdir(parents=True, exist_ok=True)  # the judge's cache lives there
  sweep = len(contexts) * len(tools) > 1

  async def run() -> list[dict]:
    engine = components.engine(config, params, cfg, weight_version=policy, vocab=vocab)
    judge = components.judge(config, str(out))
    points = []
    try:
      for context, tool_budget in itertools.product(contexts, tools):
        rollout_cfg = dataclasses.replace(base_cfg, max_context_tokens=context,
                                          max_tool_calls=tool_budget)
        run_dir = out / f"ctx{context}_tools{tool_budget}" if sweep else out
        store = ResultStore(str(run_dir), run_settings(rollout_cfg, opts.samples,
                                                       opts.data, policy),
                            retry_failed=opts.retry_failed)
        summary = await evaluate_records(records, engine, fmt, backend, judge, rollout_cfg,
                                         store, opts.samples, opts.questions_in_flight)
        print(f"[{run_dir}] {format_summary(summary)}", flush=True)
        points.append({"context_budget": context, "tool_budget": tool_budget,
                       "summary": summary})
    finally:
      await engine.close()
      await judge.aclose()
    return points

  points = asyncio.run(run())
  if sweep:
    print(write_sweep(points, out), flush=True)
  return points


def run_comparison(config: Any, runs: Mapping[str, str], out_dir: str,
                   rubrics: str = "") -> dict:
  """Table 2 over `runs` (name -> evaluation directory) into `out_dir`, re-judged against the
  records with rubrics at `rubrics` when given."""
  from carr_jax.evaluation import report as eval_report
  out = Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  rejudged = None
  if rubrics:
    from carr_jax.jobs import components
    records = {r["id"]: r for r in load_eval_records(rubrics)}
    ids = eval_report.solved_by_all({n: eval_report.read_run(d) for n, d in runs.items()})

    async def run():
      judge = components.judge(config, out_dir)
      try:
        return {n: await eval_report.rejudge(d, ids, records, judge) for n, d in runs.items()}
      finally:
        await judge.aclose()
    rejudged = asyncio.run(run())
  result = eval_report.compare_runs(runs, rejudged)
  (out / "compare.json").write_text(json.dumps(result, indent=1) + "\n")
  table = eval_report.compare_table(result)
  (out / "compare.md").write_text(table)
  print(table, flush=True)
  return result
