"""Entry point: `python -m carr_jax.evaluate`; flags and `main()` only.

The evaluation job, its budget sweeps and the paper's Table 2 comparison are
`carr_jax.jobs.evaluate`, whose docstring documents this command.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

from carr_jax import cli
from carr_jax.evaluation.store import EvalError
from carr_jax.jobs import evaluate as lib
from carr_jax.jobs.evaluate import EvalOptions, run_comparison, run_evaluations


def parser() -> argparse.ArgumentParser:
  p = cli.parser("python -m carr_jax.evaluate", lib.__doc__.split("\n")[0],
                 config="optional: config (model, rollout, tools, judge); needed unless "
                 "--compare runs without --rubrics.")
  a = p.add_argument
  a("--out", required=True, help="output directory (a rerun resumes)")
  a("--data", help="eval JSONL of CaRR records, or source:eval / source:train")
  a("--checkpoint", default="", help="orbax checkpoint root or step dir of the policy")
  a("--samples", type=int, default=1, help="samples per question (k of avg@k / pass@k)")
  a("--questions-in-flight", type=int, default=8, help="questions rolled out at once")
  a("--max-questions", type=int, default=0, help="only the first N questions (0 = all)")
  a("--context-budgets", default="", help="comma-separated max_context_tokens values (sweep)")
  a("--tool-budgets", default="", help="comma-separated max_tool_calls values (sweep)")
  a("--retry-failed", action="store_true", help="redo questions with an engine-failed sample")
  a("--compare", default="", help="Table 2 over name=out_dir,... instead of evaluating")
  a("--rubrics", default="", help="with --compare: records with rubrics to re-judge with")
  return p


def _evaluate(args: argparse.Namespace) -> None:
  if not args.compare and (args.config is None or not args.data):
    raise cli.UsageError("--config and --data are required (or --compare)")
  if args.compare and args.rubrics and args.config is None:
    raise cli.UsageError("--compare with --rubrics needs --config (the judge)")
  try:
    if args.compare:
      runs = dict(item.split("=", 1) for item in args.compare.split(",") if item.strip())
      run_comparison(args.config, runs, args.out, args.rubrics)
    else:
      run_evaluations(args.config, EvalOptions(**{
          f.name: getattr(args, f.name) for f in dataclasses.fields(EvalOptions)}))
  except EvalError as e:  # bad input files or a resumed run with other settings
    raise cli.UsageError(str(e)) from e


def main(argv: list[str] | None = None) -> int:
  return cli.run(_evaluate, parser(), argv)


if __name__ == "__main__":
  sys.exit(main())
