"""Web backend: a Serper-compatible search API and a Jina-compatible page reader over HTTP.

Search: `POST <search_url>` with JSON `{"q": query, "num": n}` and header `X-API-KEY`; reads
`organic: [{title, link, snippet}]`. Reader: `GET <reader_url>/<page url>` with
`Authorization: Bearer <key>`; reads the `Title:` / `URL Source:` / `Published Time:` lines
and the text after `Markdown Content:`. Keys come only from environment variables (names in
`WebConfig`), are sent only as headers and never appear in reprs or error messages.

One `WebBackend` serves every session of a run: an httpx.AsyncClient per event loop (clients
are bound to the loop they were made in), a concurrency cap, retries under the project's one
HTTP policy (carr_common.http_retry: timeouts, transport errors, 408, 425, 429, 500, 502, 503
and 504, full-jitter exponential backoff or the server's Retry-After), one in-flight fetch per
URL, and an LRU page and search cache in memory (pages optionally also on disk). Target URLs
pass `url_policy.check_url` first (http(s) only, no private or loopback addresses unless
`allow_private`), and the reader is sent the URL that check parsed. Redirects are followed by
hand, at most `max_redirects`: a hop to the search or reader origin is followed as is; any
other hop is checked like a target URL, connected to at the address that check resolved (no
second lookup) and sent no keys.
The reader itself resolves the target it is given; that lookup is outside this process.

  backend = WebBackend(WebConfig(cache_dir="page_cache"))   # needs SERPER_API_KEY
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import json
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

import httpx

from carr_common.http_retry import (AttemptFailed, GaveUp, LoopPool, RetryPolicy, status_failure,
                                    with_retries)
from rollout.tools.backend import BackendError, Page, SearchHit
from rollout.tools.url_policy import (check_url, has_ambiguous_characters, parse_target,
                                      pinned_request, refuse_ambiguous_characters)

SERPER_SEARCH_URL = "https://google.serper.dev/search"
JINA_READER_URL = "https://r.jina.ai"
_MARKDOWN_LINE = re.compile(r"^Markdown Content:[ \t]*$", re.MULTILINE)
_HEADER_FIELDS = ("Title", "URL Source", "Published Time")


@dataclasses.dataclass(frozen=True)
class WebConfig:
  search_url: str = SERPER_SEARCH_URL  # Serper-compatible search endpoint
  reader_url: str = JINA_READER_URL  # Jina-compatible reader base URL
  search_key_env: str | None = "SERPER_API_KEY"  # env var of the search key; None: no key
  reader_key_env: str | None = "JINA_API_KEY"  # env var of the reader key (it also works
  # keyless, rate-limited)
  timeout_s: float = 30.0  # per HTTP attempt
  attempts: int = 3  # tries per request, including the first
  backoff_s: float = 0.5  # retry k waits uniform(0, backoff_s * 2**(k-1)), capped below
  backoff_max_s: float = 30.0  # the longest wait between tries, Retry-After included
  max_concurrency: int = 32  # HTTP requests in flight per event loop
  allow_private: bool = False  # let the reader open private/loopback URLs (tests only)
  cache_dir: str | None = None  # also keep fetched pages on disk (JSON per URL)
  cache_pages: int = 4096  # pages kept in memory (LRU)
  cache_searches: int = 4096  # search results kept in memory (LRU)
  trust_env: bool = True  # honour HTTP(S)_PROXY / NO_PROXY from the environment
  max_redirects: int = 5  # redirect hops followed (by hand, each one re-checked)


def parse_reader_text(text: str, url: str) -> Page:
  """Splits a reader response into a Page; text without the header is all content."""
  marker = _MARKDOWN_LINE.search(text)
  if marker is None:
    return Page(url=url, title="", content=text.strip())
  fields = {}
  for line in text[:marker.start()].splitlines():
    key, colon, value = line.partition(":")
    if colon and key.strip() in _HEADER_FIELDS:
      fields[key.strip()] = value.strip()
  return Page(url=url, title=fields.get("Title", ""),
              content=text[marker.end():].strip("\n"),
              published_time=fields.get("Published Time") or None)


class _Lru:
  """A small thread-safe LRU map."""

  def __init__(self, capacity: int):
    self._capacity = capacity
    self._data: collections.OrderedDict = collections.OrderedDict()
    self._lock = threading.Lock()

  def get(self, key):
    with self._lock:
      if key not in self._data:
        return None
      self._data.move_to_end(key)
      return self._data[key]

  def put(self, key, value) -> None:
    with self._lock:
      self._data[key] = value
      self._data.move_to_end(key)
      while len(self._data) > self._capacity:
        self._data.popitem(last=False)


class _DiskPages:
  """Pages as JSON files named by the SHA-256 of their URL; written atomically."""

  def __init__(self, directory: str):
    self._dir = Path(directory)
    self._dir.mkdir(parents=True, exist_ok=True)

  def _path(self, url: str) -> Path:
    return self._dir / (hashlib.sha256(url.encode()).hexdigest() + ".json")

  def get(self, url: str) -> Page | None:
    try:
      record = json.loads(self._path(url).read_text(encoding="utf-8"))
      return Page.from_record(record)
    except (OSError, ValueError):
      return None

  def put(self, page: Page) -> None:
    fd, tmp = tempfile.mkstemp(dir=self._dir, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
      json.dump(page.to_record(), f, ensure_ascii=False)
    os.replace(tmp, self._path(page.url))


class _LoopState:
  """What must not cross event loops: the HTTP client, the semaphore, in-flight fetches."""

  def __init__(self, cfg: WebConfig):
    self.client = httpx.AsyncClient(
        timeout=httpx.Timeout(cfg.timeout_s), follow_redirects=False, trust_env=cfg.trust_env)
    self.semaphore = asyncio.Semaphore(cfg.max_concurrency)
    self.inflight: dict[str, asyncio.Task] = {}

  async def aclose(self) -> None:
    await self.client.aclose()


_EMBEDDED_URL = re.compile(r"(?i)https?:.*")  # a URL inside a reader URL's path


def _join(base: str, location: str) -> str:
  """A redirect's absolute URL; a Location that parsers read differently is the guard's
  refusal, not a transport error."""
  refuse_ambiguous_characters(location)
  try:
    return str(httpx.URL(base).join(location))
  except (httpx.InvalidURL, ValueError):
    raise BackendError(f"Refused to follow the redirect to {location!r}: not a valid URL.",
                       code="refused_url") from None


def _is_link(value: Any) -> bool:
  """A search API's `link` worth showing: a non-empty string that `browser.open` would not
  refuse for its characters (`url_policy.has_ambiguous_characters`; a newline in it could
  forge the next result's `URL Source:` line)."""
  return isinstance(value, str) and bool(value) and not has_ambiguous_characters(value)


class WebBackend:
  """Search API + page reader; see the module docstring."""

  def __init__(self, config: WebConfig = WebConfig()):
    self.config = config
    self._search_key = self._key(config.search_key_env, required=True)
    self._reader_key = self._key(config.reader_key_env, required=False)
    self._pages = _Lru(config.cache_pages)
    self._searches = _Lru(config.cache_searches)
    self._disk = _DiskPages(config.cache_dir) if config.cache_dir else None
    if config.attempts < 1:
      raise ValueError(f"WebConfig.attempts: must be >= 1, got {config.attempts}")
    self.policy = RetryPolicy(retries=config.attempts - 1, base_delay=config.backoff_s,
                              max_delay=config.backoff_max_s)
    self._pool = LoopPool(lambda: _LoopState(config), _LoopState.aclose)
    self.http_requests = 0  # attempts sent, for tests and metrics

  def __repr__(self) -> str:  # never show keys
    return f"WebBackend(search_url={self.config.search_url!r}, " \
           f"reader_url={self.config.reader_url!r})"

  @staticmethod
  def _key(env_name: str | None, required: bool) -> str | None:
    if env_name is None:
      return None
    value = os.environ.get(env_name, "").strip()
    if required and not value:
      raise ValueError(f"WebConfig.search_key_env: environment variable {env_name} is not "
                       "set (set it, or use search_key_env=None for a keyless endpoint)")
    return value or None

  async def aclose(self) -> None:
    """Closes this event loop's HTTP client (a later call makes a new one)."""
    await self._pool.aclose()

  async def _request(self, what: str, method: str, url: str,
                     **kwargs: Any) -> httpx.Response:
    """A response below 400, retried under `self.policy`; raises BackendError."""
    state = self._pool.get()

    async def attempt(_: int) -> httpx.Response:
      try:
        async with state.semaphore:
          response = await self._send(state.client, method, url, **kwargs)
      except httpx.TimeoutException:
        raise AttemptFailed(f"timed out after {self.config.timeout_s:g} s") from None
      except httpx.HTTPError as e:
        raise AttemptFailed(type(e).__name__) from None
      if response.status_code >= 400:
        raise status_failure(response)
      return response

    try:
      return await with_retries(self.policy, attempt)
    except GaveUp as e:
      if e.exhausted:
        raise BackendError(f"{what} failed after {e.attempts} attempts: {e.problem}.") from None
      raise BackendError(f"{what} failed: {e.problem}.") from None

  def _origin(self, url: str) -> tuple[str, str, int]:
    target = parse_target(url)
    return target.scheme, target.host, target.port

  async def _send(self, client: httpx.AsyncClient, method: str, url: str,
                  **kwargs: Any) -> httpx.Response:
    """One request, redirects followed by hand (see the module docstring)."""
    trusted = {self._origin(self.config.search_url), self._origin(self.config.reader_url)}
    logical, extensions = url, {}  # logical: the URL before pinning, for relative Locations
    for _ in range(self.config.max_redirects + 1):
      self.http_requests += 1
      try:
        response = await client.request(method, url, extensions=extensions, **kwargs)
      except (httpx.InvalidURL, httpx.RemoteProtocolError) as e:
        # httpx reads a redirect's Location itself and raises on one it cannot parse
        # (a backslash, an octal address): that is the guard's refusal, not a transport error.
        if isinstance(e, httpx.RemoteProtocolError) and "location" not in str(e).lower():
          raise
        raise BackendError(f"Refused to follow a redirect from {logical}: its Location is "
                           "not a URL every parser reads alike.", code="refused_url") from None
      location = response.headers.get("location")
      if not response.is_redirect or location is None:
        return response
      target = parse_target(_join(logical, location))
      if (target.scheme, target.host, target.port) in trusted:
        # A hop back to the reader names the page it will read: that page is checked too.
        embedded = _EMBEDDED_URL.search(target.url.split("://", 1)[1])
        if embedded:
          await check_url(embedded.group(0), allow_private=self.config.allow_private)
        url = logical = target.url
        extensions = {}
        continue
      target = await check_url(target.url, allow_private=self.config.allow_private)
      logical = target.url
      url, headers, extensions = pinned_request(target)
      method, kwargs = "GET", {"headers": headers}  # a foreign host gets no keys, no body
    raise BackendError(f"Opening {url} failed: more than {self.config.max_redirects} "
                       "redirects.", code="refused_url")

  async def search(self, query: str, num: int) -> list[SearchHit]:
    cached = self._searches.get((query, num))
    if cached is not None:
      return list(cached)
    headers = {"X-API-KEY": self._search_key} if self._search_key else {}
    response = await self._request("Search", "POST", self.config.search_url,
                                   json={"q": query, "num": num}, headers=headers)
    try:
      organic = response.json().get("organic", [])
      hits = [SearchHit(str(item.get("title", "")), str(item["link"]),
                        str(item.get("snippet", "")))
              for item in organic if isinstance(item, dict) and _is_link(item.get("link"))]
    except (ValueError, AttributeError) as e:
      raise BackendError(f"Search failed: unreadable response ({type(e).__name__}).") from None
    hits = hits[:num]
    self._searches.put((query, num), tuple(hits))
    return hits

  async def fetch(self, url: str) -> Page:
    url = url.strip()
    target = await check_url(url, allow_private=self.config.allow_private)
    page = self._pages.get(url)
    if page is None and self._disk is not None:
      page = self._disk.get(url)
      if page is not None:
        self._pages.put(url, page)
    if page is not None:
      return page
    state = self._pool.get()
    task = state.inflight.get(url)
    if task is None:  # the first caller starts the fetch; concurrent callers share it
      task = asyncio.ensure_future(self._fetch_uncached(url, target.url))
      state.inflight[url] = task
      task.add_done_callback(_forget(state.inflight, url))
    return await asyncio.shield(task)

  async def _fetch_uncached(self, url: str, checked_url: str) -> Page:
    """The page for `url`, read from the reader as `checked_url` (what check_url parsed)."""
    headers = {"Authorization": f"Bearer {self._reader_key}"} if self._reader_key else {}
    reader = self.config.reader_url.rstrip("/")
    response = await self._request(f"Opening {url}", "GET", f"{reader}/{checked_url}",
                                   headers=headers)
    page = parse_reader_text(response.text, url)
    if not page.content.strip():
      raise BackendError(f"Opening {url} gave an empty page.", code="empty_page")
    self._pages.put(url, page)
    if self._disk is not None:
      self._disk.put(page)
    return page


def _forget(inflight: dict, url: str) -> Callable[[asyncio.Task], None]:
  def callback(task: asyncio.Task) -> None:
    inflight.pop(url, None)
    if not task.cancelled():
      task.exception()  # mark as retrieved: the awaiting callers already saw it
  return callback
