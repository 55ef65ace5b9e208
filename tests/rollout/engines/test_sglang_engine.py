"""SGLangEngine: fast client tests against a scripted local server, and real-server tests.

Run the fast part:   python -m pytest tests/rollout/engines/test_sglang_engine.py -q -m "not sglang"
Run the real part:   python -m pytest tests/rollout/engines/test_sglang_engine.py -q -m sglang
(the real part needs scripts/setup_sglang_cpu.sh; one server is started for the session).

Real-server tolerances: SGLang (fp32, torch_native attention) vs HF transformers fp32 log-probs
of the same 32 tokens, measured on three prompts: max |diff| <= 5e-6 for greedy and T = 1,
<= 2.7e-5 at T = 0.5 (1/T doubles any logit error, and sampled requests get log(softmax(.))
rather than log_softmax, which loses relative precision on unlikely tokens).  The tests demand
1e-4, the house fp32 tolerance for logits.
"""
from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import pathlib
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


# ------------------------------------------------------------------ scripted server (fast)


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


# ------------------------------------------------------------------ real SGLang server
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12, stop_token_ids=())


@functools.cache
def hf_model(model_dir):
  import torch
  from transformers import AutoModelForCausalLM
  return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()


def hf_logits(model_dir, prompt, output_ids):
  """HF fp32 logits that scored each output token: [O, V] (float64 for the comparison)."""
  import torch
  with torch.no_grad():
    logits = hf_model(model_dir)(torch.tensor([list(prompt) + list(output_ids)])).logits
  return logits[0, len(prompt) - 1: len(prompt) - 1 + len(output_ids)].double()


def hf_logprobs(model_dir, prompt, output_ids, temperature=1.0):
  import torch
  logits = hf_logits(model_dir, prompt, output_ids) / temperature
  picked = torch.tensor(output_ids)[:, None]
  return torch.log_softmax(logits, -1).gather(1, picked)[:, 0].numpy()


def max_diff(a, b):
  return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def prompts_for_test():
  from rollout.chat import ChatFormat
  from tests.carr_jax.test_tokenizer import qwen3_tokenizer
  chat_prompt = ChatFormat(qwen3_tokenizer()).prompt_ids(
      [{"role": "user", "content": "Which river flows past Kleinstadt?"}])
  return [PROMPT, chat_prompt, [151644, 9707, 11, 1879, 0]]


async def with_engine(url, fn, **kw):
  engine = SGLangEngine(url, **kw)
  try:
    await engine.wait_until_ready(timeout=60)
    return await fn(engine)
  finally:
    await engine.close()


@pytest.mark.sglang
@pytest.mark.slow
def test_greedy_is_deterministic_and_matches_hf(sglang_server):
  prompts = prompts_for_test()

  async def go(engine):
    batched = await engine.generate_many(prompts, GREEDY)
    single = [await engine.generate(p, GREEDY) for p in prompts]
    return batched, single

  batched, single = run(with_engine(sglang_server.url, go))
  model_dir = sglang_server.model_path
  for prompt, b, s in zip(prompts, batched, single):
    assert b.finish_reason == s.finish_reason == "length" and b.prompt_tokens == len(prompt)
    assert b.output_ids == s.output_ids and len(b.output_ids) == 12
    assert max_diff(b.logprobs, s.logprobs) < 1e-4
    # The greedy path is HF's argmax path, and the log-probs are HF's log_softmax(logits).
    assert b.output_ids == hf_logits(model_dir, prompt, b.output_ids).argmax(-1).tolist()
    assert max_diff(b.logprobs, hf_logprobs(model_dir, prompt, b.output_ids)) < 1e-4


@pytest.mark.sglang
@pytest.mark.slow
def test_logprobs_are_after_temperature(sglang_server):
  """SGLang reports log softmax(logits / T), not renormalized by top-k (module docstring)."""
  model_dir = sglang_server.model_path
  cases = [SamplingParams(temperature=t, top_k=k, max_new_tokens=10, stop_token_ids=())
           for t, k in ((0.5, -1), (1.5, -1), (1.0, 3))]

  async def go(engine):
    return [await engine.generate(PROMPT, p) for p in cases]

  for params, r in zip(cases, run(with_engine(sglang_server.url, go))):
    scaled = hf_logprobs(model_dir, PROMPT, r.output_ids, params.temperature)
    raw = hf_logprobs(model_dir, PROMPT, r.output_ids, 1.0)
    assert max_diff(r.logprobs, scaled) < 1e-4
    if params.temperature != 1.0:
      assert max_diff(r.logprobs, raw) > 0.05
    if params.top_k > 0:  # top-k applied to sampling, but log-probs keep the full softmax
      top = hf_logits(model_dir, PROMPT, r.output_ids).topk(params.top_k, -1).indices
      assert all(t in row for t, row in zip(r.output_ids, top.tolist()))
      assert float(np.max(r.logprobs)) < -0.01


@pytest.mark.sglang
@pytest.mark.slow
def test_stop_token_ends_and_is_returned_and_abort_by_rid(sglang_server):
  async def go(engine):
    free = await engine.generate(PROMPT, GREEDY)
    k = next(i for i in range(2, 12) if free.output_ids[i] not in free.output_ids[:i])
    stopped = await engine.generate(PROMPT, dataclasses.replace(
        GREEDY, stop_token_ids=(free.output_ids[k],)))
    long = asyncio.create_task(engine.generate(
        PROMPT, dataclasses.replace(GREEDY, max_new_tokens=400), rid="to-abort"))
    await asyncio.sleep(1.0)
    await engine.abort("to-abort")
    return free, k, stopped, await long

  free, k, stopped, aborted = run(with_engine(sglang_server.url, go))
  assert stopped.finish_reason == "stop" and stopped.output_ids == free.output_ids[:k + 1]
  assert len(stopped.logprobs) == k + 1
  assert aborted.finish_reason == "abort" and len(aborted.output_ids) < 400
  assert aborted.rid == "to-abort"


