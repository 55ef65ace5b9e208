"""Rubrics as a graph: placeholders, filling in names, evidence connectivity, set validation.

A rubric is a one-hop statement with placeholders `<E0>` (the answer), `<E1>`, ... . The
connectivity step (paper Eq. 10-11) builds a bipartite networkx graph with one node per
placeholder id and one per SUPPORTED rubric, an edge when the rubric mentions the id, and keeps
the rubrics in the connected component of `E0`. Like the release, the graph is over placeholder
ids, not over the names the response filled in.
"""
from __future__ import annotations

import re

import networkx as nx

PLACEHOLDER = re.compile(r"<(E\d{1,4})>")  # E0 .. E9999; a longer id is text, not an entity


def placeholders(rubric: str) -> list[str]:
  """Distinct placeholder ids of a rubric, sorted by number (`E0`, `E1`, `E10`)."""
  return sorted(set(PLACEHOLDER.findall(rubric)), key=lambda e: int(e[1:]))


def entity_ids(rubrics: list[str]) -> list[str]:
  ids = {e for rubric in rubrics for e in placeholders(rubric)}
  return sorted(ids, key=lambda e: int(e[1:]))


def fill(rubric: str, names: dict[str, str | None]) -> tuple[str, bool]:
  """(rubric with named placeholders replaced, whether every placeholder was named)."""
  all_named = True

  def substitute(match: re.Match) -> str:
    nonlocal all_named
    name = names.get(match.group(1))
    if name is None:
      all_named = False
      return match.group(0)
    return name

  return PLACEHOLDER.sub(substitute, rubric), all_named


def connected_rubrics(rubric_ids: list[list[str]], supported: list[bool]) -> set[int]:
  """Indices of supported rubrics reachable from `E0` in the entity-rubric bipartite graph.

  Args:
    rubric_ids: placeholder ids of each rubric (index i -> ids of rubric i).
    supported: whether rubric i is supported (unsupported rubrics are not graph nodes).
  """
  graph = nx.Graph()
  graph.add_node(("entity", "E0"))
  for i, (ids, ok) in enumerate(zip(rubric_ids, supported)):
    if ok:
      graph.add_node(("rubric", i))
      graph.add_edges_from((("entity", e), ("rubric", i)) for e in ids)
  component = nx.node_connected_component(graph, ("entity", "E0"))
  return {index for kind, index in component if kind == "rubric"}


def rubric_set_problems(rubrics: list[str], entities: list[str] | None = None) -> list[str]:
  """Why a generated rubric set is unusable ([] if fine).

  Rules: at least one rubric; every rubric mentions a placeholder; `E0` appears; the ids used
  are exactly E0..En (contiguous); when `entities` (the declared ids) is given, it equals them.
  """
  if not rubrics:
    return ["no rubrics"]
  problems = [f"rubric {i} has no placeholder" for i, r in enumerate(rubrics)
              if not placeholders(r)]
  used = entity_ids(rubrics)
  if "E0" not in used:
    problems.append("no rubric mentions <E0>")
  expected = [f"E{i}" for i in range(len(used))]
  if used and used != expected:
    problems.append(f"placeholder ids are not contiguous: {used} (expected {expected})")
  if entities is not None and sorted(entities, key=_id_number) != used:
    problems.append(f"declared entities {sorted(entities, key=_id_number)} != used ids {used}")
  return problems


def _id_number(entity_id: str) -> int:
  match = re.fullmatch(r"E(\d+)", entity_id)
  return int(match.group(1)) if match else 1 << 30
