"""SGLangEngine's client against a scripted local server (tests/sglang_server.py): retries and
back-off, failures counted not raised, redaction, validation, concurrency, load spreading,
weight-update handshakes and routes. The same client against a real SGLang CPU server:
test_sglang_server.py.

    python -m pytest tests/rollout/engines/test_sglang_engine.py -q
"""
from __future__ import annotations

import asyncio
import base64
import re
import time

import httpx
import numpy as np

import pytest

from rollout.engines import (InvalidTokenIdsError, SamplingParams, SGLangEngine,
                             WeightUpdateError)
from rollout.engines.sglang import parse_generate_response
from rollout.engines.sglang_launcher import free_port
from tests.sglang_server import ScriptedServer

PROMPT = [151644, 872, 198, 6023, 151645, 198, 151644, 77091, 198, 151667, 198]
FAST = dict(backoff_base=0.01, backoff_max=0.05)


def run(coro):
  return asyncio.run(coro)


async def one(url, prompt=PROMPT, **kw):
  engine = SGLangEngine(url, **{**FAST, **kw})
  try:
    return await engine.generate(prompt, SamplingParams(max_new_tokens=1))
  finally:
    await engine.close()



def test_retries_5xx_and_dropped_connections_then_succeeds():
  with ScriptedServer(["503", "drop", "500"]) as srv:
    result = run(one(srv.url))
  assert result.ok and result.attempts == 4
  assert result.output_ids == [PROMPT[-1] + 1] and result.logprobs == [-0.5]
  rids = [r["rid"] for r in srv.requests]
  assert len(rids) == 4 and len(set(rids)) == 4  # retries never reuse a server-side rid
  assert all(r.startswith(rids[0]) for r in rids)
  assert srv.requests[0]["sampling_params"]["stop_token_ids"] == [151643, 151645]


def test_retry_after_replaces_a_long_backoff():
  with ScriptedServer(["503;Retry-After=0"] * 2) as srv:
    start = time.monotonic()
    result = run(one(srv.url, backoff_base=30.0, backoff_max=60.0))
    assert time.monotonic() - start < 10.0  # the 30 s backoff was never slept
  assert result.ok and result.attempts == 3 and len(srv.requests) == 3


def test_one_engine_serves_several_event_loops():
  """Each event loop gets its own HTTP client; close() closes the running loop's."""
  with ScriptedServer() as srv:
    engine = SGLangEngine(srv.url, **FAST)

    async def go():
      try:
        return await engine.generate(PROMPT, SamplingParams(max_new_tokens=1))
      finally:
        await engine.close()

    results = [run(go()) for _ in range(2)]
  assert all(r.ok and r.attempts == 1 for r in results)


def test_gives_up_after_retry_budget_and_marks_failed():
  with ScriptedServer(["503"] * 10) as srv:
    result = run(one(srv.url, max_retries=2))
  assert result.finish_reason == "failed" and not result.ok
  assert result.attempts == 3 and len(srv.requests) == 3
  assert "HTTP 503" in result.error and result.output_ids == []


def test_client_errors_are_not_retried():
  with ScriptedServer(["400"]) as srv:
    result = run(one(srv.url, max_retries=5))
  assert result.finish_reason == "failed" and result.attempts == 1
  assert "HTTP 400" in result.error


@pytest.mark.parametrize("action,fragment", [("not_json", "answer is not JSON"),
                                             ("no_meta", "malformed /generate answer")])
def test_malformed_answers_become_failed_results(action, fragment):
  with ScriptedServer([action]) as srv:
    result = run(one(srv.url))
  assert result.finish_reason == "failed" and fragment in result.error


