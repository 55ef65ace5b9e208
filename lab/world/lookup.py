"""Lookup questions: kind questions whose evidence is a glossary page (style "lookup").

The smallest world in which citing evidence is a skill a 2-layer CPU policy learns in minutes,
and in which an answer can be right without it: the paper's shortcut in miniature.

A question asks the kind of the thing a named subject points to, as in the "kinds" world:

  plain (admits a shortcut): "X, a painter, studied at something. Is that a city or an
      organization? Answer with one word."  The relation decides the answer, so a policy
      that has learned the relation answers right without any tool.
  coded (no shortcut): "X, a painter, has link 417 to something. Is that ... ?"  Every coded
      question has its own link number, so a held-out one was never seen in training and only
      its glossary page tells the answer.

The corpus holds every entity page plus one glossary page per term (a relation's wording or a
link number), titled "Glossary: <term>". The answer is in the page's body, never in a search
listing (`glossary_entry`): the deciding sentence opens the body under the page's own record
number ("Under record 3919, its object is of the kind organization."), two notes
that state no kind follow, and the body ends with the one line that names the term ("Record
3919 is filed in the glossary as link 417."). A search for "glossary <term>" ranks the page
first and shows that last line as its description (the sentence sharing most query words;
nothing follows it), so an agent must open the page to read the kind, and answers citing the
page's URL. Each record has one rubric, about E0, the answer kind itself ("Whatever a subject
studied at is of the kind <E0>."), whose evidence is the deciding sentence: supported only when
the agent received that sentence from a page it cites (an opened page; a listing never shows
it). A right answer without it earns outcome 1 and rubric reward 0, a shortcut by the definition
of `lab.metrics` (right, evidence not connected). The record number ties the
sentence to its term without the term's words, so no other page holds it and no query for the
term matches it.

The search term and the URL are read off the question's words (a relation out of five, or the
digits of a link number), never an entity's invented name: a tiny policy learns to copy names
only after thousands of examples (docs/results.md).

Reference questions (style "reference", `generate_reference_questions`) are the world in which
only cited evidence buys accuracy. Every question states its relation AND its own link number:
"X, a painter, studied at something (link 417). Is that a city or an organization?" The
relation's usual kind (studied at -> organization) is the shortcut, right on most training
questions but not all: on the others (exceptions) the thing is of the other kind, and only the
glossary page of the question's own link says so. An exception reads exactly like any other
question. The held-out questions whose shortcut is wrong are the evidence-only split (gold
`shortcut` False); `shortcut_answer` in the gold names the relation's usual kind.

Stale pages (`stale_terms`, reference questions only): on a share of the training questions
whose shortcut is right, the glossary page is out of date and states the other kind. Then the
page and the relation are each right on most training questions but not all, so the outcome
reward alone pays reading no more than the shortcut; only a rubric that asks for a cited,
supporting page tells them apart. The gold evidence stays the true sentence, which no page of
such a question holds: no answer earns its rubric. Held-out pages are never stale.

Page swap (`swapped`, `world.swap_eval_pages`): every held-out question's thing is replaced by
one of the other kind, so its page states the other answer and its gold follows; a policy that
reads answers the page, one that takes the shortcut does not (the share that follows the page,
per split: `lab.probes.page_swap`).
"""
from __future__ import annotations

import collections
import dataclasses
import random
import re

import networkx as nx

from lab.world import named
from lab.world import ontology as on
from lab.world.pages import DOMAIN, EntityPage
from lab.world.questions import Question

_CODE = re.compile(r" has (link \d+) to something\.| \((link \d+)\)\.")
_PUBLISHED = "2020-01-01"
STATED_KIND = re.compile(r"is of the kind (\w+)\.")  # the kind a glossary page states


GLOSSARY_STYLES = ("lookup", "reference", "chain")  # the evidence is a glossary page
LINKED_STYLES = ("reference", "chain")  # every question names its own link


def is_lookup(gold: dict) -> bool:
  """Whether `metadata.gold` is a lookup question's (its style's evidence is a glossary page,
  lab/world/styles.py)."""
  return gold.get("style") in GLOSSARY_STYLES


def question_term(q: Question) -> str:
  """The glossary term of a lookup question: its link ("link 417") or relation ("studied at")."""
  code = _CODE.search(q.text)
  if code:
    return code.group(1) or code.group(2)
  return relation_words(q)


def relation_words(q: Question) -> str:
  """The question's relation as worded in it: "studied at"."""
  return on.RELATIONS[q.hops[0].relation].forward.format(x="").strip()


def _phrase(term: str) -> str:
  """The term as a verb phrase: "studied at", "has link 417 to"."""
  return f"has {term} to" if term.startswith("link ") else term


