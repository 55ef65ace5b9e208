"""Chain questions: reference questions whose evidence is a chain of glossary pages (style "chain").

A chain question reads exactly like a reference question (lookup.py), built from the same draws:
"X, a painter, studied at something (link 417). Is that a city or an organization?" Its
relation's usual kind is the shortcut, right on a `shortcut_fraction` of the training questions
and wrong on the evidence-only held-out ones. What changes is the evidence: the glossary page of
the question's link does not state the kind; it names the next term, and only the last page of
the chain states the kind. With 2 hops:

  Glossary: link 417   "Under record 3919, the trail continues under code 733. Under record
                        3920, its object is of the kind city. ..."
  Glossary: code 733   "Under record 6131, its object is of the kind organization. ..."

(each page's body as lookup.glossary_entry writes it: the deciding sentence, notes, and last
the line naming the page's own term, the only one a listing shows). The first page also states
the kind of the next record, 3920, not its own (the lure, `lookup.lure_sentence`): always the
relation's usual kind, so it is right exactly where the shortcut is. A reader who stops there
and answers it, citing the first page, has one rubric supported ("Link 417 continues under code
733.") and none connected to the answer: the page never says what code 733's object is. So the
connectivity check decides that reply's rubric reward (0 with it, 1/2 without), and the reply
is wrong on every evidence-only question. Stale pages (`stale`, as in lookup.py): the last page
of a share of the training shortcut questions states the other kind; then the whole chain, the
lure and the shortcut are each right on about the same share of training questions, and only
the rubric reward tells them apart. So a cited answer takes two
searches and two opens, and the second query ("glossary code 733") is read off the first
page's body, never off the question or a listing. Each hop's term has its own marker word (`MARKERS`: link,
code, entry, note), so the next search copies the 3 digits after a word the question never holds:
the copy a tiny policy learns (docs/results.md), not an invented name.

Entities and rubrics, for a chain of terms t_0 (the question's) .. t_{h-1}:
  E0 the answer kind; E_j (1 <= j < h) the term t_{h-j}: E1 is the last page's term, nearest the
  answer, as in the paper's numbering. Hidden entities are the terms the question does not hold.
  One rubric per page, in chain order:
    "Link 417 continues under <E1>."       [E1]      (2 hops; with more, "<E2> continues under
    "<E1> is of the kind <E0>."             [E1, E0]   <E1>." in between)
So the three parts of the rubric reward each decide part of it: citing only the last page
supports half the rubrics; a reply that never names E1 identifies none; citing only the first
page (after reading both, or answering the lure) supports a rubric that does not connect to E0,
which earns nothing (tests/lab/test_chain_world.py).
"""
from __future__ import annotations

import random

import networkx as nx

from lab.world import named
from lab.world.lookup import (glossary_entry, kind_statement, lure_sentence, other_kind,
                              question_term, relation_words, usual_kind)
from lab.world.pages import EntityPage
from lab.world.questions import Question

MARKERS = ("link", "code", "entry", "note")  # the marker word of each hop's term, in order


def chain_terms(questions: list[Question], rng: random.Random,
                hops: int) -> dict[str, tuple[str, ...]]:
  """question text -> its chain of `hops` terms: the question's own link, then one term per
  further hop. Every number in the world is used once, links included (drawn from `rng`), so
  no term's search can find another term's page."""
  if not 2 <= hops <= len(MARKERS):
    raise ValueError(f"a chain has 2 to {len(MARKERS)} hops, got {hops}")
  links = [question_term(q) for q in questions]
  free = sorted(set(range(100, 1000)) - {int(t.split()[1]) for t in links})
  need = len(questions) * (hops - 1)
  if need > len(free):
    raise ValueError(f"{len(questions)} questions of {hops} hops need {need} more 3-digit "
                     f"codes; {len(free)} are left")
  codes = iter(rng.sample(free, need))
  return {q.text: (link,) + tuple(f"{m} {next(codes)}" for m in MARKERS[1:hops])
          for q, link in zip(questions, links)}


def page_statement(terms: tuple[str, ...], i: int, kind: str) -> str:
  """What the glossary page of terms[i] decides: the next term, or (the last) the kind."""
  if i + 1 < len(terms):
    return f"the trail continues under {terms[i + 1]}"
  return kind_statement(kind)


def chain_pages(terms: tuple[str, ...], kind: str, lure_kind: str) -> list[EntityPage]:
  """The glossary pages of one chain, in hop order; the first also states `lure_kind` of the
  next record (`lookup.lure_sentence`)."""
  return [glossary_entry(term, page_statement(terms, i, kind),
                         lure_sentence(term, lure_kind) if i == 0 else "")
          for i, term in enumerate(terms)]


def glossary_pages(g: nx.MultiDiGraph, questions: list[Question],
                   terms: dict[str, tuple[str, ...]],
                   stale: frozenset[str] = frozenset()) -> dict[str, EntityPage]:
  """node id -> page of every term of every question's chain; the last page of a question
  whose link is in `stale` states the kind other than the answer's."""
  pages = {}
  for q in questions:
    kind = g.nodes[q.walk[0]]["type"]
    stated = other_kind(kind) if question_term(q) in stale else kind
    pages.update((p.node, p) for p in chain_pages(terms[q.text], stated, usual_kind(q)))
  return pages


def entity_id(terms: tuple[str, ...], i: int) -> str:
  """The placeholder of terms[i] (1 <= i < len): E1 is the last term, nearest the answer;
  i = len(terms) is the answer, E0."""
  return f"E{len(terms) - i}"


def rubric(terms: tuple[str, ...], i: int) -> tuple[str, list[str]]:
  """Rubric i of a chain and its placeholder ids: page i's statement, with the hidden terms
  and the kind as placeholders."""
  ids = [] if i == 0 else [entity_id(terms, i)]
  ids.append(entity_id(terms, i + 1))  # past the last term: E0
  head = terms[0][0].upper() + terms[0][1:] if i == 0 else f"<{ids[0]}>"
  verb = "continues under" if i + 1 < len(terms) else "is of the kind"
  return f"{head} {verb} <{ids[-1]}>.", ids


def gold_annotations(g: nx.MultiDiGraph, q: Question, terms: tuple[str, ...],
                     stale: bool = False) -> dict:
  """metadata.gold of a chain question: entities E0 (the kind) and E1..E_{h-1} (the hidden
  terms), one rubric per page with the true page's sentence as evidence (a stale last page
  does not hold it); `term` the question's link, `chain` every term in search order,
  `shortcut_answer` the relation's usual kind (the first page's lure states it too), `stale`
  whether the last page states the other kind."""
  kind = g.nodes[q.walk[0]]["type"]
  pages = chain_pages(terms, kind, usual_kind(q))
  entities = {"E0": {"name": kind, "aliases": [], "url": pages[-1].url}}
  for i in range(1, len(terms)):
    entities[entity_id(terms, i)] = {"name": terms[i], "aliases": [], "url": pages[i].url}
  rubrics = []
  for i, page in enumerate(pages):
    text, ids = rubric(terms, i)
    rubrics.append({"text": text, "placeholders": ids, "url": page.url,
                    "evidence": page.facts[("glossary",)]})
  return {"entities": entities, "rubrics": rubrics, "shortcut": q.shortcut, "hops": len(terms),
          "options": list(named.KINDS), "term": terms[0], "chain": list(terms),
          "shortcut_answer": usual_kind(q),
          "relation": relation_words(q), "stale": stale}

