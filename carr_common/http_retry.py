"""One HTTP retry policy for every client of the project: the judge's LLM calls, the web tools'
search and reader calls, and the SGLang rollout client.

- `RetryPolicy`: how many retries, the backoff (full jitter: retry k waits a uniform time in
  [0, min(max_delay, base_delay * 2**(k-1))]) and which answers are worth another try: the
  statuses 408, 425, 429, 500, 502, 503, 504, and no usable answer at all (a transport error,
  a timeout, or a body the caller could not read). A `Retry-After` header on a retryable
  answer (seconds, or an HTTP-date) replaces the backoff, capped at `max_delay`.
- `retry_delay`: the pure decision for one failed attempt: None (give up) or the seconds to
  wait before the next one.
- `with_retries`: runs `attempt(1)`, `attempt(2)`, ... under a policy. An attempt returns its
  result or raises `AttemptFailed` (its status, Retry-After and problem text); when the policy
  says stop, `GaveUp` carries the last failure and the number of attempts made.
- `LoopPool`: one client (or whatever must not cross event loops) per running event loop; an
  httpx.AsyncClient is bound to the loop it first ran in.

Standard library and httpx only; this module imports nothing else of the project.
"""
from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import math
import random
import threading
import time
import weakref
from datetime import timezone
from typing import Awaitable, Callable, Generic, TypeVar

import httpx

T = TypeVar("T")
S = TypeVar("S")
RETRYABLE_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
  retries: int = 4  # attempts after the first one
  base_delay: float = 1.0  # seconds; retry k waits uniform(0, base_delay * 2**(k-1)), capped
  max_delay: float = 30.0  # seconds; caps every wait, a server's Retry-After included
  statuses: frozenset[int] = RETRYABLE_STATUSES  # HTTP statuses worth another attempt

  def __post_init__(self):
    if self.retries < 0:
      raise ValueError(f"retries: must be >= 0, got {self.retries}")
    for name in ("base_delay", "max_delay"):
      if not getattr(self, name) >= 0:
        raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")

  @property
  def attempts(self) -> int:
    return self.retries + 1

  def retryable(self, status: int | None) -> bool:
    """Whether an attempt that ended with `status` (None: no usable answer) may be retried."""
    return status is None or status in self.statuses


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
  """Seconds to wait from a Retry-After header (delay-seconds or an HTTP-date, a past date
  being 0), or None when it is absent or unreadable. `now`: epoch seconds (default: now)."""
  if value is None:
    return None
  value = value.strip()
  try:
    seconds = float(value)
  except ValueError:
    seconds = None
  if seconds is not None:
    return seconds if math.isfinite(seconds) and seconds >= 0 else None
  try:
    when = email.utils.parsedate_to_datetime(value)
  except (TypeError, ValueError, IndexError):
    return None
  if when.tzinfo is None:
    when = when.replace(tzinfo=timezone.utc)
  return max(0.0, when.timestamp() - (time.time() if now is None else now))


def retry_delay(policy: RetryPolicy, attempt: int, status: int | None,
                retry_after: str | None = None, *, rng: random.Random | None = None,
                now: float | None = None) -> float | None:
  """The decision after failed attempt number `attempt` (1 = the first): None to give up,
  else the seconds to wait before the next attempt.

  `status`: the answer's HTTP status, or None for no usable answer (transport error, timeout,
  unreadable body). Gives up on a status outside `policy.statuses` and once
  `policy.attempts` attempts are spent. Otherwise waits what `retry_after` says, or a full-
  jitter backoff drawn from `rng` (default: the `random` module), never more than
  `policy.max_delay`.
  """
  if attempt >= policy.attempts or not policy.retryable(status):
    return None
  asked = parse_retry_after(retry_after, now)
  if asked is not None:
    return min(policy.max_delay, asked)
  ceiling = min(policy.max_delay, policy.base_delay * 2.0 ** (attempt - 1))
  return (rng or random).uniform(0.0, ceiling)


class AttemptFailed(Exception):
  """One attempt without a usable answer: `problem` (text for the caller's final error; the
  caller redacts what it puts there), `status` (None: transport error, timeout or unreadable
  body) and the answer's Retry-After header."""

  def __init__(self, problem: str, status: int | None = None, retry_after: str | None = None):
    super().__init__(problem)
    self.problem, self.status, self.retry_after = problem, status, retry_after


class GaveUp(Exception):
  """The policy stopped: `failure` is the last AttemptFailed, `attempts` the attempts made;
  `exhausted` is True when that failure was retryable and the budget ran out, False when the
  failure itself is not retried (e.g. a 400)."""

  def __init__(self, failure: AttemptFailed, attempts: int, exhausted: bool):
    super().__init__(failure.problem)
    self.failure, self.attempts, self.exhausted = failure, attempts, exhausted

  @property
  def problem(self) -> str:
    return self.failure.problem


def status_failure(response: httpx.Response, problem: str | None = None) -> AttemptFailed:
  """The AttemptFailed of an HTTP error answer: its status and Retry-After, and `problem`
  (default "HTTP <status>")."""
  return AttemptFailed(problem or f"HTTP {response.status_code}", response.status_code,
                       response.headers.get("retry-after"))


async def with_retries(policy: RetryPolicy, attempt: Callable[[int], Awaitable[T]], *,
                       on_retry: Callable[[AttemptFailed], None] | None = None,
                       rng: random.Random | None = None) -> T:
  """The result of the first `attempt(n)` (n = 1, 2, ...) that does not raise AttemptFailed.

  After a failure, `retry_delay` decides: `on_retry(failure)` is called and the wait slept
  before the next attempt, or GaveUp is raised. Any other exception propagates at once.
  """
  number = 1
  while True:
    try:
      return await attempt(number)
    except AttemptFailed as failure:
      delay = retry_delay(policy, number, failure.status, failure.retry_after, rng=rng)
      if delay is None:
        raise GaveUp(failure, number, policy.retryable(failure.status)) from None
      if on_retry is not None:
        on_retry(failure)
    await asyncio.sleep(delay)
    number += 1


class LoopPool(Generic[S]):
  """One `make()` per running event loop, made on first use there; `aclose()` hands the
  running loop's to `close` (a later `get()` makes a new one). Thread-safe: several threads
  may each run their own loop over one pool. Entries of a loop that was garbage-collected
  without `aclose()` are dropped with it."""

  def __init__(self, make: Callable[[], S], close: Callable[[S], Awaitable[None]]):
    self._make, self._close = make, close
    self._per_loop: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    self._lock = threading.Lock()

  def get(self) -> S:
    loop = asyncio.get_running_loop()
    with self._lock:
      value = self._per_loop.get(loop)
      if value is None:
        value = self._per_loop[loop] = self._make()
      return value

  async def aclose(self) -> None:
    with self._lock:
      value = self._per_loop.pop(asyncio.get_running_loop(), None)
    if value is not None:
      await self._close(value)
