"""The agent loop (rollout/agent.py) around its engine: failures and weight versions, groups
and concurrency, config checks, the real in-process JAX engine and the SGLang HTTP client.

  .venv/bin/python -m pytest tests/rollout/agent -q

The scripted engine: tests/rollout/agent/scaffold.py. One test runs the real in-process JAX
engine on a tiny random model (structure only: it emits garbage); the last runs episodes on a
real SGLang CPU server.
"""
from __future__ import annotations

import asyncio
import dataclasses
import re

import pytest

from carr_common.vocab import STATUSES, TOOL_NAMES
from rollout import chat
from rollout.agent import RolloutConfig, check_carr_record, rollout_groups, run_episode
from rollout.engines.base import GenerationResult
from rollout.trajectory import check_record, rollout_stats
from tests.rollout.agent.scaffold import (ILL_FORMED, ScriptedEngine, answer_text, call,
                                          gold_policy, run, searcher, turn_text)

# ---------------------------------------------------------------- engine failures, versions


def test_engine_failure_marks_failed(fmt, world, backend, record):
  policy, *_ = gold_policy(world, record)

  def failing(prompt, turn, rid):
    if turn == 2:
      return GenerationResult([], [], "failed", "v0", 0, rid, error="HTTP 503 after 3 retries")
    return policy(prompt, turn, rid)
  engine = ScriptedEngine(fmt, failing)
  traj = run(engine, fmt, backend, record)
  assert (traj["status"], traj["error_kind"]) == ("failed", "engine_failed")
  assert traj["error"] == "HTTP 503 after 3 retries"
  assert traj["num_tool_calls"] == {"search": 1, "open": 1, "find": 0}


def test_engine_that_raises_or_aborts_marks_failed(fmt, backend, record):
  def raising(prompt, turn, rid):
    raise ConnectionError("server went away")
  traj = run(ScriptedEngine(fmt, raising), fmt, backend, record)
  assert (traj["status"], traj["error_kind"]) == ("failed", "engine_error")
  assert "ConnectionError: server went away" == traj["error"]
  aborted = lambda p, t, rid: GenerationResult([5], [-0.1], "abort", "v0", 1, rid, "aborted")
  traj = run(ScriptedEngine(fmt, aborted), fmt, backend, record)
  assert (traj["status"], traj["error_kind"]) == ("failed", "engine_abort")
  bad = lambda p, t, rid: GenerationResult([5, 6], [-0.1], "stop", "v0", 1, rid)
  traj = run(ScriptedEngine(fmt, bad), fmt, backend, record)
  assert (traj["status"], traj["error_kind"]) == ("failed", "engine_bad_output")
  too_long = lambda p, t, rid: GenerationResult([5] * 9, [-0.1] * 9, "length", "v0", 1, rid)
  traj = run(ScriptedEngine(fmt, too_long), fmt, backend, record, RolloutConfig(max_turn_tokens=8))
  assert (traj["status"], traj["error_kind"]) == ("failed", "engine_bad_output")
  assert "budget 8" in traj["error"] and sum(traj["loss_mask"]) == 0


def test_weight_change_mid_episode_recorded_per_turn(fmt, world, backend, record):
  policy, *_ = gold_policy(world, record)
  engine = ScriptedEngine(fmt, None)

  def bumping(prompt, turn, rid):
    engine.version = f"v{turn // 2}"
    return policy(prompt, turn, rid)
  engine.policy = bumping
  traj = run(engine, fmt, backend, record)
  assert traj["status"] == "completed"
  assert traj["turn_weight_versions"] == ["v0", "v0", "v1", "v1"]
  assert traj["weight_version"] == "v0"


# ---------------------------------------------------------------- groups, concurrency, config


def test_rollout_groups_order_and_concurrency(fmt, world, backend):
  records = world.train[:6]
  by_question = {r["input_messages"][0]["content"]: r for r in records}

  def policy(prompt, turn, rid):
    record = next(r for q, r in by_question.items() if q in prompt)
    e0 = record["metadata"]["gold"]["entities"]["E0"]
    if turn == 0:
      return turn_text(f"Sample {rid}.", "", [call("browser.search", query=e0["name"])])
    return answer_text(e0["name"], e0["url"])

  # Later samples answer faster, so completion order differs from submission order.
  engine = ScriptedEngine(fmt, policy, delay=lambda rid: 0.02 / (1 + int(rid.split("/")[1])))
  cfg = RolloutConfig(concurrency=5)
  groups = asyncio.run(rollout_groups(engine, fmt, backend, records, 4, cfg, progress=False))
  assert [len(g) for g in groups] == [4] * 6
  for record, group in zip(records, groups):
    for i, traj in enumerate(group):
      check_record(traj)
      assert (traj["prompt_id"], traj["sample_index"], traj["status"]) == (
          record["id"], i, "completed")
      e0 = record["metadata"]["gold"]["entities"]["E0"]
      assert f"## Exact Answer\n{e0['name']}" in traj["history"][-1]["content"]
  assert 1 < engine.max_inflight <= 5
  stats = rollout_stats([t for g in groups for t in g])
  assert stats["status/completed"] == 1.0 and stats["episodes"] == 24
  assert (stats["tool_calls/search"], stats["tool_calls/total"], stats["episode/turns"]) == (
      1.0, 1.0, 2.0)
  assert stats["tool_calls/error_rate"] == 0.0


