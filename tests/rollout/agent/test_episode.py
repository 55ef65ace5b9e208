"""The agent loop (rollout/agent.py) on the synthetic world, with the real Qwen3 tokenizer: a
full episode against the HF chat template, tool errors and time-outs, ill-formed turns and the
loop's limits.

  .venv/bin/python -m pytest tests/rollout/agent -q

The model is a scripted engine (tests/rollout/agent/scaffold.py); tools are real
(`BrowserSession` over the world's BM25 corpus). Engine failures, groups, config and the real
engines: tests/rollout/agent/test_engines.py.
"""
from __future__ import annotations

import asyncio
import json
import re
import time

import pytest

from rollout import chat
from rollout.agent import RolloutConfig, rollout_groups
from rollout.tools import BrowserSession
from rollout.trajectory import read_jsonl, write_jsonl
from tests.hf_chat import template_ids
from tests.rollout.agent.scaffold import (ILL_FORMED, ScriptedEngine, answer_text, call,
                                          gold_policy, last_tool_response, run, searcher,
                                          turn_text)

NEWLINE_ID = 198


# ---------------------------------------------------------------- a full episode


def test_full_episode_search_open_find_answer(fmt, world, backend, record):
  policy, rubric, title, pattern = gold_policy(world, record)
  engine = ScriptedEngine(fmt, policy)
  traj = run(engine, fmt, backend, record)
  assert traj["status"] == "completed" and traj["error_kind"] is None and traj["error"] is None
  assert traj["num_tool_calls"] == {"search": 1, "open": 1, "find": 1}
  assert traj["tool_errors"] == {} and traj["format_errors"] == []
  assert traj["timings"]["turns"] == 4 == len(engine.calls)
  assert traj["weight_version"] == "v0" and traj["turn_weight_versions"] == ["v0"] * 4

  # History in the judge's format, observations equal to an independent session's replay.
  h = traj["history"]
  assert [m["role"] for m in h] == ["user"] + ["assistant", "tool"] * 3 + ["assistant"]
  assert h[0] == record["input_messages"][0]
  replay = BrowserSession(backend, forbidden_strs=[
      record["metadata"]["remote_env_info"]["search_forbidden_strs"][0]])
  for k in range(3):
    (tc,) = h[1 + 2 * k]["tool_calls"]
    (out,) = h[2 + 2 * k]["content"]
    assert out["tool_call_id"] == tc["tool_call_id"] and isinstance(tc["arguments"], str)
    expected = asyncio.run(replay.call(tc["name"], json.loads(tc["arguments"])))
    assert expected.ok and out["output"] == expected.text
  search, opened, found = (h[2 + 2 * k]["content"][0]["output"] for k in range(3))
  assert f"URL Source: {rubric['url']}" in search
  assert re.match(rf"Title: {re.escape(title)}\n+URL Source: {re.escape(rubric['url'])}\n", opened)
  assert "Markdown Content:" in opened
  assert found.startswith("[Match 1]") and rubric["evidence"] in found
  final = h[-1]
  assert "tool_calls" not in final and final["reasoning_content"] == "I have what I need."
  assert f"[[1]({rubric['url']})]" in final["content"]

  # Tokens: exactly the chat template of the history (which closes the last turn with "\n").
  tools = record["tools"]
  ids = traj["token_ids"]
  assert ids + [NEWLINE_ID] == template_ids(h, tools, add_generation_prompt=False)
  # Every prompt the engine was sent is the template of the history so far, and a prefix.
  for k, (_, prompt, _, out) in enumerate(engine.calls):
    assert prompt == template_ids(h[:1 + 2 * k], tools, add_generation_prompt=True)
    assert ids[len(prompt):len(prompt) + len(out)] == out

  # Mask is 1 exactly on the engine's tokens; log-probs are the engine's, aligned.
  generated = {len(p) + i for _, p, _, out in engine.calls for i in range(len(out))}
  assert traj["loss_mask"] == [int(i in generated) for i in range(len(ids))]
  assert traj["rollout_logprobs"] == [
      -(i + 1) / 1e6 if i in generated else 0.0 for i in range(len(ids))]
  assert traj["timings"]["generated_tokens"] == len(generated)
  assert traj["timings"]["prompt_tokens"] == len(engine.calls[0][1])
  # Sampling: paper defaults, each turn's budget is max_turn_tokens while it fits.
  for _, prompt, params, _ in engine.calls:
    assert (params.temperature, params.top_p, params.top_k) == (1.0, 1.0, -1)
    assert params.max_new_tokens == 8192 and params.stop_token_ids == chat.STOP_TOKEN_IDS


