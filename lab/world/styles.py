"""The world's question styles behind one interface, dispatched once (`make_style`).

A style is the kind of question a world asks. It makes the questions from the entity graph
and its pages, draws what its evidence needs after them (`prepare`), splits them into training
and held-out questions, adds the pages its evidence lives on, and writes each question's gold
annotations and label; `records.build_world` calls these in that order. Each style is a
frozen dataclass of the `world` keys it reads, checked on construction; `make_style` refuses a
key the named style does not read, so no setting is silently ignored.

  deep       every entity described by vague clues, 2-4 hops (compose.py)
  named      the head entity named, 1+ hops of single-valued relations (named.py)
  kinds      the entity type a named entity's relation points to; no tools needed (named.py)
  lookup     kind questions with glossary pages as evidence (lookup.py)
  reference  every question names its own link; the relation's usual kind is right on a share
             of the questions, only the page answers the others (lookup.py)
  chain      reference questions whose evidence is a chain of glossary pages (chain.py)

Every gold annotation names its style (`gold["style"]`), which the scripted expert and the
probes read instead of guessing it from the annotation's shape.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any, ClassVar

from lab.world import chain, compose, lookup, named


def _share(name: str, value: float) -> None:
  if not 0.0 <= value <= 1.0:
    raise ValueError(f"{name} must be in [0, 1], got {value}")


def split_by_answer(questions: list, rng: random.Random, eval_fraction: float):
  """(train, eval) split by answer entity, so no held-out answer is a training answer."""
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


def split_last(questions: list, eval_fraction: float):
  """(train, eval): the last questions held out (their answers alternate like the others)."""
  cut = len(questions) - round(eval_fraction * len(questions))
  return questions[:cut], questions[cut:]


class _Style:
  """What a style does unless it says otherwise: nothing drawn after the questions, no stale
  page, no extra page, the answer entity's name as the label."""

  def prepare(self, questions: list, rng: random.Random) -> Any:
    """What the style draws after the questions (and their names' marks); None here."""
    return None

  def stale(self, train: list) -> frozenset:
    """Glossary terms whose page is stale (none but in reference and chain worlds)."""
    return frozenset()

  def pages(self, graph, questions: list, state: Any, stale: frozenset) -> dict:
    """The pages the evidence adds to the entities' own (none here)."""
    return {}

  def label(self, graph, q, gold: dict) -> str:
    return gold["entities"]["E0"]["name"]


@dataclasses.dataclass(frozen=True)
class Deep(_Style):
  """Vague-clue questions of `min_hops`..`max_hops` hops, a `shortcut_fraction` of them with a
  shortcut."""
  min_hops: int = 2
  max_hops: int = 4
  shortcut_fraction: float = 0.25
  name: ClassVar[str] = "deep"
  lowest: ClassVar[int] = 2  # the fewest hops a question of the style can have

  def __post_init__(self):
    if not self.lowest <= self.min_hops <= self.max_hops <= 4:
      raise ValueError(f"need {self.lowest} <= min_hops <= max_hops <= 4 for {self.name} "
                       f"questions, got {self.min_hops}, {self.max_hops}")
    _share("shortcut_fraction", self.shortcut_fraction)

  def questions(self, graph, pages, rng, num_questions: int, num_eval: int) -> list:
    del num_eval
    return compose.generate_questions(graph, pages, rng, num_questions,
                                      self.shortcut_fraction, self.min_hops, self.max_hops)

  def split(self, graph, questions: list, rng: random.Random, eval_fraction: float):
    return split_by_answer(questions, rng, eval_fraction)

  def gold(self, graph, pages, q, state: Any, stale: frozenset) -> dict:
    return compose.gold_annotations(graph, pages, q)


@dataclasses.dataclass(frozen=True)
class Named(Deep):
  """The head entity named, `min_hops`..`max_hops` hops of single-valued relations."""
  name: ClassVar[str] = "named"
  lowest: ClassVar[int] = 1

  def questions(self, graph, pages, rng, num_questions: int, num_eval: int) -> list:
    del num_eval
    return named.generate_named_questions(graph, pages, rng, num_questions,
                                          self.shortcut_fraction, self.min_hops, self.max_hops)


@dataclasses.dataclass(frozen=True)
class Kinds(Deep):
  """The entity type a named entity's relation points to: one hop, no shortcut setting."""
  min_hops: int = dataclasses.field(default=1, init=False)
  max_hops: int = dataclasses.field(default=1, init=False)
  shortcut_fraction: float = dataclasses.field(default=0.0, init=False)
  name: ClassVar[str] = "kinds"
  lowest: ClassVar[int] = 1

  def questions(self, graph, pages, rng, num_questions: int, num_eval: int) -> list:
    return named.generate_kind_questions(graph, pages, rng, num_questions)

  def split(self, graph, questions: list, rng: random.Random, eval_fraction: float):
    return split_last(questions, eval_fraction)

  def gold(self, graph, pages, q, state: Any, stale: frozenset) -> dict:
    return {**compose.gold_annotations(graph, pages, q), "options": list(named.KINDS)}

  def label(self, graph, q, gold: dict) -> str:
    return graph.nodes[q.walk[0]]["type"]  # E0's type; naming E0 itself is also right