def test_credentials_never_reach_the_error_text():
  """A 401 echoing a key and tokens, from a URL with a password (sent as basic auth)."""
  basic = base64.b64encode(b"carr:url-password-123").decode()
  secrets = ("sk-echoed0123456789", "gw-token-0123456789", "url-password-123", basic)
  with ScriptedServer(["echo_secrets", "echo_secrets"]) as srv:
    url = srv.url.replace("http://", "http://carr:url-password-123@")
    result = run(one(url, max_retries=0))
    raw = httpx.post(url + "/generate", json={"input_ids": PROMPT}, timeout=10)
  assert all(s in raw.text + url for s in secrets)  # the leak is real without redaction
  assert result.finish_reason == "failed" and "HTTP 401" in result.error
  for secret in secrets:
    assert secret not in result.error, result.error
  assert "[REDACTED]" in result.error


def test_weight_update_errors_are_redacted():
  from rollout.engines.sglang import WeightUpdateError
  error = WeightUpdateError("http://u:pw-9876543@host: HTTP 400: {'api_key': 'k-123456'}")
  assert "pw-9876543" not in str(error) and "k-123456" not in str(error)


def test_unreachable_server_fails_after_budget():
  result = run(one(f"http://127.0.0.1:{free_port()}", max_retries=1))
  assert result.finish_reason == "failed" and "ConnectError" in result.error


@pytest.mark.parametrize("ids,fragment", [
    (PROMPT + [151936], "prompt_ids[11] = 151936 is outside [0, 151936)"),
    ([-1] + PROMPT, "prompt_ids[0] = -1"),
    ([1, 2.0], "prompt_ids[1] = 2.0 is not an int"),
    ([True, 2], "prompt_ids[0] = True is not an int"),
    ([], "prompt_ids is empty"),
])
def test_invalid_token_ids_rejected_before_sending(ids, fragment):
  with ScriptedServer() as srv:
    with pytest.raises(InvalidTokenIdsError, match=re.escape(fragment)):
      run(one(srv.url, prompt=ids))
  assert srv.requests == []


def test_generate_many_validates_every_prompt_first():
  async def go(url):
    engine = SGLangEngine(url, **FAST)
    try:
      await engine.generate_many([PROMPT, PROMPT + [10**6]], SamplingParams())
    finally:
      await engine.close()

  with ScriptedServer() as srv:
    with pytest.raises(InvalidTokenIdsError, match=r"prompts\[1\]"):
      run(go(srv.url))
  assert srv.requests == []  # nothing half-sent


def test_concurrency_is_bounded():
  async def go(url):
    engine = SGLangEngine(url, max_concurrency=3, **FAST)
    try:
      return await engine.generate_many([PROMPT[:k] for k in range(2, 11)],
                                        SamplingParams(max_new_tokens=1))
    finally:
      await engine.close()

  with ScriptedServer(delay=0.15) as srv:
    results = run(go(srv.url))
  assert srv.max_active == 3
  assert [r.output_ids for r in results] == [[PROMPT[k - 1] + 1] for k in range(2, 11)]


def test_load_spreads_over_servers_and_avoids_a_dead_one():
  dead = f"http://127.0.0.1:{free_port()}"

  async def go(urls):
    engine = SGLangEngine(urls, max_concurrency=8, **FAST)
    try:
      return await engine.generate_many([PROMPT] * 12, SamplingParams(max_new_tokens=1))
    finally:
      await engine.close()

  with ScriptedServer(delay=0.1) as a, ScriptedServer(delay=0.1) as b:
    results = run(go([dead, a.url, b.url]))
  assert all(r.ok for r in results)
  assert len(a.requests) + len(b.requests) == 12
  assert min(len(a.requests), len(b.requests)) >= 4  # least-loaded keeps both busy
  assert sum(r.attempts - 1 for r in results) >= 1  # someone hit the dead URL and moved on


