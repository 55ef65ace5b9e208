"""The agent-loop tests' scripted engine and turns (tests/rollout/agent/).

The model is a scripted engine: it implements `Engine`, decodes the prompt it is sent, asks a
policy for the next turn's text and returns that text tokenized by the real tokenizer (cut at
the first stop token and at max_new_tokens, like a real engine), with log-prob -(p + 1) / 1e6
for a token landing at position p, so the alignment of log-probs with tokens is checkable.
"""
from __future__ import annotations

import asyncio
import re

from rollout import chat
from rollout.agent import RolloutConfig, run_episode
from rollout.engines.base import (QWEN3_VOCAB_SIZE, Engine, GenerationResult,
                                  validate_token_ids)
from rollout.trajectory import check_record


class ScriptedEngine(Engine):
  """Emits `policy(prompt_text, turn, rid)` (a str, or a GenerationResult returned as is)."""

  vocab_size = QWEN3_VOCAB_SIZE

  def __init__(self, fmt, policy, version="v0", delay=None):
    self.fmt, self.policy, self.version, self.delay = fmt, policy, version, delay
    self.calls = []  # (rid, prompt_ids, params, output_ids)
    self.inflight = self.max_inflight = 0

  async def generate(self, prompt_ids, params, rid=None, routes_from=None):
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


def run(engine, fmt, backend, record, cfg=RolloutConfig(), index=0):
  out = asyncio.run(run_episode(engine, fmt, backend, record, index, cfg))
  check_record(out)
  return out



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


ILL_FORMED = {
    "bad_tool_call_json": 'r\n</think>\n\n<tool_call>\n{"name": "browser.search", '
                          'arguments: {}}\n</tool_call><|im_end|>',
    "unknown_tool": turn_text("r", "", [call("python", code="1+1")]),
    "bad_arguments": turn_text("r", "", [call("browser.search", num=3)]),  # query missing
    "missing_think_end": "I keep thinking and answer without closing.<|im_end|>",
    "unclosed_tool_call": 'r\n</think>\n\n<tool_call>\n{"name": "browser.find"<|im_end|>',
}


def searcher(prompt, turn, rid):
  return turn_text(f"Search again, attempt {turn}.", "",
                   [call("browser.search", query=f"novelist born {turn}", num=2)])
