"""What a browser backend provides, and the page/result records that pass through it.

A backend answers two questions, shared by every `BrowserSession` of a run (so it must be safe
to call concurrently): `search(query, num) -> [SearchHit]` and `fetch(url) -> Page`. It raises
`BackendError` with a message written for the model when it cannot; `BrowserSession` turns
that (and any other exception) into a failed tool observation. Backends know nothing of the
question: the answer-leak filter runs per session, so one cache serves every question.

Implementations: `CorpusBackend` (offline JSONL corpus, BM25) and `WebBackend` (search API +
page reader over HTTP).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from rollout.tools.text import one_line


class BackendError(Exception):
  """A failure the agent should read about (page missing, URL refused, API down, ...)."""

  def __init__(self, message: str, code: str = "backend_error"):
    super().__init__(message)
    self.code = code


@dataclasses.dataclass(frozen=True)
class SearchHit:
  title: str
  url: str
  snippet: str


@dataclasses.dataclass(frozen=True)
class Page:
  """One page: the corpus record of docs/design.md section 4."""
  url: str
  title: str
  content: str  # markdown
  published_time: str | None = None

  @classmethod
  def from_record(cls, record: dict[str, Any]) -> "Page":
    for key in ("url", "title", "content"):
      if not isinstance(record.get(key), str):
        raise ValueError(f"page record field {key!r} must be a string, got "
                         f"{type(record.get(key)).__name__}")
    published = record.get("published_time")
    if published is not None and not isinstance(published, str):
      raise ValueError("page record field 'published_time' must be a string or null")
    return cls(record["url"], record["title"], record["content"], published)

  def to_record(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  def render(self) -> str:
    """The full text an `open` shows (before the character cap) and `find` searches."""
    head = [f"Title: {one_line(self.title)}", f"URL Source: {one_line(self.url)}"]
    if self.published_time:
      head.append(f"Published Time: {one_line(self.published_time)}")
    return "\n\n".join(head) + "\n\nMarkdown Content:\n" + self.content


class Backend(Protocol):

  async def search(self, query: str, num: int) -> list[SearchHit]:
    ...

  async def fetch(self, url: str) -> Page:
    ...
