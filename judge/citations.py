"""Citation extraction from the final response and collection of the cited content.

Citation syntax. By default carr_jax counts the form the authors' release counts: a numbered
markdown link directly followed by `]` or `,`, i.e. `[[3](https://...)]` or a list
`[[3](https://a), [4](https://b)]`, with no whitespace inside the parentheses (`[[1]( url )]`
is not a citation, as in the release). A bare `[3](https://...)` is NOT a citation by default,
so a policy is trained toward the single format our answer prompt asks for;
`accept_plain_links=True` (JudgeConfig) also counts it. Where this differs from the release's
regex (docs/judge-vs-release.md): a URL may not contain whitespace, and its parentheses and
square brackets must be balanced, one level deep (Wikipedia-style `Foo_(bar)`, `a[1]`); the
release's lazy `.+?` would instead swallow `[1](a) text [[2](b)]` into one bogus URL. The
`view-source:` prefix and the `r.jina.ai` reader prefix are stripped, from citations and from
tool-output URLs alike.

Content collection walks the `history` (the release's message formats): search results give
snippets for their URLs, an open gives the page text of its `URL Source`, a find gives its
`[Match k]` blocks to the page that was open at that moment. Tool outputs also carry text the
agent chose (a find echoes its pattern when nothing matched, an error may echo a URL), so
only outputs in the real result shape count: an open must start with its `Title:` / `URL
Source:` header, a find with `[Match 1]`, and a find's pattern never enters the context.
Only the first `max_citations`
distinct cited URLs are used (the paper's cap; the release instead skips unseen URLs before
counting). A URL that never appeared in a tool output contributes nothing. Each snippet, page
text and find output appears at most once in the context.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from carr_common.vocab import KIND_OF_TOOL, TOOL_KINDS
from judge.records import as_text

_URL = (r"(?:view-source:)?https?://"
        r"(?:[^\s()\[\]]|\([^\s()\[\]]*\)|\[[^\s()\[\]]*\])+")
_RELEASE_CITATION = re.compile(r"\[\d+\]\((" + _URL + r")\)(?=[\],])")
_PLAIN_CITATION = re.compile(r"\[\d+\]\((" + _URL + r")\)")
_READER_PREFIXES = ("view-source:", "https://r.jina.ai/", "http://r.jina.ai/")
_SEARCH_FIELD = re.compile(
    r"^\[(\d{1,6})\][ \t]*(Title|URL Source|Description|Date|Published Time):[ \t]?(.*)$")
_OPEN_FIELD = re.compile(r"^(Title|URL Source|Published Time):[ \t]*(.*)$")
_MARKDOWN_MARK = re.compile(r"(?m)^Markdown Content:[ \t]*\n?")
# A history may name a tool as the model calls it ("browser.open") or by its kind alone ("open").
_KIND_OF_NAME = {**KIND_OF_TOOL, **{kind: kind for kind in TOOL_KINDS}}


def normalize_url(url: str) -> str:
  url = url.strip().strip("<>")
  changed = True
  while changed:
    changed = False
    for prefix in _READER_PREFIXES:
      if url.startswith(prefix):
        url, changed = url[len(prefix):], True
  return url


def extract_citations(response: str, max_citations: int,
                      accept_plain_links: bool) -> list[str]:
  """First `max_citations` distinct cited URLs, in order of first citation (the judge's
  rules: `JudgeConfig.max_citations`, `accept_plain_links`)."""
  pattern = _PLAIN_CITATION if accept_plain_links else _RELEASE_CITATION
  urls: list[str] = []
  for match in pattern.finditer(response):
    url = normalize_url(match.group(1))
    if url and url not in urls:
      urls.append(url)
      if len(urls) == max_citations:
        break
  return urls


@dataclasses.dataclass
class PageContent:
  url: str
  title: str = ""
  published: str = ""
  snippets: list[str] = dataclasses.field(default_factory=list)
  texts: list[str] = dataclasses.field(default_factory=list)  # bodies of `open` outputs
  finds: list[str] = dataclasses.field(default_factory=list)  # `[Match k]` blocks of finds

  @property
  def opened(self) -> bool:
    return bool(self.texts)


def parse_search(output: str) -> list[dict[str, str]]:
  """`[i] Title/URL Source/Description/Date` blocks -> [{url, title, snippet, date}]."""
  blocks: dict[int, dict[str, list[str]]] = {}
  current: list[str] | None = None
  for line in output.splitlines():
    match = _SEARCH_FIELD.match(line)
    if match:
      fields = blocks.setdefault(int(match.group(1)), {})
      current = fields.setdefault(match.group(2), [])
      current.append(match.group(3))
    elif current is not None:  # a description may run over several lines
      current.append(line)
  results = []
  for fields in blocks.values():
    text = {key: "\n".join(lines).strip() for key, lines in fields.items()}
    url = normalize_url(text.get("URL Source", ""))
    if url:
      results.append({"url": url, "title": text.get("Title", ""),
                      "snippet": text.get("Description", ""),
                      "date": text.get("Date") or text.get("Published Time", "")})
  return results


def parse_open(output: str) -> dict[str, str] | None:
  """`Title/URL Source/Published Time/Markdown Content:` -> {url, title, published, text}.

  None unless the output starts with a header field: an error message that echoes a URL the
  agent wrote (with its own `URL Source:` lines in it) is not a page.
  """
  first = next((line for line in output.splitlines() if line.strip()), "")
  if not _OPEN_FIELD.match(first.strip()):
    return None
  mark = _MARKDOWN_MARK.search(output)
  header, body = (output[:mark.start()], output[mark.end():]) if mark else (output, "")
  fields: dict[str, str] = {}
  for line in header.splitlines():
    match = _OPEN_FIELD.match(line.strip())
    if match and match.group(1) not in fields:
      fields[match.group(1)] = match.group(2).strip()
  url = normalize_url(fields.get("URL Source", ""))
  if not url:
    return None
  return {"url": url, "title": fields.get("Title", ""),
          "published": fields.get("Published Time", ""), "text": body.strip()}


def is_find_result(output: str) -> bool:
  """True for a find that matched: real results start with `[Match 1]`. A find that matched
  nothing answers `No matches for <pattern> ...`, and its pattern is the agent's own text."""
  return output.lstrip().startswith("[Match 1]")


