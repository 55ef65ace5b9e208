"""OpenAI-compatible chat client for the judge: bounded concurrency, timeouts, retries, cache.

`ChatClient.complete(messages)` asks `{base_url}/chat/completions` through the `openai`
package's AsyncOpenAI (any OpenAI-compatible base URL; its auth, timeouts and typed errors)
and returns the reply text. The request goes through the SDK's documented generic
`client.post(path, body=..., cast_to=object)` rather than `chat.completions.create`: the
typed method transforms the messages and builds response models on every call, ~1.7 ms more
CPU per call, which the judge benchmark feels (benchmarks/README.md `## judge`).

At most `concurrency` calls are in flight per event loop, spread over SDK clients of 8
connections each; each call is bounded by `timeout` seconds in total. Retries follow the
project's one HTTP policy (carr_common.http_retry) with `retries`, `backoff_base` and
`backoff_max` as its retries, base delay and max delay: 408, 425, 429, 500, 502, 503, 504,
timeouts, connection errors and unreadable bodies are retried with full-jitter exponential
backoff, or after the server's Retry-After (seconds or an HTTP-date, at most `backoff_max`);
other statuses fail at once. The retries are ours, not the SDK's (max_retries=0), so each
attempt is counted in `Metrics`. Then the call fails with `JudgeCallError`, which the judge
records as the step's error; its text is redacted. Proxy variables from the environment are ignored
(trust_env=False), as in the release: an HTTP_PROXY meant for web traffic would otherwise
capture a local judge on 127.0.0.1. Without an API key no Authorization header is sent
(local servers), and the SDK's OPENAI_ORG_ID / OPENAI_PROJECT_ID headers never are.

`ChatClient.ask(messages, parse)` adds the judge cache and re-asking: a reply that `parse`
rejects (OutputError) is sent back with the reason, up to `max_reasks` times; only a reply
that parses is cached. Metrics are plain counters (`Metrics.as_dict()`).
"""
from __future__ import annotations

import asyncio
import dataclasses
import ssl
from typing import Any, Callable, TypeVar

import httpx
import openai

from carr_common.http_retry import (AttemptFailed, GaveUp, LoopPool, RetryPolicy, status_failure,
                                    with_retries)
from carr_common.in_flight import InFlight
from carr_common.redaction import redact
from carr_common.safe_text import clean_text
from judge.cache import JudgeCache, cache_key
from judge.config import JudgeConfig
from judge.parsing import OutputError
from judge.prompts import reask_messages

T = TypeVar("T")
_SLOTS_PER_CLIENT = 8
_NO_KEY = "not-sent"  # AsyncOpenAI needs a key; without one the header is omitted per request
# Headers the SDK would fill from OPENAI_ORG_ID / OPENAI_PROJECT_ID: the judge sends only what
# its JudgeConfig names, whatever endpoint it talks to.
_NOT_CONFIGURED = {"OpenAI-Organization": openai.omit, "OpenAI-Project": openai.omit}
_NO_AUTH = {"Authorization": openai.omit}