def test_update_weights_confirms_served_version():
  async def go(urls, version):
    engine = SGLangEngine(urls, **FAST)
    try:
      await engine.wait_until_ready(timeout=10)
      before = engine.weight_version
      await engine.update_weights_from_disk("/ckpt/step_3", version)
      return before, engine.weight_version, (await engine.generate(PROMPT, SamplingParams()))
    finally:
      await engine.close()

  with ScriptedServer() as a, ScriptedServer() as b:
    before, after, result = run(go([a.url, b.url], "3"))
    assert (before, after, result.weight_version) == ("v0", "3", "3")
    assert a.weight_version == b.weight_version == "3"
  with ScriptedServer() as a, ScriptedServer(accept_updates=False) as b:
    with pytest.raises(WeightUpdateError, match=r"serves weight_version 'v0'.*expected '4'"):
      run(go([a.url, b.url], "4"))


def test_update_waits_for_requests_in_flight_and_holds_new_ones():
  """Rollouts overlapping training: a request in flight at an update ends on the weights it
  started with (reports the old version); one sent during the update waits and gets the new."""
  async def go(url):
    engine = SGLangEngine(url, **FAST)
    try:
      await engine.wait_until_ready(timeout=10)
      early = asyncio.create_task(engine.generate(PROMPT, SamplingParams()))
      await asyncio.sleep(0.1)  # answered after 0.4 s
      update = asyncio.create_task(engine.update_weights_from_disk("/ckpt/step_1", "1"))
      await asyncio.sleep(0.05)
      late = await engine.generate(PROMPT, SamplingParams())
      await update
      return await early, late
    finally:
      await engine.close()

  with ScriptedServer(delay=0.4) as server:
    early, late = run(go(server.url))
    assert (early.weight_version, late.weight_version) == ("v0", "1")
    assert [path for path, _ in server.control] == ["/update_weights_from_disk", "/flush_cache"]


def test_update_weights_flushes_old_cache_after_waiting_for_idle():
  """The flush is a separate /flush_cache?timeout call (SGLang's in-update flush is refused
  while the last batch is not yet retired); a flush that never happens fails the update."""
  async def go(url):
    engine = SGLangEngine(url, idle_timeout=7.5, **FAST)
    try:
      await engine.update_weights_from_disk("/ckpt/step_5", "5")
    finally:
      await engine.close()

  with ScriptedServer() as server:
    run(go(server.url))
    update, flush = server.control
    assert update == ("/update_weights_from_disk", {
        "model_path": "/ckpt/step_5", "weight_version": "5", "flush_cache": False})
    assert flush == ("/flush_cache", "timeout=7.5")
  with ScriptedServer() as server:
    server.busy = True
    with pytest.raises(WeightUpdateError, match=r"not flushed .*7.5 s.*HTTP 400"):
      run(go(server.url))
    assert [path for path, _ in server.control].count("/flush_cache") == 1  # one attempt


def test_routes_are_asked_from_a_position_and_decoded():
  """Routing replay: routes_from=3 asks SGLang for positions 3 .. seqlen - 2 (its
  routed_experts_start_len); the base64 int32 answer comes back as [positions, layers, k]."""
  async def ask(url, **kw):
    engine = SGLangEngine(url, route_shape=(2, 2, 16), **FAST)
    try:
      return await engine.generate(PROMPT, SamplingParams(max_new_tokens=1), **kw)
    finally:
      await engine.close()
  with ScriptedServer(route_shape=(2, 2)) as srv:
    result = run(ask(srv.url, routes_from=3))
    plain = run(ask(srv.url))
  assert result.ok and result.routed_experts.dtype == np.uint8  # compact: 16 experts
  np.testing.assert_array_equal(result.routed_experts, srv.routes_for(3, len(PROMPT)))
  assert result.routed_experts.shape == (len(PROMPT) + 1 - 1 - 3, 2, 2)  # prompt + 1 out - 1
  asked, unasked = srv.requests
  assert asked["return_routed_experts"] and asked["routed_experts_start_len"] == 3
  assert "return_routed_experts" not in unasked and plain.routed_experts is None