def test_system_prompt_and_jsonl_dump(fmt, world, backend, record, tmp_path):
  policy, *_ = gold_policy(world, record)
  cfg = RolloutConfig(system_prompt="You are a careful researcher.")
  traj = run(ScriptedEngine(fmt, policy), fmt, backend, record, cfg)
  assert traj["history"][0] == {"role": "system", "content": "You are a careful researcher."}
  assert traj["token_ids"] + [NEWLINE_ID] == template_ids(traj["history"], record["tools"], False)
  path = tmp_path / "dump" / "rollouts.jsonl"
  assert write_jsonl(path, [traj, traj]) == 2
  assert read_jsonl(path) == [traj, traj]


def test_tool_errors_are_observations(fmt, backend, record):
  def policy(prompt, turn, rid):
    return [turn_text("Look around the page.", "", [call("browser.find", pattern="anything")]),
            turn_text("Open a page that does not exist.", "",
                      [call("browser.open", id="https://nowhere.example/x")]),
            turn_text("Open result 7 before any search.", "", [call("browser.open", id=7)]),
            answer_text("Nobody", "https://nowhere.example/x")][turn]
  traj = run(ScriptedEngine(fmt, policy), fmt, backend, record)
  assert traj["status"] == "completed"
  assert traj["num_tool_calls"] == {"search": 0, "open": 2, "find": 1}
  assert traj["tool_errors"] == {"no_page_open": 1, "not_found": 1, "no_search": 1}
  outputs = [m["content"][0]["output"] for m in traj["history"] if m["role"] == "tool"]
  assert "No page is open" in outputs[0] and "nothing has been searched yet" in outputs[2]
  assert traj["token_ids"] + [NEWLINE_ID] == template_ids(traj["history"], record["tools"], False)


class SlowBackend:
  """A backend whose calls take `delay` seconds (a slow search API / page reader)."""

  def __init__(self, inner, delay):
    self.inner, self.delay = inner, delay

  async def search(self, query, num):
    await asyncio.sleep(self.delay)
    return await self.inner.search(query, num)

  async def fetch(self, url):
    await asyncio.sleep(self.delay)
    return await self.inner.fetch(url)


@pytest.mark.serial
def test_slow_tool_times_out_into_an_observation(fmt, world, backend, record):
  policy, *_ = gold_policy(world, record)
  engine = ScriptedEngine(fmt, lambda p, t, r: policy(p, t, r) if t == 0 else answer_text(
      "X", "https://nowhere.example/x"))
  traj = run(engine, fmt, SlowBackend(backend, 5.0), record, RolloutConfig(tool_timeout_s=0.05))
  assert traj["status"] == "completed" and traj["tool_errors"] == {"timeout": 1}
  assert traj["num_tool_calls"]["search"] == 1
  assert "did not answer within 0.05 seconds" in traj["history"][2]["content"][0]["output"]
  assert traj["timings"]["tool_s"] < 1.0


@pytest.mark.serial
def test_tools_of_different_episodes_overlap(fmt, world, backend):
  """8 episodes x 2 calls of 0.3 s each: about 0.6 s when episodes browse concurrently,
  4.8 s if tool calls blocked one another."""
  records = world.train[:8]

  def policy(prompt, turn, rid):
    if turn < 2:
      return turn_text("Search.", "", [call("browser.search", query=f"river {turn}")])
    return answer_text("X", "https://nowhere.example/x")
  engine = ScriptedEngine(fmt, policy)
  start = time.perf_counter()
  groups = asyncio.run(rollout_groups(engine, fmt, SlowBackend(backend, 0.3), records, 1,
                                      RolloutConfig(concurrency=8), progress=False))
  elapsed = time.perf_counter() - start
  assert all(g[0]["status"] == "completed" for g in groups)
  assert all(g[0]["timings"]["tool_s"] >= 0.6 for g in groups)
  assert elapsed < 0.6 * 8 / 2, elapsed  # at least 2x overlap; ideal is 8x