def _slots(concurrency: int, per_client: int) -> asyncio.LifoQueue:
  """`concurrency` free slots, each the index of its client, the first client's on top."""
  slots: asyncio.LifoQueue = asyncio.LifoQueue()
  for slot in reversed(range(concurrency)):
    slots.put_nowait(slot // per_client)
  return slots


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
    self.policy = RetryPolicy(retries=config.retries, base_delay=config.backoff_base,
                              max_delay=config.backoff_max)
    self._params = {k: v for k, v in (("temperature", config.temperature),
                                      ("max_tokens", config.max_tokens)) if v is not None}
    self._pool = LoopPool(self._new_loop_state, self._close_loop_state)
    self._ssl_context: ssl.SSLContext | None = None
    self.calls_in_flight = InFlight()  # requests sent and not answered (Judge.in_flight_peaks)

  def _new_loop_state(self) -> tuple[list[openai.AsyncOpenAI], asyncio.LifoQueue]:
    """(clients, free slots) for one event loop; an SDK client belongs to one loop.

    A slot is the index of a client; `concurrency` slots bound the calls in flight. Each
    client gets at most `_SLOTS_PER_CLIENT` of them: the HTTP connection pool is scanned for
    every request, so one client with 256 connections spends a third of its time assigning
    requests to connections (profiled: 4.6 of 13 s), small pools little. Free slots are a
    stack, so light traffic keeps reusing the first client's warm connections. All clients
    share one SSL context (building one costs ~80 ms).
    """
    if self._ssl_context is None:
      self._ssl_context = ssl.create_default_context()
    size = min(_SLOTS_PER_CLIENT, self.config.concurrency)
    clients = [openai.AsyncOpenAI(
        api_key=self.config.api_key() or _NO_KEY, base_url=self.config.base_url,
        max_retries=0, timeout=self.config.timeout,
        http_client=openai.DefaultAsyncHttpxClient(trust_env=False, verify=self._ssl_context))
        for _ in range(-(-self.config.concurrency // size))]
    return clients, _slots(self.config.concurrency, size)

  @staticmethod
  async def _close_loop_state(state: tuple[list[Any], asyncio.LifoQueue]) -> None:
    for client in state[0]:
      await client.close()

  async def aclose(self) -> None:
    """Closes the HTTP clients of the running event loop."""
    await self._pool.aclose()

  def _secrets(self) -> tuple[str, ...]:
    key = self.config.api_key()
    return (key,) if key else ()

  def _status_failure(self, response: httpx.Response) -> AttemptFailed:
    """The failure of an HTTP error answer; the body's start, redacted, tells the reason."""
    detail = redact(clean_text(response.text[:2000]), self._secrets())[:200]
    return status_failure(response, f"HTTP {response.status_code} {detail!r}")

  async def _attempt(self, messages: list[dict[str, str]]) -> tuple[Any, dict[str, Any]]:
    """One request in a free slot, bounded by `timeout` in total (not per read).

    Returns (reply content, usage dict); raises AttemptFailed."""
    clients, slots = self._pool.get()
    headers = {**_NOT_CONFIGURED, **({} if self.config.api_key() else _NO_AUTH)}
    slot = await slots.get()
    try:
      with self.calls_in_flight:
        async with asyncio.timeout(self.config.timeout):
          body = {"model": self.config.model, "messages": messages, **self._params}
          data = await clients[slot].post("/chat/completions", body=body, cast_to=object,
                                          options={"headers": headers})
    except (TimeoutError, openai.APITimeoutError):
      raise AttemptFailed(f"timeout after {self.config.timeout:g}s") from None
    except openai.APIConnectionError as e:
      raise AttemptFailed(f"connection error ({type(e.__cause__ or e).__name__})") from None
    except openai.APIStatusError as e:
      raise self._status_failure(e.response) from None
    except (openai.APIError, ValueError):  # a 200 body that is not a chat completion
      raise AttemptFailed("unreadable response body") from None
    finally:
      slots.put_nowait(slot)
    try:
      content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
      raise AttemptFailed("unreadable response body") from None
    usage = data.get("usage")
    return content, usage if isinstance(usage, dict) else {}

  def _count_retry(self, failure: AttemptFailed) -> None:
    self.metrics.retries += 1

  async def complete(self, messages: list[dict[str, str]], usage: Usage | None = None) -> str:
    """One chat completion, retried under `self.policy`; raises JudgeCallError."""
    async def attempt(_: int) -> tuple[Any, dict[str, Any]]:
      self.metrics.attempts += 1
      return await self._attempt(messages)

    try:
      content, tokens = await with_retries(self.policy, attempt, on_retry=self._count_retry)
    except GaveUp as e:
      self.metrics.call_errors += 1
      if e.exhausted:
        raise JudgeCallError(f"judge call failed after {e.attempts} attempts: "
                             f"{e.problem}") from None
      raise JudgeCallError(f"judge endpoint refused the request: {e.problem}") from None
    self._count(tokens, usage)
    return clean_text(content) if isinstance(content, str) else ""

  def _count(self, tokens: dict[str, Any], usage: Usage | None) -> None:
    """Counts a completion and the token numbers it reported (absent or odd ones as 0)."""
    prompt, completion = [t if isinstance(t, int) and t >= 0 else 0
                          for t in (tokens.get("prompt_tokens"), tokens.get("completion_tokens"))]
    self.metrics.calls += 1
    self.metrics.prompt_tokens += prompt
    self.metrics.completion_tokens += completion
    if usage is not None:
      usage.calls += 1
      usage.prompt_tokens += prompt
      usage.completion_tokens += completion

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
