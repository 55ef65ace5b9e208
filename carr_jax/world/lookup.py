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
link number), titled "Glossary: <term>", whose single sentence is the evidence: "Whatever a
subject studied at is of the kind organization." An agent searches "glossary <term>", the page
ranks first, and it answers citing the page's URL. Each record has one rubric, about E0, the
answer kind itself ("Whatever a subject studied at is of the kind <E0>."), supported only when
the cited content holds that sentence: a right answer without the citation earns outcome 1 and
rubric reward 0, a shortcut by the definition of `carr_jax.evaluation.heldout` (right, evidence not
connected).

The search term and the URL are read off the question's words (a relation out of five, or the
digits of a link number), never an entity's invented name: a tiny policy learns to copy names
only after thousands of examples (docs/results.md).
"""
from __future__ import annotations

import random
import re

import networkx as nx

from carr_jax.world import named
from carr_jax.world import ontology as on
from carr_jax.world.pages import DOMAIN, EntityPage
from carr_jax.world.questions import Question

_CODE = re.compile(r" has (link \d+) to something\.")
_PUBLISHED = "2020-01-01"


def is_lookup(gold: dict) -> bool:
  """Whether `metadata.gold` is a lookup question's (it names the glossary term)."""
  return "term" in gold


def question_term(q: Question) -> str:
  """The glossary term of a lookup question: its link ("link 417") or relation ("studied at")."""
  code = _CODE.search(q.text)
  if code:
    return code.group(1)
  return on.RELATIONS[q.hops[0].relation].forward.format(x="").strip()


def _phrase(term: str) -> str:
  """The term as a verb phrase: "studied at", "has link 417 to"."""
  return f"has {term} to" if term.startswith("link ") else term


def glossary_url(term: str) -> str:
  return f"https://{DOMAIN}/glossary/{term.replace(' ', '_')}"


def glossary_page(term: str, kind: str) -> EntityPage:
  sentence = f"Whatever a subject {_phrase(term)} is of the kind {kind}."
  return EntityPage(f"glossary:{term}", glossary_url(term), f"Glossary: {term}", sentence,
                    _PUBLISHED, {("glossary",): sentence})


def glossary_pages(g: nx.MultiDiGraph, questions: list[Question]) -> dict[str, EntityPage]:
  """node id -> page of every term the questions use (one page per term)."""
  pages = {}
  for q in questions:
    page = glossary_page(question_term(q), g.nodes[q.walk[0]]["type"])
    pages[page.node] = page
  return pages


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


def gold_annotations(g: nx.MultiDiGraph, q: Question) -> dict:
  """metadata.gold of a lookup question: E0 is the answer kind, its one rubric the glossary's."""
  kind = g.nodes[q.walk[0]]["type"]
  term = question_term(q)
  page = glossary_page(term, kind)
  return {"entities": {"E0": {"name": kind, "aliases": [], "url": page.url}},
          "rubrics": [{"text": f"Whatever a subject {_phrase(term)} is of the kind <E0>.",
                       "placeholders": ["E0"], "url": page.url, "evidence": page.content}],
          "shortcut": q.shortcut, "hops": 1, "options": list(named.KINDS), "term": term}