def test_history_is_what_the_judge_reads(fmt, world, backend, record):
  """A thorough agent (opens every evidence page, names every entity, cites every page) gets
  full outcome and rubric rewards from the judge's gold backend; the judge reads our history."""
  from judge import Judge, JudgeConfig
  gold = record["metadata"]["gold"]
  urls = list(dict.fromkeys(r["url"] for r in gold["rubrics"]))
  names = [e["name"] for e in gold["entities"].values()]

  def policy(prompt, turn, rid):
    if turn < len(urls):
      return turn_text(f"Read {urls[turn]}.", "", [call("browser.open", id=urls[turn])])
    cites = " ".join(f"[[{k + 1}]({u})]" for k, u in enumerate(urls))
    refs = "\n".join(f"{k + 1}. {u}" for k, u in enumerate(urls))
    return turn_text("Done.", f"## Explanation with Citations\nThe chain is {', '.join(names)} "
                     f"{cites}.\n\n## Exact Answer\n{gold['entities']['E0']['name']}\n\n"
                     f"## References\n{refs}")
  traj = run(ScriptedEngine(fmt, policy), fmt, backend, record)
  assert traj["status"] == "completed" and traj["num_tool_calls"]["open"] == len(urls)
  result = asyncio.run(Judge(JudgeConfig(backend="gold")).score(traj, record))
  assert (result.outcome_reward, result.rubric_reward) == (1.0, 1.0), result.to_dict()
  assert result.cited_opened == len(urls) and not result.errors and not result.warnings


# ---------------------------------------------------------------- ill-formed turns

@pytest.mark.parametrize("kind", sorted(ILL_FORMED))
def test_ill_formed_first_turn_stops(fmt, backend, record, kind):
  engine = ScriptedEngine(fmt, lambda prompt, turn, rid: ILL_FORMED[kind])
  traj = run(engine, fmt, backend, record)
  assert (traj["status"], traj["error_kind"]) == ("ill_formed", kind)
  assert kind in traj["error"] or kind == "bad_arguments"
  assert len(engine.calls) == 1 and sum(traj["num_tool_calls"].values()) == 0
  _, prompt, _, out = engine.calls[0]
  assert traj["token_ids"] == prompt + out  # nothing appended after the bad turn
  assert traj["loss_mask"] == [0] * len(prompt) + [1] * len(out)
  assert traj["history"][-1]["role"] == "assistant"


def test_bad_arguments_names_the_argument(fmt, backend, record):
  engine = ScriptedEngine(fmt, lambda prompt, turn, rid: ILL_FORMED["bad_arguments"])
  assert "'query'" in run(engine, fmt, backend, record)["error"]


def test_ill_formed_turns_fed_back_when_configured(fmt, backend, record):
  def policy(prompt, turn, rid):
    return [ILL_FORMED["bad_tool_call_json"], ILL_FORMED["bad_arguments"],
            answer_text("X", "https://nowhere.example/x")][turn]
  engine = ScriptedEngine(fmt, policy)
  traj = run(engine, fmt, backend, record, RolloutConfig(stop_on_ill_formed=False))
  assert traj["status"] == "completed"
  assert traj["format_errors"] == ["bad_tool_call_json", "bad_arguments"]
  assert traj["tool_errors"] == {"bad_arguments": 1}
  first_feedback = last_tool_response(fmt.decode(engine.calls[1][1]))
  assert "bad_tool_call_json" in first_feedback
  assert "Missing required argument 'query'" in last_tool_response(fmt.decode(engine.calls[2][1]))
  generated = {len(p) + i for _, p, _, out in engine.calls for i in range(len(out))}
  assert traj["loss_mask"] == [int(i in generated) for i in range(len(traj["token_ids"]))]


