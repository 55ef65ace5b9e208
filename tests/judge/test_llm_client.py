"""The judge's HTTP client against a real scripted OpenAI-compatible server on 127.0.0.1.

Covers retries under the one HTTP policy (carr_common.http_retry) on 429/5xx/timeouts/bad
bodies, a Retry-After that replaces the backoff, give-up with a recorded error, no retry on
other statuses, the concurrency bound, re-asking on unusable output, the cache (memory
and sqlite), and the API key (sent as a header, never stored in config or metrics).
Run: python -m pytest tests/judge/test_llm_client.py -q
"""
import asyncio
import json
import time

import pytest

from judge.cache import JudgeCache
from judge.config import JudgeConfig
from judge.llm import ChatClient, JudgeCallError, StepError, Usage
from judge.parsing import parse_support
from judge.testing import Reply, ScriptedServer

MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


def _client(server, cache=None, **kw):
  config = JudgeConfig(base_url=server.base_url, model="scripted", api_key_env="",
                       **{"backoff_base": 0.001, "backoff_max": 0.01, **kw})
  return ChatClient(config, cache=cache)


def _run(coro_fn):
  """Runs `coro_fn()` in a fresh event loop."""
  return asyncio.run(coro_fn())


def test_retries_on_429_and_5xx_then_succeeds():
  script = [Reply(status=429, content=None, headers={"Retry-After": "0"}),
            Reply(status=500, content=None), Reply(status=503, content=None), "ok"]
  with ScriptedServer(script) as server:
    client = _client(server, retries=3)
    usage = Usage()
    assert _run(lambda: client.complete(MESSAGES, usage)) == "ok"
  assert client.metrics.attempts == 4 and client.metrics.retries == 3
  assert client.metrics.calls == 1 and usage.calls == 1 and usage.prompt_tokens == 100


def test_retry_after_replaces_a_long_backoff():
  busy = Reply(status=503, content=None, headers={"Retry-After": "0"})
  with ScriptedServer([busy, busy, "ok"]) as server:
    client = _client(server, retries=4, backoff_base=30.0, backoff_max=60.0)
    start = time.monotonic()
    assert _run(lambda: client.complete(MESSAGES)) == "ok"
    assert time.monotonic() - start < 10.0  # the 30 s backoff was never slept
    assert len(server.requests) == 3
  assert (client.metrics.attempts, client.metrics.retries, client.metrics.calls) == (3, 2, 1)


def test_gives_up_after_retries_with_reason():
  with ScriptedServer(lambda body: Reply(status=500, content=None)) as server:
    client = _client(server, retries=2)
    with pytest.raises(JudgeCallError, match="after 3 attempts: HTTP 500"):
      _run(lambda: client.complete(MESSAGES))
    assert len(server.requests) == 3
  assert client.metrics.call_errors == 1


@pytest.mark.parametrize("status", [400, 401, 501])
def test_other_statuses_fail_without_retry(status):
  with ScriptedServer(lambda body: Reply(status=status, content=None, headers={"Retry-After": "0"},
                                         raw_body='{"error": "bad key"}')) as server:
    client = _client(server, retries=3)
    with pytest.raises(JudgeCallError, match=f"refused the request: HTTP {status} .*bad key"):
      _run(lambda: client.complete(MESSAGES))
    assert len(server.requests) == 1
  assert client.metrics.call_errors == 1 and client.metrics.retries == 0


def test_timeout_is_retried_and_bad_bodies_too():
  script = [Reply("late", delay=5.0), Reply(raw_body="<html>proxy error</html>"),
            Reply(raw_body='{"choices": []}'), "fine"]
  with ScriptedServer(script) as server:
    client = _client(server, retries=3, timeout=0.3)
    start = time.monotonic()
    assert _run(lambda: client.complete(MESSAGES)) == "fine"
    assert time.monotonic() - start < 3.0  # the slow reply was abandoned at the timeout
  assert client.metrics.retries == 3


def test_null_content_is_an_empty_reply_not_a_transport_error():
  with ScriptedServer([Reply(content=None)]) as server:
    client = _client(server)
    assert _run(lambda: client.complete(MESSAGES)) == ""


def test_concurrency_is_bounded_per_client():
  with ScriptedServer(lambda body: "x", delay=0.1) as server:
    client = _client(server, concurrency=4)

    async def many():
      return await asyncio.gather(*(client.complete(MESSAGES) for _ in range(16)))

    start = time.monotonic()
    assert _run(many) == ["x"] * 16
    elapsed = time.monotonic() - start
  assert server.max_in_flight == 4
  assert elapsed >= 0.4  # 16 calls / 4 at a time * 0.1 s