def test_rollout_stats_exclude_failed_from_means(fmt, backend, record):
  done = run(ScriptedEngine(fmt, lambda p, t, r: ILL_FORMED["unknown_tool"] if t else
                            turn_text("s", "", [call("browser.open", id=3)])), fmt, backend,
             record)
  failed = run(ScriptedEngine(fmt, lambda p, t, rid: GenerationResult(
      [], [], "failed", "v0", 0, rid, error="down")), fmt, backend, record)
  stats = rollout_stats([done, failed])
  assert stats["status/ill_formed"] == 0.5 == stats["status/failed"]
  assert stats["tool_calls/open"] == 1.0 and stats["tool_calls/error_rate"] == 1.0  # no_search
  assert stats["episode/turns"] == 2.0


def test_rollout_groups_crash_is_failed_not_raised(fmt, backend, record):
  class BrokenFormat(chat.ChatFormat):
    def decode(self, ids):
      raise RuntimeError("bug in decode")
  broken = BrokenFormat(fmt.tokenizer)
  engine = ScriptedEngine(fmt, searcher)
  (group,) = asyncio.run(rollout_groups(engine, broken, backend, [record], 2, RolloutConfig(),
                                        progress=False))
  assert [(t["status"], t["error_kind"]) for t in group] == [("failed", "internal_error")] * 2
  assert group[0]["error"] == "RuntimeError: bug in decode"
  assert [t["sample_index"] for t in group] == [0, 1]


@pytest.mark.parametrize("change,field", [
    ({"input_messages": []}, "input_messages"),
    ({"input_messages": [{"role": "assistant", "content": "x"}]}, "input_messages[0]"),
    ({"tools": [{"description": "no name"}]}, "tools"),
    ({"id": None}, "'id'"),
])
def test_bad_records_name_the_field(record, change, field):
  with pytest.raises(ValueError, match=re.escape(field)):
    check_carr_record({**record, **change}, "records[3]")


@pytest.mark.parametrize("field,value", [
    ("temperature", -1.0), ("top_p", 0.0), ("top_k", 0), ("max_turn_tokens", 0),
    ("max_context_tokens", -5), ("max_tool_calls", -1), ("concurrency", 0),
    ("tool_timeout_s", 0.0)])
def test_config_rejects_bad_values(field, value):
  with pytest.raises(ValueError, match=field):
    RolloutConfig(**{field: value})


def test_config_defaults_follow_the_paper():
  cfg = RolloutConfig()
  assert (cfg.temperature, cfg.top_p, cfg.top_k) == (1.0, 1.0, -1)
  assert cfg.max_tool_calls == 100 and cfg.stop_on_ill_formed and cfg.max_context_tokens == 65536
  assert set(dataclasses.asdict(cfg)) >= {"max_turn_tokens", "concurrency"}
  assert set(STATUSES) == {"completed", "truncated", "ill_formed", "tool_limit", "failed"}


# ---------------------------------------------------------------- the real in-process engine