@pytest.mark.sglang
@pytest.mark.slow
def test_update_weights_from_disk_changes_outputs_and_version(sglang_server, tiny_qwen3_dirs):
  model_a, model_b = tiny_qwen3_dirs

  async def go(engine):
    base = await engine.generate(PROMPT, GREEDY)
    await engine.update_weights_from_disk(str(model_b), "step-1")
    served_b = await engine.served_weight_version(sglang_server.url)
    on_b = await engine.generate(PROMPT, GREEDY)
    await engine.update_weights_from_disk(str(model_a), "step-2")
    on_a = await engine.generate(PROMPT, GREEDY)
    return base, served_b, on_b, on_a, engine.weight_version

  base, served_b, on_b, on_a, version = run(with_engine(sglang_server.url, go))
  assert served_b == on_b.weight_version == "step-1" and version == on_a.weight_version
  assert on_b.output_ids != base.output_ids
  assert max_diff(on_b.logprobs, hf_logprobs(model_b, PROMPT, on_b.output_ids)) < 1e-4
  assert on_a.output_ids == base.output_ids and on_a.weight_version == "step-2"
  assert max_diff(on_a.logprobs, base.logprobs) < 1e-4


@pytest.mark.sglang
@pytest.mark.slow
def test_update_weights_while_the_last_request_finishes(sglang_server, tiny_qwen3_dirs):
  """A sync sent while a straggler still decodes waits for it, then flushes and serves the
  new weights (CI, stop 9: SGLang's in-update flush refused a just-finished batch)."""
  model_a, model_b = tiny_qwen3_dirs
  straggler = SamplingParams(temperature=0.0, max_new_tokens=48, stop_token_ids=())

  async def go(engine):
    base = await engine.generate(PROMPT, GREEDY)
    for i, model in enumerate([model_b, model_a] * 3):
      running = asyncio.create_task(engine.generate(PROMPT, straggler))
      await asyncio.sleep(0.02 * i)
      await engine.update_weights_from_disk(str(model), f"overlap-{i}")
      assert (await running).ok
      after = await engine.generate(PROMPT, GREEDY)
      assert after.weight_version == f"overlap-{i}"
    return base, after

  base, after = run(with_engine(sglang_server.url, go))
  assert after.output_ids == base.output_ids  # back on model A, nothing stale in the cache
  assert max_diff(after.logprobs, base.logprobs) < 1e-4


@pytest.mark.sglang
@pytest.mark.slow
def test_server_killed_mid_batch(sglang_server):
  """Retries carry a batch across a crash + restart; without a restart, results are failed."""
  prompts = prompts_for_test()
  params = dataclasses.replace(GREEDY, max_new_tokens=64)
  reference = run(with_engine(sglang_server.url, lambda e: e.generate_many(prompts, params)))

  async def crash_and_restart(engine):
    batch = asyncio.create_task(engine.generate_many(prompts, params))
    deadline = time.monotonic() + 10
    while engine.inflight < len(prompts) and time.monotonic() < deadline:
      await asyncio.sleep(0.005)  # until the whole batch is on the server
    await asyncio.sleep(0.05)
    sglang_server.kill()
    await asyncio.to_thread(sglang_server.restart)
    return await batch

  results = run(with_engine(sglang_server.url, crash_and_restart, max_retries=60,
                            backoff_base=0.5, backoff_max=4.0))
  assert [r.output_ids for r in results] == [r.output_ids for r in reference]
  assert all(r.ok for r in results) and max(r.attempts for r in results) > 1

  sglang_server.kill()
  t0 = time.monotonic()
  failed = run(one(sglang_server.url, max_retries=2))
  assert failed.finish_reason == "failed" and failed.attempts == 3
  assert time.monotonic() - t0 < 30  # the next test's fixture restarts the server


def test_sgl_kernel_standin_assign_matches_kernel_semantics():
  """The stand-in's assign_req_to_token_pool_cpu vs a per-request loop (the Triton kernel's)."""
  import importlib.util
  import torch
  path = (pathlib.Path(__file__).resolve().parents[3]
          / "scripts" / "sglang_compat" / "sgl_kernel" / "__init__.py")
  spec = importlib.util.spec_from_file_location("sgl_kernel_standin", path)
  standin = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(standin)
  gen = torch.Generator().manual_seed(0)
  table = torch.full((6, 32), -1, dtype=torch.int32)  # [R, pool_len]
  rows = torch.tensor([4, 0, 2, 5])
  start = torch.tensor([0, 7, 3, 10])
  end = torch.tensor([5, 7, 11, 12])  # request 1 adds nothing
  slots = torch.randint(0, 4096, (int((end - start).sum()),), generator=gen)  # int64
  expected = table.clone()
  offset = 0
  for r, s, e in zip(rows.tolist(), start.tolist(), end.tolist()):
    expected[r, s:e] = slots[offset: offset + e - s].to(torch.int32)
    offset += e - s
  standin.assign_req_to_token_pool_cpu(rows, table, start, end, slots, table.shape[1])
  assert torch.equal(table, expected)
  with pytest.raises(NotImplementedError, match="speculative decoding"):
    standin.verify_tree_greedy_cpu()
