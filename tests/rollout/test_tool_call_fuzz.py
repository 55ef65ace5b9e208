"""Fuzz: the tool-call parser never raises anything but ChatFormatError (issue 13, class 3).

10,000+ seeded mutations of well-formed turns (bracket storms, 5,000-digit and 100,000-digit
integers, `\\ud800` escapes, raw surrogates, stray tags, cuts, duplicates), each parsed within
50 ms. Every turn must
either parse into calls whose arguments are shallow, schema-checkable and UTF-8 encodable, or
raise ChatFormatError with a kind from ERROR_KINDS; the agent then ends the episode as
`ill_formed`, never `failed/internal_error` (checked end to end with the real tokenizer).
Run: python -m pytest tests/rollout/test_tool_call_fuzz.py -q
"""
import asyncio
import collections
import json
import random
import time

import pytest

from carr_common.safe_text import json_depth
from rollout import chat
from rollout.agent import RolloutConfig, assistant_message, run_episode
from rollout.engines.base import QWEN3_VOCAB_SIZE, Engine, GenerationResult
from rollout.tools import CorpusBackend, Page, tool_schemas, validate_call
from tests.carr_jax.test_tokenizer import qwen3_tokenizer

TOOL_NAMES = chat.tool_names_of(tool_schemas())
BASE_CALLS = [
    [{"name": "browser.search", "arguments": {"query": "velmora founded", "num": 5}}],
    [{"name": "browser.open", "arguments": {"id": 3}}],
    [{"name": "browser.open", "arguments": {"id": "https://w.example/a_(b)"}},
     {"name": "browser.find", "arguments": {"pattern": "founded in"}}],
    [{"name": "browser.search", "arguments": '{"query": "as a JSON string"}'}],
    [],
]
PIECES = ["[", "]", "{", "}", '"', "\\", ",", ":", "\\ud800", "\udcff", "</think>",
          "<tool_call>", "</tool_call>", "<|im_end|>", "null", "1e999", "-0", "9" * 5000,
          '"arguments": ', '{"name": "browser.find"', "\n"]


def base_turn(rng: random.Random) -> str:
  calls = rng.choice(BASE_CALLS)
  return chat.completion_text("I should look this up.", rng.choice(["", "Let me search."]),
                              calls)


def nest(rng: random.Random, text: str) -> str:
  """Wraps the first arguments value in k brackets (k up to 100,000)."""
  depth = rng.choice([3, 17, 50, 1200, 5000, 100_000])
  opener = rng.choice(["[", '{"a": '])
  closer = "]" if opener == "[" else "}"
  body = opener * depth + "1" + closer * depth
  head, sep, tail = text.partition('"arguments": ')
  return head + sep + body + ", " + tail if sep else body + text


def mutate(rng: random.Random, text: str) -> str:
  for _ in range(rng.randrange(1, 4)):
    op = rng.randrange(7)
    at = rng.randrange(len(text) + 1)
    if op == 0:
      text = text[:at] + rng.choice(PIECES) + text[at:]
    elif op == 1:
      text = text[:at] + text[at + rng.randrange(1, 30):]
    elif op == 2:
      text = text[:at] + text[at:at + rng.randrange(1, 60)] * 2 + text[at:]
    elif op == 3:
      text = nest(rng, text)
    elif op == 4:  # a huge integer where a number or a string value was
      digits = "7" * rng.choice([4299, 4301, 5000, 100_000])
      text = text.replace("5", digits, 1) if "5" in text else text.replace("3", digits, 1)
    elif op == 5:
      text = text[:at]
    else:
      text = text.replace('"', rng.choice(["'", '\\"', ""]), rng.randrange(1, 4))
  return text


def check_turn(text: str) -> str:
  """'ok' or the ChatFormatError kind; anything else escaping fails the test."""
  try:
    turn = chat.parse_assistant(text, TOOL_NAMES)
  except chat.ChatFormatError as e:
    assert e.kind in chat.ERROR_KINDS
    return e.kind
  message = assistant_message(turn, [f"call_{k}" for k in range(len(turn.tool_calls))])
  json.dumps(message, ensure_ascii=False).encode("utf-8")  # strict: already clean
  json.dumps(turn.to_message(), ensure_ascii=False).encode("utf-8")
  for call in turn.tool_calls:
    assert json_depth(call.arguments) <= chat.MAX_CALL_DEPTH
    problem = validate_call(call.name, call.arguments)
    assert problem is None or isinstance(problem, str)
  return "ok"


def timed_check(text: str) -> tuple[str, float]:
  """check_turn's verdict and its CPU time in seconds (this thread's, so other processes and
  threads do not count), the best of 3 when the first takes over 10 ms (a lone slow call is
  then the garbage collector, not the parse)."""
  times = []
  for _ in range(3):
    start = time.thread_time()
    kind = check_turn(text)
    times.append(time.thread_time() - start)
    if times[0] <= 0.01:
      break
  return kind, min(times)


