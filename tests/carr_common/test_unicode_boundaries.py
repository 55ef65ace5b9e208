"""Lone surrogates never crash: cleaned where text enters, and the writers never raise.

A `"\\ud800"` JSON escape is the realistic source (a policy's tool-call argument, a search
API's JSON, a judge's reply all go through `json.loads`). Real HTTP on 127.0.0.1 for the judge.
Run: python -m pytest tests/carr_common/test_unicode_boundaries.py -q
"""
import asyncio
import json

from carr_common.safe_text import clean_json, clean_text, json_depth, json_line
from carr_jax.evaluation.store import ResultStore
from judge import Judge, JudgeConfig
from judge import example_world as ew
from judge.testing import Reply, ScriptedServer, canned_reply, prompt_kind
from rollout.chat import parse_assistant
from rollout.tools import BrowserSession, CorpusBackend, Page
from rollout.trajectory import read_jsonl, write_jsonl

LONE = "\ud800"
ESCAPED = "\\ud800"  # what a model or an endpoint writes inside JSON


def _encodes(value) -> bool:
  json.dumps(value, ensure_ascii=False).encode("utf-8")
  return True


def test_clean_text_and_json_replace_every_surrogate_and_keep_the_rest():
  assert clean_text("a" + LONE + "b\udcff") == "a\ufffdb\ufffd"
  text = "日本語 ok"
  assert clean_text(text) is text  # no copy when nothing to do
  cleaned = clean_json({"k" + LONE: [LONE, 1, None, ("x", {"y": "\udfff"})]})
  assert cleaned == {"k\ufffd": ["\ufffd", 1, None, ["x", {"y": "\ufffd"}]]}


def test_clean_json_and_depth_are_iterative():
  deep = []
  for _ in range(20_000):  # far past the recursion limit
    deep = [deep, LONE]
  cleaned = clean_json(deep)
  assert json_depth(cleaned) == 20_001
  assert cleaned[1] == "\ufffd"


def test_json_line_never_raises_and_keeps_clean_text_verbatim():
  record = {"arguments": {"query": "velmora" + LONE}, "answer": "Orla Venn"}
  line = json_line(record)
  line.encode("utf-8")
  assert json.loads(line) == {"arguments": {"query": "velmora\ufffd"}, "answer": "Orla Venn"}
  assert json_line({"a": "é"}) == '{"a": "é"}\n'


def test_trajectory_and_result_writers_accept_surrogates(tmp_path):
  record = {"id": "q1", "history": [{"role": "assistant", "content": "x" + LONE}]}
  assert write_jsonl(tmp_path / "t.jsonl", [record]) == 1
  assert read_jsonl(tmp_path / "t.jsonl")[0]["history"][0]["content"] == "x\ufffd"
  store = ResultStore(str(tmp_path / "eval"), {"k": 1})
  store.append({"id": "q1", "extracted_answer": LONE}, [record])
  assert ResultStore(str(tmp_path / "eval"), {"k": 1}).rows["q1"]["extracted_answer"] == (
      "\ufffd")


def test_tool_call_argument_escape_becomes_replacement_character():
  body = '{"name": "browser.search", "arguments": {"query": "a' + ESCAPED + '"}}'
  turn = parse_assistant(f"r\n</think>\n\n<tool_call>\n{body}\n</tool_call><|im_end|>")
  assert turn.tool_calls[0].arguments == {"query": "a\ufffd"}
  as_string = '{"name": "browser.open", "arguments": "{\\"id\\": \\"' + ESCAPED + '\\"}"}'
  turn = parse_assistant(f"r\n</think>\n<tool_call>\n{as_string}\n</tool_call>")
  assert turn.tool_calls[0].arguments == {"id": "\ufffd"}
  assert _encodes(turn.to_message())
  assert parse_assistant("a" + LONE + "</think>b" + LONE).content == "b\ufffd"


def test_tool_output_is_cleaned_at_the_session():
  backend = CorpusBackend([Page("https://w.example/s", "Title " + LONE,
                                "Body with a bad char " + LONE + " in it.")])
  session = BrowserSession(backend)
  for name, args in (("browser.search", {"query": "bad char"}), ("browser.open", {"id": 0}),
                     ("browser.find", {"pattern": "bad"}),
                     ("browser.find", {"pattern": "zz" + LONE})):
    result = asyncio.run(session.call(name, args))
    assert LONE not in result.text and result.text.encode("utf-8"), name
  assert "\ufffd" in asyncio.run(session.call("browser.open", {"id": 0})).text


def test_surrogate_in_judge_reply_scores_without_error():
  """The judge's reply carries a JSON-escaped lone surrogate in the extracted answer."""
  raw = ('{"choices": [{"message": {"content": "```json\\n{\\"extracted_final_answer\\": '
         '\\"Orla' + ESCAPED + '\\", \\"reasoning\\": \\"\\", \\"correct\\": \\"yes\\"}\\n'
         '```"}}]}')

  def script(body):
    return Reply(raw_body=raw) if prompt_kind(body) == "outcome" else canned_reply(body)

  with ScriptedServer(script) as server:
    judge = Judge(JudgeConfig(base_url=server.base_url, model="m", api_key_env=""))
    breakdown = judge.score_sync(ew.good_trajectory(), ew.example_task())
  assert breakdown.extracted_answer == "Orla\ufffd"
  assert breakdown.outcome_reward == 1.0 and not breakdown.errors
  json_line(breakdown.to_dict()).encode("utf-8")
  json.dumps(breakdown.to_dict(), ensure_ascii=False).encode("utf-8")  # already clean