@dataclasses.dataclass(frozen=True)
class Lookup(_Style):
  """Kind questions whose evidence is a glossary page; a `shortcut_fraction` of them
  answerable without it."""
  shortcut_fraction: float = 0.25
  name: ClassVar[str] = "lookup"

  def __post_init__(self):
    _share("shortcut_fraction", self.shortcut_fraction)

  def questions(self, graph, pages, rng, num_questions: int, num_eval: int) -> list:
    return lookup.generate_lookup_questions(graph, pages, rng, num_questions,
                                            self.shortcut_fraction)

  def split(self, graph, questions: list, rng: random.Random, eval_fraction: float):
    return split_last(questions, eval_fraction)

  def pages(self, graph, questions: list, state: Any, stale: frozenset) -> dict:
    return lookup.glossary_pages(graph, questions, stale)

  def gold(self, graph, pages, q, state: Any, stale: frozenset) -> dict:
    return lookup.gold_annotations(graph, q, lookup.question_term(q) in stale)


@dataclasses.dataclass(frozen=True)
class Reference(Lookup):
  """Every question names its own link: the relation's usual kind is right on a
  `shortcut_fraction` of the training questions and an `eval_shortcut_fraction` of the
  held-out ones; a `stale_fraction` of each relation's training shortcut questions get a page
  stating the other kind; `swap_eval_pages`: every held-out page states the other kind, its
  gold following it (the page-swap evaluation)."""
  eval_shortcut_fraction: float = 0.5
  stale_fraction: float = 0.0
  swap_eval_pages: bool = False
  name: ClassVar[str] = "reference"

  def __post_init__(self):
    for key in ("shortcut_fraction", "eval_shortcut_fraction", "stale_fraction"):
      _share(key, getattr(self, key))

  def questions(self, graph, pages, rng, num_questions: int, num_eval: int) -> list:
    return lookup.generate_reference_questions(graph, pages, rng, num_questions,
                                               self.shortcut_fraction, num_eval,
                                               self.eval_shortcut_fraction)

  def split(self, graph, questions: list, rng: random.Random, eval_fraction: float):
    train, held_out = split_last(questions, eval_fraction)
    if self.swap_eval_pages:
      held_out = [lookup.swapped(graph, q) for q in held_out]
    return train, held_out

  def stale(self, train: list) -> frozenset:
    return lookup.stale_terms(train, self.stale_fraction)


@dataclasses.dataclass(frozen=True)
class Chain(Reference):
  """Reference questions whose link's glossary page names the next term, and only the last
  of `hops` pages the kind (the first also states a neighbouring record's kind, the lure)."""
  swap_eval_pages: bool = dataclasses.field(default=False, init=False)
  hops: int = 2
  name: ClassVar[str] = "chain"

  def __post_init__(self):
    super().__post_init__()
    if not 2 <= self.hops <= 4:
      raise ValueError(f"a chain has 2 to 4 pages, got hops={self.hops}")

  def prepare(self, questions: list, rng: random.Random) -> dict:
    return chain.chain_terms(questions, rng, self.hops)  # question text -> its terms

  def pages(self, graph, questions: list, state: dict, stale: frozenset) -> dict:
    return chain.glossary_pages(graph, questions, state, stale)

  def gold(self, graph, pages, q, state: dict, stale: frozenset) -> dict:
    return chain.gold_annotations(graph, q, state[q.text], lookup.question_term(q) in stale)


STYLES = {s.name: s for s in (Deep, Named, Kinds, Lookup, Reference, Chain)}
KEYS = ("min_hops", "max_hops", "shortcut_fraction", "eval_shortcut_fraction",
        "stale_fraction", "swap_eval_pages")  # every style key of the `world` section


def style_keys(cls) -> tuple[str, ...]:
  """The `world` keys a style reads (a chain's `hops` is the section's min_hops and max_hops)."""
  keys = tuple(f.name for f in dataclasses.fields(cls) if f.init)
  return tuple(k for k in keys if k != "hops") + (("min_hops", "max_hops") if cls is Chain
                                                    else ())


def make_style(name: str, **keys) -> _Style:
  """The style `name` with its settings from `keys` (the `world` keys it reads); a key it does
  not read is an error naming the styles that do."""
  if name not in STYLES:
    raise ValueError(f"world style must be one of {sorted(STYLES)}, got {name!r}")
  cls = STYLES[name]
  readers = {k: [n for n, c in STYLES.items() if k in style_keys(c)] for k in keys}
  unread = {k: v for k, v in readers.items() if name not in v}
  if unread:
    raise ValueError("; ".join(f"world.{k} is not read by {name} questions (only by "
                               f"{', '.join(v) or 'none'})" for k, v in unread.items()))
  if cls is Chain:
    lo, hi = keys.pop("min_hops", 2), keys.pop("max_hops", 2)
    if lo != hi:
      raise ValueError(f"a chain world has one length: min_hops must equal max_hops, got "
                       f"{lo}, {hi}")
    keys["hops"] = hi
  return cls(**keys)
