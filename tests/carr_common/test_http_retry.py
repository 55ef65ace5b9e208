"""The one HTTP retry policy (carr_common/http_retry.py): the decision function exhaustively,
the retry loop, and the per-event-loop client pool. The three clients that use it (judge,
web tools, SGLang) are tested against real local servers in their own test files.

  python -m pytest tests/carr_common/test_http_retry.py -q
"""
import asyncio
import email.utils
import random
import threading

import httpx
import pytest

from carr_common.http_retry import (RETRYABLE_STATUSES, AttemptFailed, GaveUp, LoopPool,
                                    RetryPolicy, parse_retry_after, retry_delay, with_retries)

NOW = 1_800_000_000.0  # a fixed "now" (epoch seconds) for HTTP-date Retry-After values


def http_date(epoch: float) -> str:
  return email.utils.formatdate(epoch, usegmt=True)


def test_retryable_statuses_are_exactly_the_listed_ones_and_no_answer():
  policy = RetryPolicy(retries=3, base_delay=0.0)
  assert RETRYABLE_STATUSES == {408, 425, 429, 500, 502, 503, 504}
  retried = {s for s in range(100, 600) if retry_delay(policy, 1, s) is not None}
  assert retried == RETRYABLE_STATUSES
  assert retry_delay(policy, 1, None) == 0.0  # transport error, timeout, unreadable body


@pytest.mark.parametrize("status", [None, 429, 503])
def test_budget_counts_every_attempt(status):
  policy = RetryPolicy(retries=2, base_delay=0.0)
  assert [retry_delay(policy, n, status) is not None for n in (1, 2, 3, 4)] == [
      True, True, False, False]
  assert retry_delay(RetryPolicy(retries=0), 1, status) is None


def test_full_jitter_stays_within_the_capped_exponential_and_spans_it():
  policy = RetryPolicy(retries=10, base_delay=0.5, max_delay=3.0)
  for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 3.0), (8, 3.0)]:
    rng = random.Random(attempt)
    draws = [retry_delay(policy, attempt, 503, rng=rng) for _ in range(2000)]
    assert all(0.0 <= d <= ceiling for d in draws)
    assert min(draws) < 0.02 * ceiling and max(draws) > 0.98 * ceiling  # full, not half
  first = [retry_delay(policy, 3, None, rng=random.Random(7)) for _ in range(3)]
  again = [retry_delay(policy, 3, None, rng=random.Random(7)) for _ in range(3)]
  assert first == again  # a seeded RNG makes the waits reproducible


@pytest.mark.parametrize("header,seconds", [
    ("0", 0.0), ("7", 7.0), (" 3 ", 3.0), ("1.5", 1.5), ("120", 20.0),
    (http_date(NOW + 10), 10.0), (http_date(NOW - 60), 0.0), (http_date(NOW + 3600), 20.0),
])
def test_retry_after_replaces_the_backoff_up_to_the_cap(header, seconds):
  policy = RetryPolicy(retries=3, base_delay=100.0, max_delay=20.0)
  assert retry_delay(policy, 1, 429, header, now=NOW) == pytest.approx(seconds)


@pytest.mark.parametrize("header", ["-1", "soon", "", "nan", "inf", "Thu, 99 Foo 2026"])
def test_unreadable_retry_after_falls_back_to_the_backoff(header):
  assert parse_retry_after(header, NOW) is None
  policy = RetryPolicy(retries=3, base_delay=0.25, max_delay=20.0)
  assert 0.0 <= retry_delay(policy, 1, 503, header, rng=random.Random(0), now=NOW) <= 0.25


def test_retry_after_does_not_make_a_final_answer_retryable():
  policy = RetryPolicy(retries=3)
  assert retry_delay(policy, 1, 400, "0") is None
  assert retry_delay(policy, 4, 503, "0") is None  # nor extend the budget


def test_naive_http_date_is_read_as_utc():
  assert parse_retry_after("Sun, 06 Nov 1994 08:49:37", 784111777.0 - 5) == pytest.approx(5)


@pytest.mark.parametrize("kw", [dict(retries=-1), dict(base_delay=-0.1),
                                dict(max_delay=float("nan"))])
def test_policy_rejects_bad_values(kw):
  with pytest.raises(ValueError, match=next(iter(kw))):
    RetryPolicy(**kw)


def scripted(outcomes):
  """An attempt function answering from `outcomes` (an AttemptFailed is raised) and the list
  of attempt numbers it saw."""
  seen = []

  async def attempt(number):
    seen.append(number)
    outcome = outcomes[number - 1]
    if isinstance(outcome, BaseException):
      raise outcome
    return outcome

  return attempt, seen


def test_with_retries_returns_the_first_success_and_reports_each_retry():
  attempt, seen = scripted([AttemptFailed("HTTP 503", 503, "0"), AttemptFailed("reset"), "ok"])
  retried = []
  result = asyncio.run(with_retries(RetryPolicy(retries=5, base_delay=0.0), attempt,
                                    on_retry=lambda f: retried.append(f.problem)))
  assert result == "ok" and seen == [1, 2, 3] and retried == ["HTTP 503", "reset"]


def test_with_retries_gives_up_when_exhausted_or_refused():
  attempt, seen = scripted([AttemptFailed("HTTP 503", 503)] * 3)
  with pytest.raises(GaveUp) as info:
    asyncio.run(with_retries(RetryPolicy(retries=2, base_delay=0.0), attempt))
  assert (info.value.attempts, info.value.exhausted, info.value.problem) == (3, True, "HTTP 503")
  attempt, seen = scripted([AttemptFailed("HTTP 400", 400)])
  with pytest.raises(GaveUp) as info:
    asyncio.run(with_retries(RetryPolicy(retries=2, base_delay=0.0), attempt))
  assert (info.value.attempts, info.value.exhausted, seen) == (1, False, [1])


def test_with_retries_lets_other_errors_through_at_once():
  attempt, seen = scripted([KeyError("bug")])
  with pytest.raises(KeyError):
    asyncio.run(with_retries(RetryPolicy(retries=3, base_delay=0.0), attempt))
  assert seen == [1]


def test_loop_pool_gives_one_client_per_event_loop_and_closes_it():
  pool = LoopPool(httpx.AsyncClient, lambda client: client.aclose())
  clients = {}

  async def use(name):
    first, second = pool.get(), pool.get()
    assert first is second and not first.is_closed
    await pool.aclose()
    assert first.is_closed and pool.get() is not first  # a later use makes a new one
    clients[name] = first
    await pool.aclose()

  threads = [threading.Thread(target=lambda k=k: asyncio.run(use(k))) for k in range(3)]
  for t in threads:
    t.start()
  for t in threads:
    t.join(timeout=30)
  assert len({id(c) for c in clients.values()}) == 3
