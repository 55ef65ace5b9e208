"""A tiny hand-written synthetic world and trajectory builders, for judge tests and benchmarks.

One CaRR record (docs/design.md section 3, with `metadata.gold`) about invented entities, the
pages the agent can see, and `TrajectoryBuilder`, which writes histories in the judge's format
(the CaRR release's; judge/records.py reads it): assistant `tool_calls` [{tool_call_id, name,
arguments (JSON string)}] and tool messages `content: [{tool_call_id, output}]` with
search/open/find outputs in the release's text formats. The rubric graph is
E0 -R0- E1 -R1- E2 -R2 plus E0 -R3- E3:

  R0 <E0> studied composition at <E1>.   R1 <E1> is located in <E2>.
  R2 <E2> is a river port founded in 1204. R3 <E0> received <E3> in 1998.
"""
from __future__ import annotations

import json
from typing import Any

BASE = "https://wiki.example/"
URLS = {"E0": BASE + "Orla_Venn", "E1": BASE + "Brightwater_Conservatory",
        "E2": BASE + "Tessaly", "E3": BASE + "Harrow_Prize"}
NAMES = {"E0": "Orla Venn", "E1": "Brightwater Conservatory", "E2": "Tessaly",
         "E3": "Harrow Prize"}
EVIDENCE = [
    "Orla Venn studied composition at the Brightwater Conservatory.",
    "The Brightwater Conservatory is located in Tessaly.",
    "Tessaly is a river port founded in 1204.",
    "In 1998 Orla Venn received the Harrow Prize.",
]
RUBRICS = ["<E0> studied composition at <E1>.", "<E1> is located in <E2>.",
           "<E2> is a river port founded in 1204.", "<E0> received <E3> in 1998."]
RUBRIC_PAGES = ["E0", "E1", "E2", "E0"]  # entity whose page holds each rubric's evidence
QUESTION = ("Which composer studied at a conservatory in a river port founded in 1204 and "
            "received a prize in 1998?")
PAGES = {
    URLS["E0"]: ("Orla Venn", "Orla Venn is a composer of chamber operas. "
                 f"{EVIDENCE[0]} Her early works were performed in small halls. {EVIDENCE[3]}"),
    URLS["E1"]: ("Brightwater Conservatory", "The conservatory teaches music and theatre. "
                 f"{EVIDENCE[1]}"),
    URLS["E2"]: ("Tessaly", f"{EVIDENCE[2]} It is known for its bridges."),
    URLS["E3"]: ("Harrow Prize", "The Harrow Prize is an award for new music."),
}


def example_task(task_id: str = "example-0") -> dict[str, Any]:
  entities = {e: {"name": NAMES[e], "aliases": [], "url": URLS[e]} for e in NAMES}
  entities["E0"]["aliases"] = ["O. Venn"]
  gold_rubrics = [{"text": r, "placeholders": sorted(set(_ids(r))), "url": URLS[page],
                   "evidence": evidence}
                  for r, page, evidence in zip(RUBRICS, RUBRIC_PAGES, EVIDENCE)]
  return {"id": task_id, "source": "example_world",
          "input_messages": [{"role": "user", "content": QUESTION}],
          "label": NAMES["E0"], "tools": [],
          "metadata": {"remote_env_info": {"search_forbidden_strs": [QUESTION],
                                           "rubrics": list(RUBRICS)},
                       "gold": {"entities": entities, "rubrics": gold_rubrics,
                                "shortcut": False, "hops": 3}}}


def _ids(rubric: str) -> list[str]:
  return [part.split(">")[0] for part in rubric.split("<")[1:]]


def search_output(results: list[tuple[str, str, str]]) -> str:
  """`[i] Title/URL Source/Description` blocks for (title, url, description) triples."""
  return "\n\n".join(f"[{i}] Title: {title}\n[{i}] URL Source: {url}\n[{i}] Description: {d}"
                     for i, (title, url, d) in enumerate(results))


def open_output(url: str, title: str | None = None, content: str | None = None) -> str:
  page_title, page_text = PAGES.get(url, ("", ""))
  title = page_title if title is None else title
  content = page_text if content is None else content
  return f"Title: {title}\nURL Source: {url}\n\nMarkdown Content:\n{content}"


def find_output(matches: list[str]) -> str:
  return "\n\n".join(f"[Match {k}] {m}" for k, m in enumerate(matches, 1))


def cite(n: int, entity_or_url: str) -> str:
  """A citation in the release's accepted form: `[[n](url)]`."""
  return f"[[{n}]({URLS.get(entity_or_url, entity_or_url)})]"


def good_answer(extra: str = "") -> str:
  return (f"## Explanation with Citations\n{NAMES['E0']} studied composition at the "
          f"{NAMES['E1']} {cite(1, 'E0')}, which is located in {NAMES['E2']} {cite(2, 'E1')}. "
          f"{NAMES['E2']} is a river port founded in 1204 {cite(3, 'E2')}. In 1998 "
          f"{NAMES['E0']} received the {NAMES['E3']} {cite(1, 'E0')}. {extra}\n\n"
          f"## Exact Answer\n{NAMES['E0']}\n\n## References\n[1] {URLS['E0']}\n"
          f"[2] {URLS['E1']}\n[3] {URLS['E2']}\n")


class TrajectoryBuilder:
  """Appends tool turns in the release history format; `answer()` returns the record."""

  def __init__(self, question: str = QUESTION):
    self.history: list[dict[str, Any]] = [{"role": "user", "content": question}]

  def tool(self, name: str, arguments: Any, output: Any) -> "TrajectoryBuilder":
    call_id = f"call_{len(self.history)}"
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    self.history.append({"role": "assistant", "reasoning_content": "", "content": "",
                         "tool_calls": [{"tool_call_id": call_id, "name": name,
                                         "arguments": args}]})
    self.history.append({"role": "tool",
                         "content": [{"tool_call_id": call_id, "output": output}]})
    return self

  def search(self, query: str, results: list[tuple[str, str, str]]) -> "TrajectoryBuilder":
    return self.tool("browser.search", {"query": query}, search_output(results))

  def open(self, url: str, **kw: Any) -> "TrajectoryBuilder":
    return self.tool("browser.open", {"id": url}, open_output(url, **kw))

  def find(self, pattern: str, matches: list[str]) -> "TrajectoryBuilder":
    return self.tool("browser.find", {"pattern": pattern}, find_output(matches))

  def answer(self, text: Any, status: str = "completed") -> dict[str, Any]:
    history = self.history + [{"role": "assistant", "reasoning_content": "", "content": text}]
    return {"prompt_id": "example-0", "sample_index": 0, "status": status, "history": history,
            "num_tool_calls": {}, "error": None}


def visit_all() -> TrajectoryBuilder:
  """A trajectory that saw every page holding evidence (E0, E1, E2 opened)."""
  builder = TrajectoryBuilder().search("composer river port 1204 conservatory", [
      (PAGES[URLS["E0"]][0], URLS["E0"], "Orla Venn is a composer of chamber operas."),
      (PAGES[URLS["E3"]][0], URLS["E3"], "An award for new music.")])
  return builder.open(URLS["E0"]).open(URLS["E1"]).open(URLS["E2"])


def good_trajectory(extra: str = "") -> dict[str, Any]:
  return visit_all().answer(good_answer(extra))