@pytest.mark.slow  # ~20-30 s on 2 shared cores: compiling the decode loop
def test_jax_engine_episode_structure(fmt, backend, record):
  """Tiny random model: garbage text, so only the structure and the log-probs are checked;
  the log-probs must equal a teacher-forced forward pass over the recorded tokens."""
  jax = pytest.importorskip("jax")
  import numpy as np
  from carr_jax.model import qwen3 as M
  from carr_jax.model.config import get_preset
  from carr_jax.model.engine import JaxEngine

  cfg = get_preset("tiny_dense")
  params = M.init_params(cfg, jax.random.key(0))
  engine = JaxEngine(params, cfg, weight_version="w7", max_batch=4, seed=1)
  prompt_len = len(fmt.prompt_ids(record["input_messages"], record["tools"]))
  rcfg = RolloutConfig(max_turn_tokens=12, max_context_tokens=prompt_len + 30)
  (group,) = asyncio.run(rollout_groups(engine, fmt, backend, [record], 2, rcfg,
                                        progress=False))
  for i, traj in enumerate(group):
    check_record(traj)
    assert traj["sample_index"] == i and traj["weight_version"] == "w7"
    assert traj["status"] in ("truncated", "ill_formed"), traj["error"]
    ids, mask = traj["token_ids"], traj["loss_mask"]
    assert ids[:prompt_len] == fmt.prompt_ids(record["input_messages"], record["tools"])
    assert mask[:prompt_len] == [0] * prompt_len and 0 < sum(mask) <= 12
    assert len(ids) <= rcfg.max_context_tokens
    n = len(ids)
    hidden = M.Qwen3(cfg).apply({"params": params}, np.array([ids], np.int32),
                                np.arange(n, dtype=np.int32)[None], np.ones((1, n), np.int32))
    gen = [p for p in range(n) if mask[p]]
    logits = hidden[0, np.array(gen) - 1] @ M.unembed_matrix(params, cfg)  # [k, V]
    logp = np.asarray(jax.nn.log_softmax(logits, axis=-1))[np.arange(len(gen)),
                                                            np.array(ids)[gen]]
    np.testing.assert_allclose(logp, np.array(traj["rollout_logprobs"])[gen], atol=1e-4,
                               rtol=0)
  assert group[0]["token_ids"] != group[1]["token_ids"]  # samples differ


# ---------------------------------------------------------------- the SGLang HTTP client

FAST_RETRIES = dict(backoff_base=0.01, backoff_max=0.05)


def short_record():
  """Few prompt tokens (bare tool schemas), so it fits the test server's 512-token context."""
  return {"id": "short-0", "input_messages": [{"role": "user", "content": "Who founded Velmora?"}],
          "tools": [{"name": n} for n in TOOL_NAMES]}


async def _with_sglang(url, fn, **kw):
  from rollout.engines.sglang import SGLangEngine
  engine = SGLangEngine(url, **{**FAST_RETRIES, **kw})
  try:
    return await fn(engine)
  finally:
    await engine.close()


def test_sglang_failure_after_retries_is_failed(fmt, backend, record):
  from tests.sglang_server import ScriptedServer
  with ScriptedServer(["503"] * 10) as srv:
    traj = asyncio.run(_with_sglang(srv.url, lambda e: run_episode(
        e, fmt, backend, record, 0, RolloutConfig()), max_retries=2))
  check_record(traj)
  assert (traj["status"], traj["error_kind"]) == ("failed", "engine_failed")
  assert "HTTP 503" in traj["error"] and len(srv.requests) == 3
  assert sum(traj["loss_mask"]) == 0


def test_engine_stopping_short_without_stop_token_is_engine_limit(fmt, backend, record):
  from tests.sglang_server import ScriptedServer
  with ScriptedServer() as srv:  # answers one token, finish "length", whatever the budget
    traj = asyncio.run(_with_sglang(srv.url, lambda e: run_episode(
        e, fmt, backend, record, 0, RolloutConfig(max_turn_tokens=64))))
  check_record(traj)
  assert (traj["status"], traj["error_kind"]) == ("truncated", "engine_limit")
  assert srv.requests[0]["sampling_params"]["max_new_tokens"] == 64
  assert traj["token_ids"][:-1] == srv.requests[0]["input_ids"]
  assert traj["rollout_logprobs"][-1] == -0.5 and sum(traj["loss_mask"]) == 1


@pytest.mark.sglang
@pytest.mark.slow
def test_real_sglang_server_episodes(fmt, backend, sglang_server):
  """Tiny random model behind a real SGLang CPU server: structure, and log-probs equal HF's
  log_softmax of the recorded tokens (temperature 1)."""
  from tests.rollout.engines.test_sglang_server import hf_logprobs, max_diff
  rec = short_record()
  rcfg = RolloutConfig(max_turn_tokens=24, max_context_tokens=400, concurrency=3)
  prompt = fmt.prompt_ids(rec["input_messages"], rec["tools"])

  async def go(engine):
    await engine.wait_until_ready(timeout=60)
    return await rollout_groups(engine, fmt, backend, [rec], 3, rcfg, progress=False)
  (group,) = asyncio.run(_with_sglang(sglang_server.url, go))
  for traj in group:
    check_record(traj)
    assert traj["status"] in ("truncated", "ill_formed"), traj["error"]
    assert traj["weight_version"] == "default"
    ids, mask = traj["token_ids"], traj["loss_mask"]
    assert ids[:len(prompt)] == prompt
    assert mask == [0] * len(prompt) + [1] * (len(ids) - len(prompt))
    out = ids[len(prompt):]
    want = hf_logprobs(sglang_server.model_path, prompt, out)
    assert max_diff(traj["rollout_logprobs"][len(prompt):], want) < 1e-4
  assert len({tuple(t["token_ids"]) for t in group}) > 1  # sampled, not greedy

