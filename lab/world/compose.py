"""Turns walks into questions: picks clues until the answer is unique, writes text and rubrics.

`generate_questions` draws walks, chooses which attributes to reveal (see `questions.py` for
what makes a question a shortcut), keeps a question only when exactly one chain of entities
fits its clues and no gold page would be hidden from it by the answer-leak filter, and writes
its text and rubrics. `gold_annotations` returns the gold block of docs/design.md section 3.
"""
from __future__ import annotations

import random

import networkx as nx

from lab.world import ontology as on
from lab.world.pages import EntityPage
from lab.world.questions import (DEEP_MIN_CANDIDATES, SHORTCUT_MAX_CANDIDATES, Hop,
                                      Index, Question, count_solutions, local_candidates,
                                      random_walk)
from rollout.tools.backend import Page
from rollout.tools.text import LeakFilter

_GREEDY_CAP = 10**6  # solution counts are compared, not just tested for 1, while adding clues


def _phrase(g: nx.MultiDiGraph, node: str, attrs) -> str:
  values = g.nodes[node]["attrs"]
  return " and ".join(on.ATTRS[a].question.format(v=on.ATTRS[a].vague(values[a]))
                      for a in attrs)


def _intro(g: nx.MultiDiGraph, node: str, attrs) -> str:
  noun = g.nodes[node]["noun"]
  phrase = _phrase(g, node, attrs)
  return f"{on.article(noun)} {noun}" + (f" {phrase}" if phrase else "")


def _verb(hop: Hop, subject_is_near: bool) -> str:
  """Verb phrase of `hop` whose grammatical subject is E_i (near) or E_{i+1} (far)."""
  spec = on.RELATIONS[hop.relation]
  return spec.forward if hop.forward == subject_is_near else spec.backward


def question_text(g: nx.MultiDiGraph, rng: random.Random, walk, hops, clues) -> str:
  n = len(hops)
  sentences = []
  for i in range(n - 1, 0, -1):  # hop i joins E_i and E_{i+1}; E_{i+1} speaks
    far = walk[i + 1]
    intro = _intro(g, far, clues[i + 1])
    subject = (intro[0].upper() + intro[1:] if i + 1 == n
               else f"This {g.nodes[far]['noun']}")
    obj = _intro(g, walk[i], clues[i])
    sentences.append(f"{subject} {_verb(hops[i], False).format(x=obj)}.")
  noun0 = g.nodes[walk[0]]["noun"]
  phrase0 = _phrase(g, walk[0], clues[0])
  described = noun0 + (f" {phrase0}" if phrase0 else "")
  verb = _verb(hops[0], True).format(x=f"this {g.nodes[walk[1]]['noun']}")
  if rng.random() < 0.5:
    sentences.append(f"Which {described} {verb}?")
  else:
    sentences.append(f"What is the name of the {described} that {verb}?")
  return " ".join(sentences)


def rubrics(g: nx.MultiDiGraph, pages: dict[str, EntityPage], walk, hops, clues) -> list[dict]:
  """One rubric per clue, head first, each with its evidence sentence and page."""
  out = []

  def add(text, placeholders, node, fact_key):
    out.append({"text": text, "placeholders": placeholders, "url": pages[node].url,
                "evidence": pages[node].facts[fact_key]})

  for i in range(len(walk) - 1, -1, -1):
    node, e = walk[i], f"<E{i}>"
    d = g.nodes[node]
    if d["type"] not in on.FIXED_NOUNS:
      add(f"{e} is {on.article(d['noun'])} {d['noun']}.", [f"E{i}"], node, ("noun",))
    for attr in clues[i]:
      spec = on.ATTRS[attr]
      add(spec.rubric.format(e=e, v=spec.vague(d["attrs"][attr])), [f"E{i}"], node,
          ("attr", attr))
    if i > 0:
      hop = hops[i - 1]
      s, o = (i - 1, i) if hop.forward else (i, i - 1)
      text = f"<E{s}> {on.RELATIONS[hop.relation].forward.format(x=f'<E{o}>')}."
      add(text, [f"E{s}", f"E{o}"], walk[s], ("rel", hop.relation, walk[o]))
  return out