def _tool_call_fields(call: Any) -> tuple[Any, Any]:
  """(id, name) of a release-style or OpenAI-style tool call (its arguments never count)."""
  if not isinstance(call, dict):
    return None, None
  if isinstance(call.get("function"), dict):
    return call.get("id"), call["function"].get("name")
  return call.get("tool_call_id", call.get("id")), call.get("name")


def _tool_outputs(message: dict) -> list[tuple[Any, Any]]:
  content = message.get("content")
  if isinstance(content, list):
    return [(o.get("tool_call_id"), o.get("output")) for o in content if isinstance(o, dict)]
  return [(message.get("tool_call_id"), content)]  # OpenAI style: one output per message


def collect_pages(history: list, max_output_chars: int) -> tuple[dict[str, PageContent],
                                                                  list[str]]:
  """What the agent received per URL, and warnings about tool messages that were skipped."""
  pages: dict[str, PageContent] = {}
  calls: dict[Any, Any] = {}  # call id -> tool name
  warnings: list[str] = []
  current_url: str | None = None  # page open at the time, for find attribution
  for i, message in enumerate(history):
    if not isinstance(message, dict):
      continue
    role = message.get("role")
    if role == "assistant" and isinstance(message.get("tool_calls"), list):
      for call in message["tool_calls"]:
        call_id, name = _tool_call_fields(call)
        if isinstance(call_id, (str, int)):
          calls[call_id] = name
      continue
    if role != "tool":
      continue
    for call_id, raw in _tool_outputs(message):
      output = as_text(raw, max_output_chars)
      if output is None or not output.strip():
        continue
      if not isinstance(call_id, (str, int)) or call_id not in calls:
        warnings.append(f"history[{i}]: tool output for unknown call {call_id!r} skipped")
        continue
      name = calls[call_id]
      kind = _KIND_OF_NAME.get(name) if isinstance(name, str) else None
      if kind is None:
        warnings.append(f"history[{i}]: unknown tool {name!r} ignored")
      elif kind == "search":
        for result in parse_search(output):
          page = pages.setdefault(result["url"], PageContent(result["url"]))
          page.title = page.title or result["title"]
          page.published = page.published or result["date"]
          if result["snippet"]:
            page.snippets.append(result["snippet"])
      elif kind == "open":
        opened = parse_open(output)
        current_url = opened["url"] if opened else None  # a failed open leaves no page open
        if opened:
          page = pages.setdefault(opened["url"], PageContent(opened["url"]))
          page.title = page.title or opened["title"]
          page.published = page.published or opened["published"]
          page.texts.append(opened["text"])
      elif current_url is not None and is_find_result(output):
        pages[current_url].finds.append(output.strip())
  return pages, warnings


def build_context(cited_urls: list[str], pages: dict[str, PageContent],
                  max_chars: int) -> tuple[str, list[str]]:
  """(context text for the support judge, cited URLs that contributed content)."""
  parts: list[str] = []
  seen: set[str] = set()
  used: list[str] = []
  for url in cited_urls:
    page = pages.get(url)
    if page is None:
      continue
    used.append(url)
    header = [f"[Webpage {len(used)}]", f"URL Source: {url}"]
    if page.title:
      header.append(f"Title: {page.title}")
    if page.published:
      header.append(f"Published Time: {page.published}")
    blocks = ["\n".join(header)]
    sections = [("Search snippet", s) for s in page.snippets]
    sections += [("Page content", t) for t in page.texts]
    sections += [("Find results", m) for m in page.finds]  # never the pattern itself
    for heading, text in sections:
      text = text.strip()
      if text and text not in seen:
        seen.add(text)
        blocks.append(f"{heading}:\n{text}")
    parts.append("\n\n".join(blocks))
  context = "\n\n".join(parts)
  if len(context) > max_chars:
    context = context[:max_chars] + "\n[... cited content truncated ...]"
  return context, used