def test_ten_thousand_mutated_turns_parse_or_are_ill_formed_within_50_ms_each():
  rng = random.Random(13)
  checked = [timed_check(mutate(rng, base_turn(rng))) for _ in range(10_000)]
  kinds = collections.Counter(kind for kind, _ in checked)
  slowest = max(seconds for _, seconds in checked)
  print(dict(kinds), f"slowest {slowest * 1e3:.1f} ms")
  assert slowest <= 0.05  # turns of up to 1.4 MB (200,000 brackets, 100,000-digit numbers)
  assert sum(kinds.values()) == 10_000
  assert kinds["ok"] > 1000 and kinds["bad_tool_call_json"] > 1000
  assert len(kinds) >= 6  # the mutations reach most checks


def test_deep_nesting_and_huge_integers_are_ill_formed():
  for depth in (17, 1200, 100_000):
    arguments = "[" * depth + "]" * depth
    text = f'r</think><tool_call>{{"name": "browser.search", "arguments": {arguments}}}' \
           "</tool_call>"
    assert check_turn(text) == "bad_tool_call_json"
  for digits in (4301, 100_000):
    text = ('r</think><tool_call>{"name": "browser.search", "arguments": {"query": "q", '
            f'"num": {"9" * digits}}}}}</tool_call>')
    assert check_turn(text) == "bad_tool_call_json"
  as_string = json.dumps("[" * 5000 + "]" * 5000)
  text = f'r</think><tool_call>{{"name": "browser.open", "arguments": {as_string}}}</tool_call>'
  assert check_turn(text) == "arguments_not_object"
  ok = 'r</think><tool_call>{"name": "browser.search", "arguments": {"query": "q", ' \
       f'"num": {"9" * 4000}}}}}</tool_call>'
  assert check_turn(ok) == "ok"  # within Python's digit limit: parsed, then clamped by tools


@pytest.mark.serial
def test_unclosed_tag_storms_are_ill_formed_in_linear_time():
  """16,384 tags in the orders that made a lazy regex rescan to the end from every open tag
  (14.7 s for closes-then-opens before the linear scan; cgrpo_qwen3_4b allows 16,384-token
  turns, parsed in the rollout's event loop). The 1 s bound is hundreds of times what the
  linear scan takes here (~2 ms) and 15x below what the quadratic parse took."""
  k = 16_384
  call = '{"name": "browser.search", "arguments": {"query": "q"}}'
  storms = ["<tool_call>\n" * k, "</tool_call>" * k + "<tool_call>" * k,
            "<tool_call>" * k + "</tool_call>" * k, ("<tool_call>" + call) * k + "</tool_call>"]
  for storm in storms:
    start = time.perf_counter()
    assert check_turn("r</think>" + storm) == "unclosed_tool_call"
    assert time.perf_counter() - start < 1.0
  calls = "".join(f"<tool_call>{call}</tool_call>\n" for _ in range(k))
  turn = chat.parse_assistant("r</think>" + calls, TOOL_NAMES)  # well formed: every call kept
  assert len(turn.tool_calls) == k and turn.content == ""


class OneTurnEngine(Engine):
  """Answers every prompt with the same text, tokenized by the real tokenizer."""

  vocab_size = QWEN3_VOCAB_SIZE

  def __init__(self, fmt, text):
    self.fmt, self.text = fmt, text

  async def generate(self, prompt_ids, params, rid=None, routes_from=None):
    ids = self.fmt.encode(self.text)[:params.max_new_tokens]
    return GenerationResult(ids, [-1e-3] * len(ids), "stop", "v0", len(prompt_ids), rid)

  async def abort(self, rid):
    pass

  @property
  def weight_version(self):
    return "v0"


def test_agent_ends_such_turns_as_ill_formed_not_internal_error():
  fmt = chat.ChatFormat(qwen3_tokenizer())
  backend = CorpusBackend([Page("https://w.example/a", "A", "Some text.")])
  record = {"id": "q", "input_messages": [{"role": "user", "content": "Who?"}],
            "metadata": {"remote_env_info": {"search_forbidden_strs": ["Who?"]}}}
  bodies = ['{"name": "browser.search", "arguments": ' + "[" * 3000 + "]" * 3000 + "}",
            '{"name": "browser.search", "arguments": {"query": "q", "num": ' + "9" * 6000
            + "}}"]
  for body in bodies:
    text = f"r\n</think>\n\n<tool_call>\n{body}\n</tool_call><|im_end|>"
    out = asyncio.run(run_episode(OneTurnEngine(fmt, text), fmt, backend, record, 0,
                                  RolloutConfig(max_context_tokens=32_768)))
    assert (out["status"], out["error_kind"]) == ("ill_formed", "bad_tool_call_json")
