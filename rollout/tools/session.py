"""One agent's browser: `browser.search`, `browser.open`, `browser.find` over a shared backend.

A `BrowserSession` lives for one trajectory. It keeps the results of the latest search (so
`open` can take a result number) and the page opened last, whole (so `find` sees all of it
while `open` shows only the first 10,000 characters). Every call returns a `ToolResult`; bad
calls, refused URLs, missing pages and backend failures become readable observations with
`ok=False`, never exceptions out of the agent loop. Results and pages that share a 13-word run
with the question are hidden (`text.LeakFilter`).

  session = BrowserSession(CorpusBackend.from_jsonl(path), question)
  result = await session.call("browser.search", {"query": "velmora founded"})
  print(result.text)
"""
from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Sequence

from carr_common.safe_text import clean_text
from carr_common.vocab import FIND, KIND_OF_TOOL, OPEN, SEARCH
from rollout.tools import schemas
from rollout.tools.backend import Backend, BackendError, Page, SearchHit
from rollout.tools.text import LeakFilter, find_matches, format_matches, one_line

log = logging.getLogger(__name__)

DEFAULT_NUM_RESULTS = 10


@dataclasses.dataclass(frozen=True)
class ToolResult:
  text: str  # the observation shown to the model
  ok: bool
  error: str | None = None  # short code when not ok: unknown_tool, bad_arguments, no_search,
  # bad_index, no_page_open, not_found, refused_url, answer_leak, empty_page, backend_error
  kind: str | None = None  # "search" | "open" | "find"; None for an unknown tool
  url: str | None = None  # the page an open/find result comes from


def format_search(hits: Sequence[SearchHit]) -> str:
  return "\n\n".join(
      f"[{i}] Title: {one_line(h.title)}\n[{i}] URL Source: {one_line(h.url)}\n"
      f"[{i}] Description: {one_line(h.snippet)}" for i, h in enumerate(hits))


class BrowserSession:
  """Per-trajectory tool state over a shared backend; see the module docstring."""

  def __init__(self, backend: Backend, question: str | None = None, *,
               forbidden_strs: Sequence[str] = ()):
    self.backend = backend
    self._leak = LeakFilter([*([question] if question else []), *forbidden_strs])
    self.results: tuple[SearchHit, ...] | None = None  # None until the first search
    self.page: Page | None = None
    self.page_text = ""  # the open page as rendered, uncut

  async def call(self, name: str, arguments: Any) -> ToolResult:
    """The observation for one call; its text never holds a lone surrogate (a search API's
    JSON or a page may carry `\\ud800` escapes), so no writer downstream fails on it."""
    result = await self._call(name, arguments)
    return dataclasses.replace(result, text=clean_text(result.text))

  async def _call(self, name: str, arguments: Any) -> ToolResult:
    kind = KIND_OF_TOOL.get(name)
    if isinstance(arguments, str):  # tolerate the raw JSON string of a tool call
      try:
        arguments = json.loads(arguments) if arguments.strip() else {}
      except json.JSONDecodeError as e:
        return ToolResult(f"Arguments of {name} are not valid JSON ({e.msg}).", False,
                          "bad_arguments", kind)
    problem = schemas.validate_call(name, arguments)
    if problem:
      return ToolResult(problem, False, "unknown_tool" if kind is None else "bad_arguments",
                        kind)
    handler = {SEARCH: self._search, OPEN: self._open, FIND: self._find}[name]
    try:
      return await handler(**arguments)
    except BackendError as e:
      return ToolResult(str(e), False, e.code, kind)
    except Exception as e:  # a tool failure is an observation, not a crash of the loop
      log.warning("%s failed: %s: %s", name, type(e).__name__, e)
      return ToolResult(f"{name} failed: {type(e).__name__}: {e}", False, "backend_error",
                        kind)

  async def _search(self, query: str, num: int = DEFAULT_NUM_RESULTS) -> ToolResult:
    if not query.strip():
      return ToolResult("The search query is empty.", False, "bad_arguments", "search")
    if num < 1:
      return ToolResult("num must be at least 1.", False, "bad_arguments", "search")
    num = min(num, schemas.MAX_SEARCH_RESULTS)
    hits = await self.backend.search(query, num)
    visible = tuple(h for h in hits
                    if not self._leak.leaks(f"{h.title}\n{h.url}\n{h.snippet}"))
    self.results = visible
    if not visible:
      return ToolResult(f"No results found for {query!r}.", True, kind="search")
    return ToolResult(format_search(visible), True, kind="search")

  def _resolve_id(self, id_: int | str) -> str:
    if isinstance(id_, str) and id_.strip().isdigit():
      id_ = int(id_.strip())  # models often quote result numbers
    if isinstance(id_, str):
      url = id_.strip().strip("<>\"'")
      if not url:
        raise BackendError("browser.open needs a result number or a URL.", "bad_arguments")
      if any(c.isspace() or not c.isprintable() for c in url):
        # Error messages echo the URL; one with line breaks could forge a page header there.
        raise BackendError("A URL cannot contain spaces, line breaks or control characters.",
                           "bad_arguments")
      return url
    if self.results is None:
      raise BackendError(f"There is no search result {id_}: nothing has been searched yet. "
                         "Search first or open a URL.", "no_search")
    if not 0 <= id_ < len(self.results):
      last = f"0-{len(self.results) - 1}" if self.results else "none"
      raise BackendError(f"There is no result {id_} in the latest search (results: {last}).",
                         "bad_index")
    return self.results[id_].url

  async def _open(self, id: int | str) -> ToolResult:  # noqa: A002 (the schema's name)
    url = self._resolve_id(id)
    page = await self.backend.fetch(url)
    text = page.render()
    if self._leak.leaks(text):
      return ToolResult(f"The page {url} is hidden: it contains text of the question.",
                        False, "answer_leak", "open", url)
    self.page, self.page_text = page, text
    return ToolResult(text[:schemas.OPEN_CHAR_LIMIT], True, kind="open", url=page.url)

  async def _find(self, pattern: str) -> ToolResult:
    if self.page is None:
      return ToolResult("No page is open. Open a page with browser.open before using "
                        "browser.find.", False, "no_page_open", "find")
    if not pattern.strip():
      return ToolResult("The find pattern is empty.", False, "bad_arguments", "find",
                        self.page.url)
    matches = find_matches(pattern, self.page_text, schemas.FIND_MAX_MATCHES)
    if not matches:
      return ToolResult(f"No matches for {pattern!r} on {self.page.url}.", True, kind="find",
                        url=self.page.url)
    return ToolResult(format_matches(matches, self.page_text, schemas.FIND_CONTEXT_CHARS),
                      True, kind="find", url=self.page.url)