def gold_annotations(g, pages, q: Question) -> dict:
  entities = {f"E{i}": {"name": g.nodes[n]["name"], "aliases": list(g.nodes[n]["aliases"]),
                        "url": pages[n].url} for i, n in enumerate(q.walk)}
  return {"entities": entities, "rubrics": rubrics(g, pages, q.walk, q.hops, q.attr_clues),
          "shortcut": q.shortcut, "hops": len(q.hops)}


def _choose_clues(index: Index, rng: random.Random, walk, hops, shortcut: bool):
  """Attribute clues per entity making the answer unique, or None if this walk cannot."""
  g, n = index.g, len(hops)
  available = [sorted(g.nodes[v]["attrs"]) for v in walk]
  clues: list[list[str]] = [[] for _ in walk]
  pool0 = rng.sample(available[0], len(available[0]))
  if shortcut:  # reveal E0's attributes until its own clues nearly pin it down
    while len(local_candidates(index, walk, hops, clues[0])) > SHORTCUT_MAX_CANDIDATES:
      if not pool0:
        return None
      clues[0].append(pool0.pop())
  else:
    if pool0 and rng.random() < 0.5:
      clues[0].append(pool0.pop())
    if len(local_candidates(index, walk, hops, clues[0])) < DEEP_MIN_CANDIDATES:
      clues[0] = []
      if len(local_candidates(index, walk, hops, clues[0])) < DEEP_MIN_CANDIDATES:
        return None
  head = rng.sample(available[n], len(available[n]))
  clues[n] = head[:rng.choice((1, 2))]
  for i in range(1, n):
    if available[i] and rng.random() < 0.4:
      clues[i].append(rng.choice(available[i]))
  first_free = 0 if shortcut else 1  # deep questions must keep E0 vague
  while count_solutions(index, walk, hops, clues)[0] > 1:
    options = [(i, a) for i in range(first_free, n + 1) for a in available[i]
               if a not in clues[i]]
    if not options:
      return None

    def solutions_with(option):
      i, a = option
      trial = [c + [a] if j == i else c for j, c in enumerate(clues)]
      return count_solutions(index, walk, hops, trial, cap=_GREEDY_CAP)[0]
    i, a = min(options, key=solutions_with)
    clues[i].append(a)
  order = list(on.ATTRS)  # canonical order: "born in ... and who died in ..."
  return [tuple(sorted(c, key=order.index)) for c in clues]


def generate_questions(g: nx.MultiDiGraph, pages: dict[str, EntityPage], rng: random.Random,
                       num_questions: int, shortcut_fraction: float, min_hops: int,
                       max_hops: int, give_up_after: int = 1000) -> list[Question]:
  """`num_questions` questions; ValueError after `give_up_after` failed draws in a row."""
  index = Index(g)
  nodes = list(g.nodes)
  questions: list[Question] = []
  seen_walks: set[tuple[str, ...]] = set()
  num_shortcut = 0
  failures = 0
  while len(questions) < num_questions and failures < give_up_after:
    failures += 1
    # Keep the running share of shortcut questions at the requested fraction.
    want_shortcut = num_shortcut < shortcut_fraction * (len(questions) + 1)
    if failures > give_up_after // 2:  # this kind seems exhausted: take either kind
      want_shortcut = rng.random() < 0.5
    drawn = random_walk(index, rng, rng.choice(nodes), rng.randint(min_hops, max_hops))
    if drawn is None or drawn[0] in seen_walks:
      continue
    walk, hops = drawn
    clues = _choose_clues(index, rng, walk, hops, want_shortcut)
    if clues is None:
      continue
    text = question_text(g, rng, walk, hops, clues)
    leak = LeakFilter([text])
    if any(leak.leaks(Page.from_record(pages[n].record()).render()) for n in walk):
      continue  # the agent could never open a gold page
    local = len(local_candidates(index, walk, hops, clues[0]))
    seen_walks.add(walk)
    failures = 0
    questions.append(Question(walk, hops, tuple(clues), text,
                              local <= SHORTCUT_MAX_CANDIDATES, local))
    num_shortcut += questions[-1].shortcut
  if len(questions) < num_questions:
    raise ValueError(f"made only {len(questions)} of {num_questions} questions from "
                     f"{g.number_of_nodes()} entities; raise num_entities")
  return questions
