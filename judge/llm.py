"""OpenAI-compatible chat client for the judge: bounded concurrency, timeouts, retries, cache.

`ChatClient.complete(messages)` POSTs `{base_url}/chat/completions` with httpx (small pooled
AsyncClients per event loop) and returns the reply text. At most `concurrency` calls are in
flight per event loop; each call is bounded by `timeout` seconds in total; 429, 5xx, timeouts,
connection errors and unreadable bodies are retried `retries` times with jittered exponential
backoff (a Retry-After header is honoured up to `backoff_max`); other 4xx fail at once. Then
the call fails with `JudgeCallError`, which the judge records as the step's error.

`ChatClient.ask(messages, parse)` adds the judge cache and re-asking: a reply that `parse`
rejects (OutputError) is sent back with the reason, up to `max_reasks` times; only a reply
that parses is cached. Metrics are plain counters (`Metrics.as_dict()`).
"""
from __future__ import annotations

import asyncio
import dataclasses
import random
import weakref
from typing import Any, Callable, TypeVar

import httpx

from judge.cache import JudgeCache, cache_key
from judge.config import JudgeConfig
from judge.parsing import OutputError
from judge.prompts import reask_messages
from judge.records import clean_text
from judge.redaction import redact

T = TypeVar("T")
_SLOTS_PER_CLIENT = 8


class StepError(Exception):
  """A judge step that could not produce a result; `reason` goes into the breakdown."""

  def __init__(self, reason: str):
    super().__init__(reason)
    self.reason = reason


class JudgeCallError(StepError):
  """The LLM endpoint did not give a usable HTTP answer after all retries."""


@dataclasses.dataclass
class Usage:
  """Per-trajectory accounting, copied into its Breakdown."""
  calls: int = 0
  cache_hits: int = 0
  prompt_tokens: int = 0
  completion_tokens: int = 0
  reasks: int = 0


@dataclasses.dataclass
class Metrics:
  """Process-wide counters of one Judge (or one rubric-generation run)."""
  trajectories: int = 0
  calls: int = 0  # completions received (HTTP 200)
  attempts: int = 0  # HTTP requests sent, including retried ones
  retries: int = 0
  call_errors: int = 0  # calls given up after all retries
  invalid_outputs: int = 0  # replies rejected by a parser
  reasks: int = 0
  step_errors: int = 0  # judge steps that ended in an error reason
  deadlines: int = 0  # trajectories whose judging ran past JudgeConfig.deadline_s
  cache_hits: int = 0
  cache_misses: int = 0
  prompt_tokens: int = 0
  completion_tokens: int = 0

  def as_dict(self) -> dict[str, float]:
    out: dict[str, float] = dataclasses.asdict(self)
    lookups = self.cache_hits + self.cache_misses
    out["cache_hit_rate"] = self.cache_hits / lookups if lookups else 0.0
    return out


