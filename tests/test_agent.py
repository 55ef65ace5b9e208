"""The agent loop (rollout/agent.py) on the synthetic world, with the real Qwen3 tokenizer.

  .venv/bin/python -m pytest tests/test_agent.py -q

The model is a scripted engine: it implements `Engine`, decodes the prompt it is sent, asks a
policy for the next turn's text and returns that text tokenized by the real tokenizer (cut at
the first stop token and at max_new_tokens, like a real engine), with log-prob -(p + 1) / 1e6
for a token landing at position p, so the alignment of log-probs with tokens is checkable.
Tools are real: `BrowserSession` over the world's BM25 corpus.  One test runs the real
in-process JAX engine on a tiny random model (structure only: it emits garbage).
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time

import pytest

from carr_common.vocab import STATUSES, TOOL_NAMES
from lab.world import build_world
from rollout import chat
from rollout.agent import RolloutConfig, check_carr_record, rollout_groups, run_episode
from rollout.engines.base import (QWEN3_VOCAB_SIZE, Engine, GenerationResult,
                                  validate_token_ids)
from rollout.tools import BrowserSession
from rollout.trajectory import check_record, read_jsonl, rollout_stats, write_jsonl
from tests.test_tokenizer import qwen3_tokenizer

NEWLINE_ID = 198


class ScriptedEngine(Engine):
  """Emits `policy(prompt_text, turn, rid)` (a str, or a GenerationResult returned as is)."""

  vocab_size = QWEN3_VOCAB_SIZE

  def __init__(self, fmt, policy, version="v0", delay=None):
    self.fmt, self.policy, self.version, self.delay = fmt, policy, version, delay
    self.calls = []  # (rid, prompt_ids, params, output_ids)
    self.inflight = self.max_inflight = 0

  async def generate(self, prompt_ids, params, rid=None):
    validate_token_ids(prompt_ids, self.vocab_size)
    self.inflight += 1
    self.max_inflight = max(self.max_inflight, self.inflight)
    try:
      if self.delay:
        await asyncio.sleep(self.delay(rid))
      turn = int(rid.rsplit("/", 1)[1])
      reply = self.policy(self.fmt.decode(prompt_ids), turn, rid)
      if isinstance(reply, GenerationResult):
        return reply
      ids = self.fmt.encode(reply)
      stops = [i for i, t in enumerate(ids) if t in params.stop_token_ids]
      ids = ids[:stops[0] + 1] if stops else ids
      ids = ids[:params.max_new_tokens]
      self.calls.append((rid, list(prompt_ids), params, ids))
      finish = "stop" if ids[-1] in params.stop_token_ids else "length"
      return GenerationResult(ids, [-(len(prompt_ids) + i + 1) / 1e6 for i in range(len(ids))],
                              finish, self.version, len(prompt_ids), rid)
    finally:
      self.inflight -= 1

  async def abort(self, rid):
    pass

  @property
  def weight_version(self):
    return self.version


def call(name, **arguments):
  return {"name": name, "arguments": arguments}


def turn_text(reasoning, content="", calls=()):
  return chat.completion_text(reasoning, content, list(calls))


def answer_text(name, url):
  return turn_text("I have what I need.", f"## Explanation with Citations\nIt is {name} "
                   f"[[1]({url})].\n\n## Exact Answer\n{name}\n\n## References\n1. {url}")


def last_tool_response(prompt):
  return prompt.rsplit("<tool_response>\n", 1)[1].split("\n</tool_response>", 1)[0]


@pytest.fixture(scope="module")
def fmt():
  return chat.ChatFormat(qwen3_tokenizer())


@pytest.fixture(scope="module")
def world():
  return build_world(3, 200, 12)


@pytest.fixture(scope="module")
def backend(world):
  return world.corpus_backend()


@pytest.fixture(scope="module")
def record(world):
  return world.train[0]


def run(engine, fmt, backend, record, cfg=RolloutConfig(), index=0):
  out = asyncio.run(run_episode(engine, fmt, backend, record, index, cfg))
  check_record(out)
  return out


def hf_messages(history):
  """Judge-format history -> the HF messages the chat template takes (arguments as dicts)."""
  out = []
  for m in history:
    if m["role"] == "tool":
      out += [{"role": "tool", "content": c["output"]} for c in m["content"]]
    elif m.get("tool_calls"):
      out.append({**m, "tool_calls": [{"name": c["name"], "arguments": json.loads(c["arguments"])}
                                      for c in m["tool_calls"]]})
    else:
      out.append(m)
  return out


def hf_ids(history, tools, add_generation_prompt):
  return list(qwen3_tokenizer().apply_chat_template(
      hf_messages(history), tools=tools, tokenize=True,
      add_generation_prompt=add_generation_prompt, return_dict=False))


# ---------------------------------------------------------------- a full episode


def gold_policy(world, record):
  """search (title of an evidence page) -> open (its result number) -> find (the evidence)
  -> answer citing it; reads the result number off the search observation it was sent."""
  gold = record["metadata"]["gold"]
  rubric = gold["rubrics"][0]
  title = next(p["title"] for p in world.corpus() if p["url"] == rubric["url"])
  pattern = " ".join(rubric["evidence"].split()[:6])
  e0 = gold["entities"]["E0"]

  def policy(prompt, turn, rid):
    if turn == 0:
      return turn_text(f"First find the page of {title}.", "",
                       [call("browser.search", query=title, num=5)])
    if turn == 1:
      index = re.search(rf"\[(\d+)\] URL Source: {re.escape(rubric['url'])}\n",
                        last_tool_response(prompt))
      assert index, "the evidence page is not among the search results"
      return turn_text("Open that result.", "Opening it.",
                       [call("browser.open", id=int(index.group(1)))])
    if turn == 2:
      return turn_text("Check the exact sentence.", "", [call("browser.find", pattern=pattern)])
    return answer_text(e0["name"], rubric["url"])
  return policy, rubric, title, pattern


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
  assert ids + [NEWLINE_ID] == hf_ids(h, tools, add_generation_prompt=False)
  # Every prompt the engine was sent is the template of the history so far, and a prefix.
  for k, (_, prompt, _, out) in enumerate(engine.calls):
    assert prompt == hf_ids(h[:1 + 2 * k], tools, add_generation_prompt=True)
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
  assert traj["token_ids"] + [NEWLINE_ID] == hf_ids(traj["history"], record["tools"], False)
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
  assert traj["token_ids"] + [NEWLINE_ID] == hf_ids(traj["history"], record["tools"], False)


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


def test_slow_tool_times_out_into_an_observation(fmt, world, backend, record):
  policy, *_ = gold_policy(world, record)
  engine = ScriptedEngine(fmt, lambda p, t, r: policy(p, t, r) if t == 0 else answer_text(
      "X", "https://nowhere.example/x"))
  traj = run(engine, fmt, SlowBackend(backend, 5.0), record, RolloutConfig(tool_timeout_s=0.05))
  assert traj["status"] == "completed" and traj["tool_errors"] == {"timeout": 1}
  assert traj["num_tool_calls"]["search"] == 1
  assert "did not answer within 0.05 seconds" in traj["history"][2]["content"][0]["output"]
  assert traj["timings"]["tool_s"] < 1.0


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

ILL_FORMED = {
    "bad_tool_call_json": 'r\n</think>\n\n<tool_call>\n{"name": "browser.search", '
                          'arguments: {}}\n</tool_call><|im_end|>',
    "unknown_tool": turn_text("r", "", [call("python", code="1+1")]),
    "bad_arguments": turn_text("r", "", [call("browser.search", num=3)]),  # query missing
    "missing_think_end": "I keep thinking and answer without closing.<|im_end|>",
    "unclosed_tool_call": 'r\n</think>\n\n<tool_call>\n{"name": "browser.find"<|im_end|>',
}


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


def searcher(prompt, turn, rid):
  return turn_text(f"Search again, attempt {turn}.", "",
                   [call("browser.search", query=f"novelist born {turn}", num=2)])


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
  from tests.test_sglang_engine import hf_logprobs, max_diff
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