def test_reask_sends_back_the_bad_reply_and_reason():
  script = ['{"R1": "yes"}', '```json\n{"R1": true}\n```']
  with ScriptedServer(script) as server:
    client = _client(server, max_reasks=2)
    usage = Usage()
    result = _run(lambda: client.ask(MESSAGES, lambda t: parse_support(t, ["R1"]), usage))
    assert result == {"R1": True}
    second = server.requests[1]["messages"]
  assert second[:2] == MESSAGES
  assert second[2] == {"role": "assistant", "content": '{"R1": "yes"}'}
  assert "R1: must be true or false" in second[3]["content"]
  assert usage.reasks == 1 and client.metrics.invalid_outputs == 1


def test_unusable_after_all_reasks_is_a_step_error():
  with ScriptedServer(lambda body: "no json at all") as server:
    client = _client(server, max_reasks=2)
    with pytest.raises(StepError, match="unusable after 3 attempts: no JSON block"):
      _run(lambda: client.ask(MESSAGES, lambda t: parse_support(t, ["R1"])))
    assert len(server.requests) == 3


def test_cache_hits_cost_no_call_and_bad_replies_are_not_cached(tmp_path):
  path = str(tmp_path / "cache.sqlite")
  parse = lambda t: parse_support(t, ["R1"])  # noqa: E731
  script = ["garbage", '{"R1": false}']
  with ScriptedServer(script) as server:
    client = _client(server, cache=JudgeCache(path))
    assert _run(lambda: client.ask(MESSAGES, parse)) == {"R1": False}
    assert _run(lambda: client.ask(MESSAGES, parse)) == {"R1": False}
    assert len(server.requests) == 2  # first ask + one re-ask; the second ask was a hit
    assert client.metrics.cache_hits == 1 and client.metrics.cache_misses == 1
    # A new process (new client, same sqlite file) still hits; a different prompt misses.
    fresh = _client(server, cache=JudgeCache(path))
    assert _run(lambda: fresh.ask(MESSAGES, parse)) == {"R1": False}
    assert len(server.requests) == 2
  assert len(JudgeCache(path)) == 1
  assert json.loads(JudgeCache(path).get(next(iter(client.cache._memory)))) == {"R1": False}


def test_api_key_goes_in_the_header_and_nowhere_else(monkeypatch):
  monkeypatch.setenv("JUDGE_TEST_KEY", "sk-secret-123")
  with ScriptedServer(lambda body: "ok") as server:
    config = JudgeConfig(base_url=server.base_url, model="m", api_key_env="JUDGE_TEST_KEY")
    client = ChatClient(config)
    assert _run(lambda: client.complete(MESSAGES)) == "ok"
  assert server.request_headers[0]["authorization"] == "Bearer sk-secret-123"
  assert "sk-secret-123" not in json.dumps(config.public_dict())
  assert "sk-secret-123" not in json.dumps(client.metrics.as_dict())


def test_no_key_variable_means_no_auth_header(monkeypatch):
  # The SDK would fill these from the environment; the judge sends only what it configures.
  monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-this-endpoint")
  monkeypatch.setenv("OPENAI_ORG_ID", "org-not-for-this-endpoint")
  monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-not-for-this-endpoint")
  with ScriptedServer(lambda body: "ok") as server:
    client = _client(server)
    assert _run(lambda: client.complete(MESSAGES)) == "ok"
  headers = server.request_headers[0]
  assert not {"authorization", "openai-organization", "openai-project"} & set(headers)
  assert "not-for-this-endpoint" not in json.dumps(headers)


def test_scripted_server_delay_range_is_uniform_and_checked():
  """`--max-delay` (the overlap benchmark's judge latency): each call draws its own delay in
  [delay, max_delay]; a range below its floor is refused."""
  from judge import testing
  server = testing.ScriptedServer(testing.canned_reply, delay=1.0, max_delay=3.0, seed=1)
  draws = [server._base_delay() for _ in range(200)]
  assert 1.0 <= min(draws) < 1.2 and 2.8 < max(draws) <= 3.0
  assert testing.ScriptedServer(testing.canned_reply, delay=0.5)._base_delay() == 0.5
  with pytest.raises(SystemExit, match="below --delay"):
    testing.main(["--port", "1", "--delay", "2", "--max-delay", "1"])