def glossary_url(term: str) -> str:
  return f"https://{DOMAIN}/glossary/{term.replace(' ', '_')}"


_RELATION_TERMS = sorted(r.forward.format(x="").strip() for r in on.RELATIONS.values())
_NOTES = ("Revised in {year}.", "Added in {year}.", "Cross-referenced twice.",
          "Listed in the old index.", "Checked by the editors in {year}.",
          "Moved from another heading.")  # a glossary page's notes: no kind, no query word


def record_number(term: str) -> int:
  """The glossary page's record number: 4 digits, one per term (a numbered term's 3 digits,
  used by one term only in a world, times 7, plus 1000; a relation 8000 on), so never a term's
  own number."""
  digits = term.rsplit(" ", 1)[-1]
  if digits.isdigit():
    return 1000 + 7 * int(digits)  # n in 100..999: distinct, in 1700..7993
  return 8000 + _RELATION_TERMS.index(term)


def deciding_sentence(term: str, statement: str) -> str:
  """The sentence of `term`'s page that decides: "Under record 3919, <statement>."."""
  return f"Under record {record_number(term)}, {statement}."


def glossary_entry(term: str, statement: str, lure: str = "") -> EntityPage:
  """The glossary page of `term`: its deciding sentence (`statement`, e.g. "its object is of
  the kind city"), then `lure` if given (a sentence about another record: `lure_sentence`),
  two notes drawn per term that state nothing the questions ask, then the line that names the
  term, last, so that a listing shows it and not the statement
  (`rollout.tools.corpus.best_snippet` shows the best-matching sentence and what follows)."""
  sentence = deciding_sentence(term, statement)
  draw = random.Random(f"glossary/{term}")
  notes = [n.format(year=draw.randint(1950, 2019)) for n in draw.sample(_NOTES, 2)]
  named = f"Record {record_number(term)} is filed in the glossary as {term}."
  body = [sentence, lure, *notes, named] if lure else [sentence, *notes, named]
  return EntityPage(f"glossary:{term}", glossary_url(term), f"Glossary: {term}",
                    " ".join(body), _PUBLISHED, {("glossary",): sentence})


def lure_sentence(term: str, kind: str) -> str:
  """A sentence for `term`'s page about the next record, not the term's: "Under record 3920,
  its object is of the kind city." (a numbered term's: their records step by 7, so no term
  owns that record)."""
  if not term.rsplit(" ", 1)[-1].isdigit():
    raise ValueError(f"a lure sentence needs a numbered term, got {term!r}")
  return f"Under record {record_number(term) + 1}, {kind_statement(kind)}."


def kind_statement(kind: str) -> str:
  return f"its object is of the kind {kind}"


def glossary_page(term: str, kind: str) -> EntityPage:
  return glossary_entry(term, kind_statement(kind))


def glossary_pages(g: nx.MultiDiGraph, questions: list[Question],
                   stale: frozenset[str] = frozenset()) -> dict[str, EntityPage]:
  """node id -> page of every term the questions use (one page per term); the page of a term
  in `stale` states the kind other than the answer's."""
  pages = {}
  for q in questions:
    term, kind = question_term(q), g.nodes[q.walk[0]]["type"]
    page = glossary_page(term, other_kind(kind) if term in stale else kind)
    pages[page.node] = page
  return pages


def other_kind(kind: str) -> str:
  return next(k for k in named.KINDS if k != kind)


def swapped(g: nx.MultiDiGraph, q: Question) -> Question:
  """A reference question whose thing is of the other kind: the same text, so its page states
  the other kind, its gold follows the page, and its shortcut flag flips (the page-swap
  evaluation, `world.swap_eval_pages`)."""
  other = other_kind(g.nodes[q.walk[0]]["type"])
  thing = min(n for n, d in g.nodes(data=True) if d["type"] == other)
  return dataclasses.replace(q, walk=(thing,) + q.walk[1:], shortcut=not q.shortcut)


def stale_terms(train: list[Question], fraction: float) -> frozenset[str]:
  """Terms of the training questions whose glossary page is stale: of the shortcut questions
  of each relation, in order, a running `fraction`, so that every relation, and so both usual
  kinds, keep the same share."""
  seen, taken, stale = collections.Counter(), collections.Counter(), set()
  for q in train:
    if q.shortcut:
      relation = q.hops[0].relation
      seen[relation] += 1
      if taken[relation] + 1 <= fraction * seen[relation]:
        taken[relation] += 1
        stale.add(question_term(q))
  return frozenset(stale)


