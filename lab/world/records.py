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

from lab.world import chain, compose, lookup, named
from lab.world import pages as pages_lib
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


_GENERATORS = {"deep": compose.generate_questions, "named": named.generate_named_questions,
               "kinds": named.generate_kind_questions,
               "lookup": lookup.generate_lookup_questions}
# reference and chain: their own generator (it knows the split); chain: reference questions
# whose glossary pages form a chain (chain.py)
_STYLES = (*_GENERATORS, "reference", "chain")
_GLOSSARY_STYLES = ("lookup", "reference", "chain")  # glossary pages are the evidence
# the answer is an entity type; the last questions are held out
_KIND_STYLES = ("kinds", *_GLOSSARY_STYLES)


def _split_by_answer(questions: list[Question], rng: random.Random,
                     eval_fraction: float) -> tuple[list[Question], list[Question]]:
  answers = list(dict.fromkeys(q.walk[0] for q in questions))  # first-appearance order
  rng.shuffle(answers)
  target = round(eval_fraction * len(questions))
  eval_answers: set[str] = set()
  taken = 0
  for answer in answers:
    if taken >= target:
      break
    eval_answers.add(answer)
    taken += sum(q.walk[0] == answer for q in questions)
  return ([q for q in questions if q.walk[0] not in eval_answers],
          [q for q in questions if q.walk[0] in eval_answers])


def build_world(seed: int, num_entities: int, num_questions: int, *,
                eval_fraction: float = 0.2, shortcut_fraction: float = 0.25,
                min_hops: int = 2, max_hops: int = 4, style: str = "deep",
                locality: float = 0.0, distractors: int = 6, short_names: bool = False,
                prompt: str = "full", mark_names: bool = False,
                eval_shortcut_fraction: float = 0.5, stale_fraction: float = 0.0,
                swap_eval_pages: bool = False) -> World:
  """Builds the whole world from a seed; see the module docstring.

  style: "deep" (every entity described by vague clues, `compose.py`), "named" (the head
  entity named, 1+ hops of single-valued relations, `named.py`), "kinds" (the entity type a
  named entity's relation points to, answerable without tools; hops and shortcut_fraction
  unused; the held-out split is the last questions, half of each answer, `named.py`) or
  "lookup" (kind questions with glossary pages as evidence, a shortcut_fraction of them
  answerable without tools, split like "kinds", `lookup.py`) or "reference" (every question
  states its relation and its own link number; the relation's usual kind is right on a
  shortcut_fraction of the training questions and an eval_shortcut_fraction of the held-out
  ones, whose other questions form the evidence-only split; `lookup.py`) or "chain"
  (reference questions whose link's glossary page names the next term, and only the last of
  `max_hops` pages the kind; `min_hops` must equal `max_hops`; `chain.py`);
  stale_fraction: "reference" and "chain" only, the share of each relation's training
  shortcut questions whose glossary page (a chain's last) is stale, stating the other kind
  (`lookup.stale_terms`);
  swap_eval_pages: "reference" only, every held-out question's page states the other kind and
  its gold follows the page (`lookup.swapped`; the training split is unchanged);
  locality: see `build_graph`; distractors: distractor sentences per page (0-6; fewer =
  shorter pages, shorter episodes); short_names: see `build_graph`; prompt: "full" (three
  tool schemas, the whole answer-format instruction), "brief" (search and open, a one-line
  instruction before the question: ~150 prompt tokens, not ~500) or "answer" (no tools, only
  `## Exact Answer`: for kind questions); mark_names: every entity name in a question, and
  every other entity's name in a page, in bold (`pages.mark_names`).
  """
  if style not in _STYLES:
    raise ValueError(f"world style must be one of {sorted(_STYLES)}, got {style!r}")
  if prompt not in _PROMPTS:
    raise ValueError(f"world prompt must be one of {sorted(_PROMPTS)}, got {prompt!r}")
  low = 2 if style in ("deep", "chain") else 1
  if style == "chain" and min_hops != max_hops:
    raise ValueError(f"a chain world has one length: min_hops must equal max_hops, got "
                     f"{min_hops}, {max_hops}")
  if not low <= min_hops <= max_hops <= 4:
    raise ValueError(f"need {low} <= min_hops <= max_hops <= 4 for {style} questions, got "
                     f"{min_hops}, {max_hops}")
  if not 0.0 <= eval_fraction < 1.0 or not 0.0 <= shortcut_fraction <= 1.0 \
      or not 0.0 <= eval_shortcut_fraction <= 1.0:
    raise ValueError("eval_fraction must be in [0, 1), shortcut_fraction and "
                     "eval_shortcut_fraction in [0, 1]")
  if not 0.0 <= stale_fraction <= 1.0 or (stale_fraction
                                           and style not in ("reference", "chain")):
    raise ValueError(f"stale_fraction must be in [0, 1] and only set for reference or chain "
                     f"questions, got {stale_fraction} for style {style!r}")
  if swap_eval_pages and style != "reference":
    raise ValueError(f"swap_eval_pages is only for reference questions, got style {style!r}")
  if num_questions < 1:
    raise ValueError(f"num_questions must be positive, got {num_questions}")
  rng = random.Random(seed)
  graph = build_graph(rng, num_entities, locality, short_names)
  pages = render_pages(graph, rng, distractors)
  if style in ("reference", "chain"):
    questions = lookup.generate_reference_questions(
        graph, pages, rng, num_questions, shortcut_fraction,
        round(eval_fraction * num_questions), eval_shortcut_fraction)
  else:
    questions = _GENERATORS[style](graph, pages, rng, num_questions, shortcut_fraction,
                                   min_hops, max_hops)
  if mark_names:
    pattern = pages_lib.name_pattern(graph)
    pages = {n: pages_lib.marked_page(p, pattern) for n, p in pages.items()}
    questions = [dataclasses.replace(q, text=pages_lib.mark_names(q.text, pattern))
                 for q in questions]
  if style == "chain":  # drawn after the questions: the same questions as "reference"
    terms = chain.chain_terms(questions, rng, max_hops)
  if style in _KIND_STYLES:  # the last questions, whose answers alternate like all the others
    cut = len(questions) - round(eval_fraction * len(questions))
    train_q, eval_q = questions[:cut], questions[cut:]
  else:
    train_q, eval_q = _split_by_answer(questions, rng, eval_fraction)
  if swap_eval_pages:
    eval_q = [lookup.swapped(graph, q) for q in eval_q]
  stale = lookup.stale_terms(train_q, stale_fraction)
  if style == "chain":
    pages = {**pages, **chain.glossary_pages(graph, train_q + eval_q, terms, stale)}
  elif style in ("lookup", "reference"):
    pages = {**pages, **lookup.glossary_pages(graph, train_q + eval_q, stale)}
  records = []
  for i, q in enumerate(train_q + eval_q):
    if style == "chain":
      gold = chain.gold_annotations(graph, q, terms[q.text], lookup.question_term(q) in stale)
    elif style in _GLOSSARY_STYLES:
      gold = lookup.gold_annotations(graph, q, lookup.question_term(q) in stale)
    else:
      gold = compose.gold_annotations(graph, pages, q)
    label = gold["entities"]["E0"]["name"]
    if style == "kinds":  # the answer is E0's entity type; naming E0 itself is also right
      label = graph.nodes[q.walk[0]]["type"]
      gold["options"] = list(named.KINDS)
    records.append(carr_record(f"synth-{seed}-{i:05d}", q.text, label,
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
