"""Multi-hop questions over the synthetic graph, with obfuscated clues and one gold answer.

A question is a walk E0 - E1 - ... - En (2 to 4 hops; E0 is the answer, En the head) plus
clues: every entity's noun ("a chemist"), some of its attributes made vague (years to
decades, counts to ranges), and the relation of each hop. No entity is named. The text reads
from the head inward ("A chemist born in the 1750s set up a university. ... Which city ...
is home to this university?"). A question is kept only if exactly one assignment of graph
entities to E0..En satisfies all clues (`count_solutions`), and its rubrics are one
statement per clue, each pointing at the page sentence that proves it.

Shortcut questions: E0's own clues (noun, attributes, and having some relation of the last
hop's kind to an entity with E1's noun) leave at most `SHORTCUT_MAX_CANDIDATES` candidates, so
a guess from the last hop alone is likely right. Other questions leave at least
`DEEP_MIN_CANDIDATES`, so skipping hops is a real gamble.
"""
from __future__ import annotations

import dataclasses
import random

import networkx as nx

from lab.world import ontology as on

SHORTCUT_MAX_CANDIDATES = 2
DEEP_MIN_CANDIDATES = 3


@dataclasses.dataclass(frozen=True)
class Hop:
  """The edge between E_i and E_{i+1}; `relation` points E_i -> E_{i+1} iff `forward`."""
  relation: str
  forward: bool


@dataclasses.dataclass(frozen=True)
class Question:
  walk: tuple[str, ...]  # node ids E0..En
  hops: tuple[Hop, ...]  # hops[i] joins walk[i] and walk[i+1]
  attr_clues: tuple[tuple[str, ...], ...]  # attr_clues[i]: attribute names used for E_i
  text: str
  shortcut: bool
  local_candidates: int  # candidates for E0 from E0's own clues and the last hop's kind


class Index:
  """Lookup tables of the graph for fast clue matching."""

  def __init__(self, g: nx.MultiDiGraph):
    self.g = g
    # node -> [(neighbour, hop from node to neighbour)], both edge directions.
    self.steps: dict[str, list[tuple[str, Hop]]] = {n: [] for n in g.nodes}
    for a, b, rel in g.edges(keys=True):
      self.steps[a].append((b, Hop(rel, True)))
      self.steps[b].append((a, Hop(rel, False)))
    self.by_noun: dict[str, set[str]] = {}
    self.by_attr: dict[tuple[str, int], set[str]] = {}
    for node, d in g.nodes(data=True):
      self.by_noun.setdefault(d["noun"], set()).add(node)
      for attr, value in d["attrs"].items():
        self.by_attr.setdefault((attr, on.ATTRS[attr].key(value)), set()).add(node)

  def key(self, node: str, attr: str) -> int:
    return on.ATTRS[attr].key(self.g.nodes[node]["attrs"][attr])

  def local(self, noun: str, attrs: dict[str, int]) -> set[str]:
    """Entities with this noun and these obfuscated attribute keys."""
    found = set(self.by_noun.get(noun, ()))
    for attr, key in attrs.items():
      found &= self.by_attr.get((attr, key), set())
    return found

  def across(self, nodes: set[str], hop: Hop, from_far_end: bool) -> dict[str, list[str]]:
    """For each node reachable over `hop` from `nodes`, the nodes it is reached from.

    With from_far_end=True, `nodes` are E_{i+1} candidates and the result is keyed by E_i.
    """
    out: dict[str, list[str]] = {}
    for u in nodes:
      # E_i -> E_{i+1} when forward: walking back from E_{i+1} follows in-edges.
      edges = (self.g.in_edges(u, keys=True) if hop.forward == from_far_end
               else self.g.out_edges(u, keys=True))
      for a, b, rel in edges:
        if rel == hop.relation:
          out.setdefault(a if hop.forward == from_far_end else b, []).append(u)
    return out


def clue_sets(index: Index, q_walk, attr_clues) -> list[set[str]]:
  return [index.local(index.g.nodes[n]["noun"], {a: index.key(n, a) for a in attr_clues[i]})
          for i, n in enumerate(q_walk)]


def count_solutions(index: Index, walk, hops, attr_clues, cap: int = 2) -> tuple[int, set]:
  """Number of entity chains E0..En matching all clues (capped), and the E0 candidates.

  Chains may visit an entity twice, so the count can only be too high: a count of 1 proves
  the gold chain is the only one.
  """
  local = clue_sets(index, walk, attr_clues)
  counts = {u: 1 for u in local[-1]}  # chains from E_i up to the head, per E_i candidate
  for i in range(len(hops) - 1, -1, -1):
    back = index.across(set(counts), hops[i], from_far_end=True)
    counts = {v: min(cap, sum(counts[u] for u in us)) for v, us in back.items()
              if v in local[i]}
  return min(cap, sum(counts.values())), set(counts)


def local_candidates(index: Index, walk, hops, attr_e0) -> set[str]:
  """E0 candidates from E0's clues plus a last-hop relation to anything with E1's noun."""
  e1_like = index.by_noun[index.g.nodes[walk[1]]["noun"]]
  reach = index.across(e1_like, hops[0], from_far_end=True)
  return index.local(index.g.nodes[walk[0]]["noun"],
                     {a: index.key(walk[0], a) for a in attr_e0}) & set(reach)


def random_walk(index: Index, rng: random.Random, start: str,
                num_hops: int) -> tuple[tuple[str, ...], tuple[Hop, ...]] | None:
  """A walk of distinct entities from `start`, each step over an edge in either direction."""
  walk, hops = [start], []
  for _ in range(num_hops):
    options = [(n, h) for n, h in index.steps[walk[-1]] if n not in walk]
    if not options:
      return None
    nxt, hop = rng.choice(options)
    walk.append(nxt)
    hops.append(hop)
  return tuple(walk), tuple(hops)