def generate_lookup_questions(g: nx.MultiDiGraph, pages: dict[str, EntityPage],
                              rng: random.Random, num_questions: int,
                              shortcut_fraction: float, *_) -> list[Question]:
  """Kind questions (`named.generate_kind_questions`, answers alternating), taken in pairs (one
  of each answer); a running `shortcut_fraction` of the pairs plain, the rest coded with
  distinct 3-digit link numbers. Only pairs about two people are coded: an organization is
  always based in a city and an award always presented by an organization, so their nouns
  would give a coded answer away, while people were born in cities and studied at or worked
  for organizations."""
  kinds = named.generate_kind_questions(g, pages, rng, num_questions)
  codes = iter(rng.sample(range(100, 1000), num_questions))
  out, plain_pairs = [], 0
  for i, q in enumerate(kinds):
    pair = i // 2
    if i % 2 == 0:
      people = all(g.nodes[k.walk[1]]["type"] == on.PERSON for k in kinds[i:i + 2])
      plain = not people or plain_pairs < shortcut_fraction * (pair + 1)
      plain_pairs += plain
    if plain:
      out.append(Question(q.walk, q.hops, q.attr_clues, q.text, True, 0))
    else:
      verb = f"has link {next(codes)} to something"
      out.append(Question(q.walk, q.hops, q.attr_clues, named.kind_text(g, q.walk[1], verb),
                          False, 0))
  return out


def usual_kind(q: Question) -> str:
  """The kind the question's relation points to in the graph: the shortcut answer."""
  return on.RELATIONS[q.hops[0].relation].object


def generate_reference_questions(g: nx.MultiDiGraph, pages: dict[str, EntityPage],
                                 rng: random.Random, num_questions: int,
                                 shortcut_fraction: float, num_eval: int,
                                 eval_shortcut_fraction: float) -> list[Question]:
  """Kind questions (`named.generate_kind_questions`), each with its own distinct 3-digit link
  number in the text; held out: the last `num_eval`. A running `shortcut_fraction` of the
  training questions (`eval_shortcut_fraction` of the held-out ones) are of their relation's
  usual kind; the rest are exceptions, whose walk[0] is replaced by an entity of the other
  kind. Taken in pairs (one question of each usual kind; `num_eval` even), so each split's
  answers stay balanced and so do its exceptions."""
  if num_eval % 2 or (num_questions - num_eval) % 2:
    raise ValueError(f"reference questions come in pairs: need even splits, got "
                     f"{num_questions - num_eval} + {num_eval}")
  if num_questions > 900:
    raise ValueError(f"at most 900 reference questions (3-digit link numbers), got "
                     f"{num_questions}")
  kinds = named.generate_kind_questions(g, pages, rng, num_questions)
  by_kind = {k: sorted(n for n, d in g.nodes(data=True) if d["type"] == k) for k in named.KINDS}
  codes = iter(rng.sample(range(100, 1000), num_questions))
  cut = num_questions - num_eval
  out, usual = [], 0
  for i, q in enumerate(kinds):
    fraction = eval_shortcut_fraction if i >= cut else shortcut_fraction
    index = i - cut if i >= cut else i  # position in its split
    if index % 2 == 0:  # pairs (one of each usual kind) keep the answers balanced
      pair = index // 2
      usual = 0 if pair == 0 else usual
      shortcut = usual < fraction * (pair + 1)  # keep the running share at the target
      usual += shortcut
    walk = q.walk
    if not shortcut:
      walk = (rng.choice(by_kind[other_kind(usual_kind(q))]),) + q.walk[1:]
    verb = on.RELATIONS[q.hops[0].relation].forward.format(x="something")
    text = named.kind_text(g, q.walk[1], f"{verb} (link {next(codes)})")
    out.append(Question(walk, q.hops, q.attr_clues, text, shortcut, 0))
  return out


def gold_annotations(g: nx.MultiDiGraph, q: Question, stale: bool = False) -> dict:
  """metadata.gold of a lookup question: E0 is the answer kind, its one rubric the glossary's
  true sentence; `shortcut_answer` (reference questions only) the relation's usual kind and
  `stale` whether the question's page states the other kind."""
  kind = g.nodes[q.walk[0]]["type"]
  term = question_term(q)
  page = glossary_page(term, kind)
  gold = {"entities": {"E0": {"name": kind, "aliases": [], "url": page.url}},
          "rubrics": [{"text": f"Whatever a subject {_phrase(term)} is of the kind <E0>.",
                       "placeholders": ["E0"], "url": page.url,
                       "evidence": page.facts[("glossary",)]}],
          "shortcut": q.shortcut, "hops": 1, "options": list(named.KINDS), "term": term}
  if is_reference(q):
    gold["shortcut_answer"] = usual_kind(q)
    gold["relation"] = relation_words(q)
    gold["stale"] = stale
  return gold


def is_reference(q: Question) -> bool:
  """Whether `q` states both its relation and its own link number (style "reference")."""
  code = _CODE.search(q.text)
  return bool(code and code.group(2))