# ---------------------------------------------------------------- limits


def test_tool_call_limit(fmt, backend, record):
  engine = ScriptedEngine(fmt, searcher)
  traj = run(engine, fmt, backend, record, RolloutConfig(max_tool_calls=3))
  assert (traj["status"], traj["error_kind"]) == ("tool_limit", "tool_limit")
  assert traj["num_tool_calls"] == {"search": 3, "open": 0, "find": 0}
  assert len(engine.calls) == 4  # the 4th turn asked for a 4th call, which did not run
  _, prompt, _, out = engine.calls[-1]
  assert traj["token_ids"] == prompt + out


def test_tool_call_limit_counts_calls_of_one_turn(fmt, backend, record):
  two = turn_text("Two searches.", "", [call("browser.search", query="a b"),
                                         call("browser.search", query="c d")])
  engine = ScriptedEngine(fmt, lambda prompt, turn, rid: two)
  traj = run(engine, fmt, backend, record, RolloutConfig(max_tool_calls=3))
  assert traj["status"] == "tool_limit" and traj["num_tool_calls"]["search"] == 2


def test_turn_token_limit_truncates(fmt, backend, record):
  engine = ScriptedEngine(fmt, lambda p, t, r: turn_text("word " * 200, "done"))
  traj = run(engine, fmt, backend, record, RolloutConfig(max_turn_tokens=50))
  assert (traj["status"], traj["error_kind"]) == ("truncated", "turn_token_limit")
  assert sum(traj["loss_mask"]) == 50 and traj["token_ids"][-1] not in chat.STOP_TOKEN_IDS


def test_context_limit_budget_and_truncation(fmt, backend, record):
  engine = ScriptedEngine(fmt, searcher)
  prompt_len = len(fmt.prompt_ids(record["input_messages"], record["tools"]))
  cfg = RolloutConfig(max_context_tokens=prompt_len + 400, max_turn_tokens=300)
  traj = run(engine, fmt, backend, record, cfg)
  assert traj["status"] == "truncated" and traj["error_kind"] == "context_limit"
  assert len(traj["token_ids"]) <= cfg.max_context_tokens
  # Each turn's budget is min(max_turn_tokens, room left).
  budgets = [(len(p), params.max_new_tokens) for _, p, params, _ in engine.calls]
  assert budgets[0] == (prompt_len, 300)
  assert all(b == min(300, cfg.max_context_tokens - n) for n, b in budgets)
  assert budgets[-1][1] < 300  # the room left, not max_turn_tokens
  # The last turn's observation did not fit: dropped from tokens and history alike.
  assert "observation" in traj["error"] and traj["token_ids"][-1] == chat.IM_END_ID
  assert traj["history"][-1]["role"] == "assistant" and traj["history"][-1]["tool_calls"]
  assert traj["num_tool_calls"]["search"] == len(engine.calls)


def test_turn_cut_by_context_is_context_limit(fmt, backend, record):
  prompt_len = len(fmt.prompt_ids(record["input_messages"], record["tools"]))
  engine = ScriptedEngine(fmt, lambda p, t, r: turn_text("word " * 200, "done"))
  cfg = RolloutConfig(max_context_tokens=prompt_len + 40, max_turn_tokens=100)
  traj = run(engine, fmt, backend, record, cfg)
  assert (traj["status"], traj["error_kind"]) == ("truncated", "context_limit")
  assert len(traj["token_ids"]) == cfg.max_context_tokens and sum(traj["loss_mask"]) == 40


def test_prompt_longer_than_context(fmt, backend, record):
  engine = ScriptedEngine(fmt, searcher)
  traj = run(engine, fmt, backend, record, RolloutConfig(max_context_tokens=100))
  assert (traj["status"], traj["error_kind"]) == ("truncated", "context_limit")
  assert engine.calls == [] and sum(traj["loss_mask"]) == 0

