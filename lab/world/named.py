"""Named-head questions: the chain starts at an entity the question names, so it can be searched.

The deep questions of `compose.py` describe every entity by vague clues; working out the head
entity is a reasoning task no small model learns in minutes. A named-head question states the
head's name and noun and then walks relations that each have exactly one object (born in,
studied at, based in, ...), so its answer is unique by construction:

  "Zorath Kelmin, a painter, studied at a university. Which city is home to this university?"

An agent solves it the way a deep-search agent works, hop by hop: search the name, open its
page, read the next entity's name off the page, search and open that one, and answer citing the
pages it read. The rubrics are those of `compose.rubrics` (one per relation and noun, each with
its evidence sentence), so the CaRR judge scores these questions like any other.

Kind questions (`style="kinds"`, `generate_kind_questions`) are the easiest world there is,
for tests that a trainer learns at all: "X, a painter, studied at something. Is that a city or
an organization? Answer with one word." The answer is the object's entity type, which the
relation alone decides (born in, based in -> city; studied at, worked for, presented by ->
organization), so a policy can answer from the question without any tool; the two answers are
drawn in equal numbers, so always giving one scores 1/2 and anything better is learned from
the question's words.

Shortcut: a question admits one when its answer is also a neighbour of an entity before the
last hop (with `build_graph(locality>0)`, people tend to study where they were born), so the
answer can be read off an earlier page without visiting the last entity. Such a guess is right
on these questions and wrong on the others; only the visit earns the last hop's rubrics.
"""
from __future__ import annotations

import random

import networkx as nx

from lab.world import ontology as on
from lab.world.compose import _verb
from lab.world.pages import EntityPage
from lab.world.questions import Hop, Question
from rollout.tools.backend import Page
from rollout.tools.text import LeakFilter


def _named(g: nx.MultiDiGraph, node: str) -> str:
  d = g.nodes[node]
  return f"{d['name']}, {on.article(d['noun'])} {d['noun']},"


def _out_steps(g: nx.MultiDiGraph, node: str) -> list[tuple[str, Hop]]:
  """(object, hop) of each outgoing relation: E_{i+1} -> E_i, so the hop is not forward."""
  return [(b, Hop(rel, False)) for _, b, rel in g.out_edges(node, keys=True)]


def named_walk(g: nx.MultiDiGraph, rng: random.Random, head: str,
               num_hops: int) -> tuple[tuple[str, ...], tuple[Hop, ...]] | None:
  """(walk E0..En with En = head, hops) following outgoing relations, or None."""
  chain, hops = [head], []
  for _ in range(num_hops):
    options = [(b, h) for b, h in _out_steps(g, chain[-1]) if b not in chain]
    if not options:
      return None
    nxt, hop = rng.choice(options)
    chain.append(nxt)
    hops.append(hop)
  return tuple(reversed(chain)), tuple(reversed(hops))


def admits_shortcut(g: nx.MultiDiGraph, walk: tuple[str, ...]) -> bool:
  """Whether E0 is linked to an entity before the last hop (E2..En): named on its page."""
  return any(g.has_edge(walk[j], walk[0]) or g.has_edge(walk[0], walk[j])
             for j in range(2, len(walk)))


def named_text(g: nx.MultiDiGraph, walk, hops) -> str:
  n = len(hops)
  if n == 1:
    verb = _verb(hops[0], True).format(x=_named(g, walk[1])[:-1])
    return f"Which {g.nodes[walk[0]]['noun']} {verb}?"
  sentences = []
  for i in range(n - 1, 0, -1):  # hop i joins E_i and E_{i+1}; E_{i+1} speaks
    far, near = walk[i + 1], walk[i]
    subject = _named(g, far) if i + 1 == n else f"This {g.nodes[far]['noun']}"
    obj = f"{on.article(g.nodes[near]['noun'])} {g.nodes[near]['noun']}"
    sentences.append(f"{subject} {_verb(hops[i], False).format(x=obj)}.")
  verb = _verb(hops[0], True).format(x=f"this {g.nodes[walk[1]]['noun']}")
  sentences.append(f"Which {g.nodes[walk[0]]['noun']} {verb}?")
  return " ".join(sentences)


def generate_named_questions(g: nx.MultiDiGraph, pages: dict[str, EntityPage],
                             rng: random.Random, num_questions: int,
                             shortcut_fraction: float, min_hops: int, max_hops: int,
                             give_up_after: int = 2000) -> list[Question]:
  """`num_questions` distinct named-head questions, about `shortcut_fraction` of them admitting
  a shortcut (2+ hops only); ValueError after `give_up_after` failed draws in a row."""
  nodes = list(g.nodes)
  questions: list[Question] = []
  seen: set[tuple[str, ...]] = set()
  failures = num_shortcut = num_multi = 0
  while len(questions) < num_questions and failures < give_up_after:
    failures += 1
    num_hops = min_hops + len(questions) % (max_hops - min_hops + 1)  # an even mix of lengths
    drawn = named_walk(g, rng, rng.choice(nodes), num_hops)
    if drawn is None or drawn[0] in seen:
      continue
    walk, hops = drawn
    shortcut = admits_shortcut(g, walk)
    # Keep the running share of shortcut questions among multi-hop ones at the target.
    if num_hops > 1 and failures <= give_up_after // 2:
      if shortcut != (num_shortcut < shortcut_fraction * (num_multi + 1)):
        continue
    text = named_text(g, walk, hops)
    leak = LeakFilter([text])
    if any(leak.leaks(Page.from_record(pages[n].record()).render()) for n in walk):
      continue  # the agent could never open a gold page
    seen.add(walk)
    failures = 0
    questions.append(Question(walk, hops, tuple(() for _ in walk), text, shortcut, 0))
    num_multi += num_hops > 1
    num_shortcut += shortcut
  if len(questions) < num_questions:
    raise ValueError(f"made only {len(questions)} of {num_questions} named questions from "
                     f"{g.number_of_nodes()} entities; raise num_entities")
  return questions


KINDS = (on.CITY, on.ORGANIZATION)  # the answers, in order


def kind_text(g: nx.MultiDiGraph, subject: str, verb: str) -> str:
  """The question about what `subject` `verb` ("studied at something") points to."""
  options = " or ".join(f"{on.article(k)} {k}" for k in KINDS)
  return f"{_named(g, subject)} {verb}. Is that {options}? Answer with one word."


def generate_kind_questions(g: nx.MultiDiGraph, pages: dict[str, EntityPage],
                            rng: random.Random, num_questions: int, *_) -> list[Question]:
  """`num_questions` distinct kind questions, the answer kinds in turn (equal numbers); the walk
  is (object, subject) as for a 1-hop named question. ValueError when the graph is too small."""
  by_kind: dict[str, list[tuple[str, str, str]]] = {k: [] for k in KINDS}
  for subject, obj, rel in sorted(g.edges(keys=True)):
    if g.nodes[obj]["type"] in by_kind:
      by_kind[g.nodes[obj]["type"]].append((subject, obj, rel))
  for edges in by_kind.values():
    rng.shuffle(edges)
  questions = []
  for i in range(num_questions):
    edges = by_kind[KINDS[i % len(KINDS)]]
    if not edges:
      raise ValueError(f"made only {i} of {num_questions} kind questions from "
                       f"{g.number_of_nodes()} entities; raise num_entities")
    subject, obj, rel = edges.pop()
    text = kind_text(g, subject, on.RELATIONS[rel].forward.format(x="something"))
    questions.append(Question((obj, subject), (Hop(rel, False),), ((), ()), text, False, 0))
  return questions