class ChatClient:

  def __init__(self, config: JudgeConfig, metrics: Metrics | None = None,
               cache: JudgeCache | None = None):
    self.config = config
    self.metrics = metrics or Metrics()
    self.cache = cache
    self._url = config.base_url.rstrip("/") + "/chat/completions"
    self._params = {k: v for k, v in (("temperature", config.temperature),
                                      ("max_tokens", config.max_tokens)) if v is not None}
    self._per_loop: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    self._ssl_context = None

  def _loop_state(self) -> tuple[list[httpx.AsyncClient], asyncio.LifoQueue]:
    """(clients, free slots) of the running event loop; httpx objects belong to one loop.

    A slot is the index of a client; `concurrency` slots bound the calls in flight. Each
    client gets at most `_SLOTS_PER_CLIENT` of them: httpx scans its whole pool for every
    request, so one client with 128 connections costs ~5 ms of CPU per call, small pools ~1 ms.
    Free slots are a stack, so light traffic keeps reusing the first client's warm
    connections. All clients share one SSL context (building one costs tens of ms).
    Proxy variables from the environment are ignored (trust_env=False), as in the release:
    an HTTP_PROXY meant for web traffic would otherwise capture a local judge on 127.0.0.1.
    """
    loop = asyncio.get_running_loop()
    state = self._per_loop.get(loop)
    if state is None:
      if self._ssl_context is None:
        self._ssl_context = httpx.create_ssl_context()
      key = self.config.api_key()
      headers = {"Authorization": f"Bearer {key}"} if key else {}
      size = min(_SLOTS_PER_CLIENT, self.config.concurrency)
      limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
      clients = [httpx.AsyncClient(headers=headers, limits=limits, timeout=self.config.timeout,
                                   verify=self._ssl_context, trust_env=False)
                 for _ in range(-(-self.config.concurrency // size))]
      slots: asyncio.LifoQueue = asyncio.LifoQueue()
      for slot in reversed(range(self.config.concurrency)):
        slots.put_nowait(slot // size)
      state = self._per_loop[loop] = (clients, slots)
    return state

  async def aclose(self) -> None:
    """Closes the HTTP clients of the running event loop."""
    state = self._per_loop.pop(asyncio.get_running_loop(), None)
    for client in state[0] if state else []:
      await client.aclose()

  def _secrets(self) -> tuple[str, ...]:
    key = self.config.api_key()
    return (key,) if key else ()

  def _backoff(self, attempt: int, retry_after: str | None) -> float:
    try:
      if retry_after is not None:
        return min(self.config.backoff_max, max(0.0, float(retry_after)))
    except ValueError:
      pass
    delay = min(self.config.backoff_max, self.config.backoff_base * 2 ** attempt)
    return delay * (0.5 + 0.5 * random.random())

  async def _post(self, body: dict[str, Any]) -> httpx.Response:
    """One POST in a free slot, bounded by `timeout` in total (not per read)."""
    clients, slots = self._loop_state()
    slot = await slots.get()
    try:
      async with asyncio.timeout(self.config.timeout):
        return await clients[slot].post(self._url, json=body)
    finally:
      slots.put_nowait(slot)

  async def complete(self, messages: list[dict[str, str]], usage: Usage | None = None) -> str:
    """One chat completion (retried on transient errors); raises JudgeCallError."""
    body = {"model": self.config.model, "messages": messages, **self._params}
    problem = ""
    for attempt in range(self.config.retries + 1):
      self.metrics.attempts += 1
      retry_after = None
      try:
        response = await self._post(body)
      except (TimeoutError, httpx.TimeoutException):
        problem = f"timeout after {self.config.timeout:g}s"
      except httpx.HTTPError as e:
        problem = f"connection error ({type(e).__name__})"
      else:
        status = response.status_code
        if status == 200:
          try:
            data = response.json()
            text = data["choices"][0]["message"]["content"]
          except (ValueError, KeyError, IndexError, TypeError):
            problem = "unreadable response body"
          else:
            self._count(data, usage)
            return clean_text(text) if isinstance(text, str) else ""
        elif status == 429 or status >= 500:
          problem, retry_after = f"HTTP {status}", response.headers.get("retry-after")
        else:
          self.metrics.call_errors += 1
          detail = redact(clean_text(response.text[:2000]), self._secrets())[:200]
          raise JudgeCallError(f"judge endpoint refused the request: HTTP {status} "
                               f"{detail!r}")
      if attempt < self.config.retries:
        self.metrics.retries += 1
        await asyncio.sleep(self._backoff(attempt, retry_after))
    self.metrics.call_errors += 1
    raise JudgeCallError(f"judge call failed after {self.config.retries + 1} attempts: "
                         f"{problem}")

  def _count(self, data: Any, usage: Usage | None) -> None:
    reported = data.get("usage") if isinstance(data, dict) else None
    reported = reported if isinstance(reported, dict) else {}
    tokens = [reported.get(k) for k in ("prompt_tokens", "completion_tokens")]
    tokens = [t if isinstance(t, int) and t >= 0 else 0 for t in tokens]
    self.metrics.calls += 1
    self.metrics.prompt_tokens += tokens[0]
    self.metrics.completion_tokens += tokens[1]
    if usage is not None:
      usage.calls += 1
      usage.prompt_tokens += tokens[0]
      usage.completion_tokens += tokens[1]

  async def ask(self, messages: list[dict[str, str]], parse: Callable[[str], T],
                usage: Usage | None = None) -> T:
    """A parsed judge answer: from the cache, or asked (and re-asked) until it parses."""
    key = None
    if self.cache is not None:
      key = cache_key(self.config.model, messages, self._params)
      cached = self.cache.get(key)
      if cached is not None:
        try:
          value = parse(cached)
        except OutputError:
          pass  # parser rules changed since it was stored; ask again
        else:
          self.metrics.cache_hits += 1
          if usage is not None:
            usage.cache_hits += 1
          return value
      self.metrics.cache_misses += 1
    conversation, reason = messages, ""
    for attempt in range(self.config.max_reasks + 1):
      text = await self.complete(conversation, usage)
      try:
        value = parse(text)
      except OutputError as e:
        reason = e.reason
        self.metrics.invalid_outputs += 1
        if attempt < self.config.max_reasks:
          self.metrics.reasks += 1
          if usage is not None:
            usage.reasks += 1
          conversation = reask_messages(messages, text, reason)
        continue
      if key is not None:
        self.cache.put(key, text)
      return value
    raise StepError(f"judge output unusable after {self.config.max_reasks + 1} attempts: "
                    f"{reason}")
