"""Do search listings give the evidence away? The share of questions a listing answers.

    python -m lab.probes.listing_reveal --config lab/configs/lookup_cpu.py:sft \
        [--trajectories RUN/trajectories/step_1.jsonl ...]

A listing reveals a question's evidence when the description of one of its search results
holds the sentence that decides one of the question's rubrics (its gold `evidence`): then an
agent could answer from the listing without opening a page. The probe replays, over the
world corpus, every search of

  - the scripted expert's episodes on every training and held-out question (its queries),
  - `QUERY_FORMS` of each question's glossary term (queries a policy might write instead),
    at 1 and 10 results,
  - with `--trajectories` (dumped rollouts, such as an RL run's `trajectories/step_1.jsonl`,
    the cold start's own training episodes), every query those episodes searched,

and prints one line per source,

    listing_reveal source=<expert|query_forms|trajectories> share=<float> questions=<n> searches=<m>

share: the questions with at least one revealing listing over the questions searched.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence

from carr_jax import cli

QUERY_FORMS = ("glossary {term}", "{term}", "{digits}", "glossary {term} kind",
               "{term} city or organization")


def reveals(evidence: Sequence[str], descriptions: Iterable[str]) -> bool:
  """Whether any description holds any of the evidence sentences."""
  return any(e in d for d in descriptions for e in evidence)


def evidence_of(record: Mapping) -> list[str]:
  return [r["evidence"] for r in record["metadata"]["gold"]["rubrics"]]


def searched_queries(history: Sequence[Mapping]) -> list[tuple[str, int]]:
  """(query, num) of every well-formed browser.search call of a judged history."""
  out = []
  for message in history:
    for call in message.get("tool_calls") or ():
      fn = call.get("function") or call
      if fn.get("name") != "browser.search":
        continue
      args = fn.get("arguments")
      if isinstance(args, str):
        try:
          args = json.loads(args)
        except (ValueError, RecursionError):  # a hand-edited or hostile trajectory file
          continue
      if isinstance(args, Mapping) and isinstance(args.get("query"), str):
        num = args.get("num", 10)
        out.append((args["query"], num if isinstance(num, int) and num > 0 else 10))
  return out


def dumped_trajectories(paths: Sequence[str]) -> Iterator[dict]:
  """Every episode record of dumped trajectory files (JSONL, an RL run's trajectories/)."""
  for path in paths:
    with open(path, encoding="utf-8") as f:
      for line in f:
        yield json.loads(line)


def dumped_searches(paths: Sequence[str]) -> Iterator[tuple[str, list[tuple[str, int]]]]:
  """(prompt id, its (query, num) searches) of every episode in dumped trajectory files."""
  for traj in dumped_trajectories(paths):
    yield traj["prompt_id"], searched_queries(traj.get("history") or [])


def share(backend, searches: Mapping[str, list[tuple[str, int]]],
          records: Mapping[str, Mapping]) -> tuple[float, int, int]:
  """(share of questions with a revealing listing, questions searched, searches) for
  question id -> its (query, num) searches."""
  searched = {qid: s for qid, s in searches.items() if s}
  revealed = sum(
      reveals(evidence_of(records[qid]),
              (hit.snippet for query, num in s for hit in backend.search_sync(query, num)))
      for qid, s in searched.items())
  return (revealed / len(searched) if searched else float("nan"), len(searched),
          sum(len(s) for s in searched.values()))


def form_queries(record: Mapping) -> list[tuple[str, int]]:
  term = record["metadata"]["gold"]["term"]
  digits = term.rsplit(" ", 1)[-1]
  return [(form.format(term=term, digits=digits), num) for form in QUERY_FORMS
          for num in (1, 10)]


def _probe(args: argparse.Namespace) -> None:
  from carr_jax.jobs import components
  from lab import tasks
  from rollout.chat import ChatFormat
  from rollout.tools.corpus import CorpusBackend
  train, evals, corpus = tasks.tasks(args.config)
  records = {r["id"]: r for r in train + evals}
  backend = CorpusBackend.from_records(corpus)
  sources = {"expert": {}, "query_forms": {qid: form_queries(r) for qid, r in records.items()}}
  for ep in tasks.expert_trajectories(args.config, ChatFormat(components.tokenizer(args.config))):
    sources["expert"].setdefault(ep["prompt_id"], []).extend(searched_queries(ep["history"]))
  if args.trajectories:
    sources["trajectories"] = {}
    for prompt_id, searches in dumped_searches(args.trajectories):
      sources["trajectories"].setdefault(prompt_id, []).extend(searches)
  for name, searches in sources.items():
    rate, questions, count = share(backend, searches, records)
    print(f"listing_reveal source={name} share={rate:.4f} questions={questions} "
          f"searches={count}")


def parser() -> argparse.ArgumentParser:
  p = cli.parser("python -m lab.probes.listing_reveal", __doc__.split("\n")[0],
                 config="The cold start's config (its world and expert: lab/configs/lookup_cpu.py:sft).")
  p.add_argument("--trajectories", nargs="*", default=[],
                 help="dumped rollouts (JSONL trajectory records with history)")
  return p


if __name__ == "__main__":
  raise SystemExit(cli.run(_probe, parser()))
