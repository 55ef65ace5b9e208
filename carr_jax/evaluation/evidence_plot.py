"""Draws one trajectory's CaRR evidence graph as an RGB image (for TensorBoard IMAGES).

Nodes: hidden entities (E0 = the answer, labelled with the name the response gave, if any)
and rubrics; an edge joins a rubric to every placeholder it mentions. Rubric colours:
grey = not identified, orange = identified but unsupported by cited content, blue =
supported but not connected to E0 (isolated true facts earn nothing), green = supported and
connected (counts toward the rubric reward).
"""
from __future__ import annotations

from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402

from judge.breakdown import RubricScore  # noqa: E402
from judge.rubric_graph import placeholders  # noqa: E402

_COLOURS = {"none": "#b0b0b0", "identified": "#f5a623", "supported": "#4a90d9",
            "connected": "#3cb371"}


def _rubric_state(rubric: Any) -> str:
  if rubric.connected:
    return "connected"
  if rubric.supported:
    return "supported"
  return "identified" if rubric.identified else "none"


def _scores(breakdown: Any, rubrics: Sequence[str]) -> list[Any]:
  """The breakdown's rubric scores; when it has none (the judge stopped before scoring them:
  no usable citation, an error), the question's rubrics, all unidentified."""
  if breakdown.rubrics or not rubrics:
    return list(breakdown.rubrics)
  return [RubricScore(i, text, placeholders(text)) for i, text in enumerate(rubrics)]


def evidence_graph(breakdown: Any, rubrics: Sequence[str] = ()) -> nx.Graph:
  graph = nx.Graph()
  for rubric in _scores(breakdown, rubrics):
    node = f"R{rubric.index}"
    graph.add_node(node, kind="rubric", state=_rubric_state(rubric))
    for entity in rubric.placeholders:
      name = breakdown.entities.get(entity)
      graph.add_node(entity, kind="entity", label=f"{entity}\n{name or '?'}"[:40])
      graph.add_edge(node, entity)
  return graph


def render_evidence_graph(breakdown: Any, rubrics: Sequence[str] = (),
                          size: tuple[float, float] = (6.0, 4.5)) -> np.ndarray:
  """[H, W, 3] uint8 image of the evidence graph of one judged trajectory; `rubrics` (the
  question's rubric texts) draw the graph even when the judge scored no rubric."""
  graph = evidence_graph(breakdown, rubrics)
  fig, ax = plt.subplots(figsize=size, dpi=100)
  try:
    ax.set_axis_off()
    ax.set_title(f"rubric reward {breakdown.rubric_reward:.2f}, "
                 f"outcome {breakdown.outcome_reward:.0f}", fontsize=9)
    if graph.number_of_nodes():
      pos = nx.spring_layout(graph, seed=0)
      entities = [n for n, d in graph.nodes(data=True) if d["kind"] == "entity"]
      rubrics = [n for n, d in graph.nodes(data=True) if d["kind"] == "rubric"]
      nx.draw_networkx_edges(graph, pos, ax=ax, alpha=0.5)
      nx.draw_networkx_nodes(graph, pos, nodelist=entities, ax=ax, node_shape="s",
                             node_color=["#d0021b" if n == "E0" else "#ffffff" for n in entities],
                             edgecolors="black", node_size=900)
      nx.draw_networkx_nodes(graph, pos, nodelist=rubrics, ax=ax, node_size=500,
                             node_color=[_COLOURS[graph.nodes[n]["state"]] for n in rubrics])
      labels = {n: graph.nodes[n].get("label", n) for n in graph.nodes}
      nx.draw_networkx_labels(graph, pos, labels=labels, ax=ax, font_size=7)
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
  finally:
    plt.close(fig)
