"""The synthetic world end to end: graph, pages, questions, CaRR records, splits, files.

`build_world(seed, num_entities, num_questions)` is what the trainer calls in-process;
`write_world(world, out_dir)` writes `corpus.jsonl` (docs/design.md section 4), `train.jsonl`
and `eval.jsonl` (CaRR records with `metadata.gold`, section 3) and `manifest.json`. The split
is by answer entity, so no eval answer is ever a train answer. Ids are contiguous:
`synth-<seed>-00000` ... over train then eval. Same seed and sizes -> byte-identical files.

  python -m lab.make_world --seed 0 --num-questions 200 --out world
"""
from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import networkx as nx

from lab.world import pages as pages_lib
from lab.world import styles
from lab.world.graph import build_graph
from lab.world.pages import EntityPage, render_pages
from lab.world.questions import Question
from rollout.tools.schemas import brief_tool_schemas, tool_schemas

SOURCE = "carr_jax_synthetic_world"
RESPONSE_FORMAT_SUFFIX = (
    "\n\nResearch this with the browser tools, then give your final reply in exactly three "
    "sections:\n"
    "## Explanation with Citations\n"
    "Explain step by step how the evidence leads to the answer. Right after each fact you "
    "rely on, cite the page it came from as [[n](url)], where n numbers the source and url is "
    "the exact address you saw in a tool result.\n"
    "## Exact Answer\n"
    "Only the answer itself, as short as possible.\n"
    "## References\n"
    "Every cited source once, one per line, as n. url")
# The same contract in ~40 tokens instead of ~120 (`prompt="brief"`, small CPU policies),
# stated BEFORE the question: a small policy learns to copy the question's names into its
# first search far sooner when nothing stands between them and its reply (docs/results.md).
BRIEF_FORMAT_RULE = (
    "Use the tools. Reply with ## Explanation with Citations (each fact cited as "
    "[[n](url)]), ## Exact Answer, ## References (n. url per line).\n\n")
# No tools and only the answer section (`prompt="answer"`, kind questions: nothing to look up).
ANSWER_FORMAT_RULE = "Reply with ## Exact Answer and the answer on the next line.\n\n"
_PROMPTS = {"full": (lambda q: q + RESPONSE_FORMAT_SUFFIX, tool_schemas),
            "brief": (lambda q: BRIEF_FORMAT_RULE + q, brief_tool_schemas),
            "answer": (lambda q: ANSWER_FORMAT_RULE + q, list)}


@dataclasses.dataclass
class World:
  seed: int
  graph: nx.MultiDiGraph
  pages: dict[str, EntityPage]  # node id -> page ("lookup": also "glossary:<term>" -> page)
  questions: list[Question]  # in id order: train first, then eval
  train: list[dict]  # CaRR records
  eval: list[dict]

  def corpus(self) -> list[dict]:
    return [p.record() for p in self.pages.values()]

  def corpus_backend(self):
    from rollout.tools.corpus import CorpusBackend  # bm25s only when a backend is wanted
    return CorpusBackend.from_records(self.corpus())


def carr_record(qid: str, question: str, label: str, rubrics: list[str],
                gold: dict | None = None, prompt: str = "full") -> dict:
  """A CaRR-format record (the release's JSONL record); `gold` only for the synthetic world."""
  user, schemas = _PROMPTS[prompt]
  metadata = {"remote_env_info": {"search_forbidden_strs": [question], "rubrics": rubrics}}
  if gold is not None:
    metadata["gold"] = gold
  return {"id": qid, "source": SOURCE,
          "input_messages": [{"role": "user", "content": user(question)}],
          "label": label, "tools": schemas(), "metadata": metadata}


def build_world(seed: int, num_entities: int, num_questions: int, style: str = "deep", *,
                eval_fraction: float = 0.2, locality: float = 0.0, distractors: int = 6,
                short_names: bool = False, prompt: str = "full", mark_names: bool = False,
                **style_keys) -> World:
  """Builds the whole world from a seed; see the module docstring.

  style: the questions' style (lab/world/styles.py), with `style_keys` its settings (e.g.
  `min_hops`, `shortcut_fraction`, `stale_fraction`; a key the style does not read is an
  error); eval_fraction: the share of questions held out; locality: see `build_graph`;
  distractors: distractor sentences per page (0-6; fewer = shorter pages, shorter
  episodes); short_names: see `build_graph`; prompt: "full" (three tool schemas, the whole
  answer-format instruction), "brief" (search and open, a one-line instruction before the
  question: ~150 prompt tokens, not ~500) or "answer" (no tools, only `## Exact Answer`: for
  kind questions); mark_names: every entity name in a question, and every other entity's
  name in a page, in bold (`pages.mark_names`).
  """
  kind = styles.make_style(style, **style_keys)
  if prompt not in _PROMPTS:
    raise ValueError(f"world prompt must be one of {sorted(_PROMPTS)}, got {prompt!r}")
  if not 0.0 <= eval_fraction < 1.0:
    raise ValueError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
  if num_questions < 1:
    raise ValueError(f"num_questions must be positive, got {num_questions}")
  rng = random.Random(seed)
  graph = build_graph(rng, num_entities, locality, short_names)
  pages = render_pages(graph, rng, distractors)
  questions = kind.questions(graph, pages, rng, num_questions,
                             round(eval_fraction * num_questions))
  if mark_names:
    pattern = pages_lib.name_pattern(graph)
    pages = {n: pages_lib.marked_page(p, pattern) for n, p in pages.items()}
    questions = [dataclasses.replace(q, text=pages_lib.mark_names(q.text, pattern))
                 for q in questions]
  state = kind.prepare(questions, rng)
  train_q, eval_q = kind.split(graph, questions, rng, eval_fraction)
  stale = kind.stale(train_q)
  pages = {**pages, **kind.pages(graph, train_q + eval_q, state, stale)}
  records = []
  for i, q in enumerate(train_q + eval_q):
    gold = {**kind.gold(graph, pages, q, state, stale), "style": kind.name}
    records.append(carr_record(f"synth-{seed}-{i:05d}", q.text, kind.label(graph, q, gold),
                               [r["text"] for r in gold["rubrics"]], gold, prompt))
  return World(seed, graph, pages, train_q + eval_q, records[:len(train_q)],
               records[len(train_q):])


def _write_jsonl(path: Path, rows: list[dict]) -> None:
  with open(path, "w", encoding="utf-8") as f:
    for row in rows:
      f.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_world(world: World, out_dir: str | Path) -> dict:
  """Writes the world's files; returns the manifest (also written as manifest.json)."""
  out = Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  _write_jsonl(out / "corpus.jsonl", world.corpus())
  _write_jsonl(out / "train.jsonl", world.train)
  _write_jsonl(out / "eval.jsonl", world.eval)
  manifest = {
      "seed": world.seed, "num_entities": world.graph.number_of_nodes(),
      "num_relations": world.graph.number_of_edges(), "num_pages": len(world.pages),
      "num_train": len(world.train), "num_eval": len(world.eval),
      "num_shortcut": sum(q.shortcut for q in world.questions),
      "hops": {str(h): sum(len(q.hops) == h for q in world.questions) for h in (1, 2, 3, 4)},
  }
  (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
  return manifest