def test_a_missing_or_broken_route_answer_fails_the_request():
  async def ask(url):
    engine = SGLangEngine(url, route_shape=(2, 2, 16), **FAST)
    try:
      return await engine.generate(PROMPT, SamplingParams(max_new_tokens=1), routes_from=0)
    finally:
      await engine.close()
  with ScriptedServer(["no_routes"]) as srv:
    missing = run(ask(srv.url))
  assert missing.finish_reason == "failed" and "--enable-return-routed-experts" in missing.error
  with ScriptedServer(route_shape=(3, 1)) as srv:  # 3 ints a position: not [layers 2, k 2]
    broken = run(ask(srv.url))
  assert broken.finish_reason == "failed" and "routed_experts" in broken.error

  async def ask_8(url):  # a model of 8 experts: the server's ids reach 15
    engine = SGLangEngine(url, route_shape=(2, 2, 8), **FAST)
    try:
      return await engine.generate(PROMPT, SamplingParams(max_new_tokens=1), routes_from=0)
    finally:
      await engine.close()
  with ScriptedServer() as srv:
    outside = run(ask_8(srv.url))
  assert outside.finish_reason == "failed" and "expert ids must be in [0, 8)" in outside.error


def test_an_episode_through_sglang_holds_every_route_the_trainer_replays():
  """The agent loop over SGLang: two turns with a tool output between them; each turn asks
  only for the positions not yet seen, and the record's routes cover 0 .. L-2, stored uint8,
  equal to what the server routed (rollout.routes.check passes)."""
  from rollout import agent
  from rollout import routes as routes_lib
  from rollout.trajectory import Trajectory

  async def episode(url):
    engine = SGLangEngine(url, route_shape=(2, 2, 16), **FAST)
    traj = Trajectory.start("q", 0, PROMPT, [])
    try:
      for turn in range(2):
        result = await agent._generate(engine, traj, SamplingParams(max_new_tokens=1),
                                       f"q/0/{turn}")
        assert result is not None, traj.error
        traj.add_generated(result.output_ids, result.logprobs, result.weight_version)
        if turn == 0:
          traj.add_observation([20, 21, 22])
    finally:
      await engine.close()
    traj.finish("completed")
    return traj.to_record()
  with ScriptedServer(route_shape=(2, 2)) as srv:
    record = run(episode(srv.url))
  starts = [r["routed_experts_start_len"] for r in srv.requests]
  assert starts == [0, len(PROMPT)]  # turn 2 from turn 1's output token, routed only now
  assert routes_lib.check(record, 2, 2, 16) is None
  stored = routes_lib.from_json(record["routed_experts"])
  assert stored.dtype == np.uint8
  np.testing.assert_array_equal(stored, srv.routes_for(0, len(record["token_ids"]) - 1))


def test_routes_need_a_route_shape_and_a_position_in_the_prompt():
  async def ask(engine, routes_from):
    try:
      return await engine.generate(PROMPT, SamplingParams(max_new_tokens=1),
                                   routes_from=routes_from)
    finally:
      await engine.close()
  with pytest.raises(ValueError, match="routes_from=0 needs route_shape"):
    run(ask(SGLangEngine("http://127.0.0.1:9", **FAST), 0))
  with pytest.raises(ValueError, match=f"in \\[0, {len(PROMPT)}\\]"):
    run(ask(SGLangEngine("http://127.0.0.1:9", route_shape=(2, 2, 16), **FAST), len(PROMPT) + 1))


def test_inconsistent_logprob_ids_mark_result_failed():
  body = {"output_ids": [5, 6], "meta_info": {
      "finish_reason": {"type": "stop", "matched": 6}, "prompt_tokens": 3,
      "weight_version": "w", "output_token_logprobs": [[-1.0, 5, None], [-2.0, 7, None]]}}
  result = parse_generate_response(body, "r", 1)
  assert result.finish_reason == "failed" and "differ" in result.error


@pytest.mark.parametrize("kw", [dict(temperature=-0.1), dict(top_p=0.0), dict(top_k=0),
                                dict(max_new_tokens=0)])
def test_sampling_params_reject_bad_values(kw):
  with pytest.raises(ValueError, match=next(iter(kw))):
    SamplingParams(**kw)
