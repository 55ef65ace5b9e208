"""Fuzz: malformed judge outputs (over real HTTP) and malformed trajectories/records.

Seeded, so failures reproduce. Every result must be a Breakdown with rewards in [0, 1] and a
non-empty reason for both rewards; no exception may escape the judge.
Run: python -m pytest tests/judge/test_fuzz.py -q
"""
import asyncio
import copy
import json
import random

import pytest

from judge import Breakdown, Judge, JudgeConfig
from judge import example_world as ew
from judge.parsing import OutputError, parse_entity_names, parse_outcome, parse_support
from judge.testing import Reply, ScriptedServer, canned_reply, prompt_keys

ODD_VALUES = [None, 0, -1, 1e308, True, "", "null", "None", "true", "x" * 20_000, [], {},
              ["a", 1], {"k": None}, "\udcff\udcfe", "日本語", "<E0>", "```json", "[[1](x)]"]


def garbage_reply(rng: random.Random, body: dict) -> Reply:
  """A malformed (or now and then valid) reply to a judge request."""
  keys = prompt_keys(body)
  choice = rng.randrange(14)
  if choice == 0:
    return Reply("I cannot decide. " * rng.randrange(1, 50))
  if choice == 1:
    return Reply("```json\n{" + ", ".join(f'"{k}": ' for k in keys) + "\n```")
  if choice == 2:  # wrong or extra keys
    wrong = rng.sample(keys, k=max(0, len(keys) - 1)) + ["E99", "extra"][:rng.randrange(3)]
    return Reply(json.dumps({k: "x" for k in wrong}))
  if choice == 3:  # right keys, odd values
    return Reply(json.dumps({k: rng.choice(ODD_VALUES[:14]) for k in keys}))
  if choice == 4:
    return Reply(content=None if rng.random() < 0.5 else "")
  if choice == 5:
    return Reply(status=rng.choice([429, 500, 502, 503]), content=None)
  if choice == 6:
    return Reply(status=rng.choice([400, 404, 422]), content=None, raw_body='{"error": 1}')
  if choice == 7:
    return Reply(raw_body=rng.choice([b'{"choices": [{"message": {"content": "\xff\xfe"}}]}',
                                      "<html>bad gateway</html>", '{"choices": "x"}', "null",
                                      SURROGATE_REPLY]))
  if choice == 8:
    return Reply(json.dumps(rng.choice([[], 3, "text", None, [{"E0": "x"}]])))
  if choice == 9:
    return Reply("```json\n" + json.dumps({k: "x" * 5_000 for k in keys}) + "\n```")
  if choice == 10:
    return Reply("delayed", delay=4.0)  # past the client's timeout
  return VALID  # lets later steps run and some trajectories succeed


VALID = Reply()  # marker: the script answers validly
# A lone surrogate escaped in the reply JSON, inside the answer and as an entity name.
SURROGATE_REPLY = ('{"choices": [{"message": {"content": "```json\\n{\\"E0\\": \\"\\ud800\\", '
                   '\\"extracted_final_answer\\": \\"a\\udfff\\", \\"correct\\": \\"no\\"}'
                   '\\n```"}}]}')


def test_fuzzed_judge_outputs_over_http():
  rng = random.Random(1234)
  task = ew.example_task()
  served = []

  def script(body):
    reply = garbage_reply(rng, body)
    served.append(reply is not VALID)
    return canned_reply(body) if reply is VALID else reply

  items = [(ew.good_trajectory(extra=f"#{i}"), task) for i in range(400)]
  with ScriptedServer(script) as server:
    judge = Judge(JudgeConfig(base_url=server.base_url, model="fuzz", api_key_env="",
                              retries=1, max_reasks=1, timeout=2.0, backoff_base=0.001,
                              backoff_max=0.002, concurrency=64))
    results = asyncio.run(judge.score_batch(items))
  print(f"served {len(served)} replies, {sum(served)} malformed")
  assert sum(served) >= 1000  # malformed replies actually served
  _check(results)
  assert sum(bool(r.errors) for r in results) > 100
  assert any(r.rubric_reward == 1.0 for r in results) and any(
      r.outcome_reward == 1.0 for r in results)
  metrics = judge.metrics()
  assert metrics["invalid_outputs"] > 0 and metrics["call_errors"] > 0
  assert metrics["retries"] > 0 and metrics["trajectories"] == 400


def _paths(node, prefix=()):
  yield prefix
  if isinstance(node, dict):
    for key, value in node.items():
      yield from _paths(value, prefix + (key,))
  elif isinstance(node, list):
    for index, value in enumerate(node):
      yield from _paths(value, prefix + (index,))


def _mutate(rng: random.Random, root):
  paths = [p for p in _paths(root) if p]
  if not paths:
    return rng.choice(ODD_VALUES)
  path = rng.choice(paths)
  parent = root
  for key in path[:-1]:
    parent = parent[key]
  action = rng.randrange(4)
  if action == 0 and isinstance(parent, dict):
    del parent[path[-1]]
  elif action == 1 and isinstance(parent, list):
    rng.shuffle(parent)
  elif action == 2 and isinstance(parent[path[-1]], str):
    text = parent[path[-1]]
    cut = rng.randrange(len(text) + 1)
    parent[path[-1]] = text[:cut] + rng.choice(["\udcff", "\x00", "<E7>", "## References\n",
                                                "[[9](https://x.example)]", "}"]) + text[cut:]
  else:
    parent[path[-1]] = copy.deepcopy(rng.choice(ODD_VALUES))
  return root


def fuzzed_records(seed: int, count: int):
  rng = random.Random(seed)
  base_trajectory, base_task = ew.good_trajectory(), ew.example_task()
  for _ in range(count):
    trajectory, task = copy.deepcopy(base_trajectory), copy.deepcopy(base_task)
    for _ in range(rng.randrange(1, 4)):
      if rng.random() < 0.6:
        trajectory = _mutate(rng, trajectory)
      else:
        task = _mutate(rng, task)
    yield trajectory, task


def _check(results):
  for result in results:
    assert isinstance(result, Breakdown)
    assert 0.0 <= result.outcome_reward <= 1.0 and 0.0 <= result.rubric_reward <= 1.0
    assert isinstance(result.outcome_reason, str) and result.outcome_reason
    assert isinstance(result.rubric_reason, str) and result.rubric_reason
    json.dumps(result.to_dict(), ensure_ascii=False).encode("utf-8")  # serialisable, valid UTF-8


def test_fuzzed_trajectories_and_records_gold_backend():
  records = list(fuzzed_records(seed=7, count=800))
  judge = Judge(JudgeConfig(backend="gold"))
  results = asyncio.run(judge.score_batch(records))
  _check(results)
  reasons = {r.rubric_reason.split(":")[0] for r in results}
  assert len(reasons) >= 5  # the mutations reach many different checks
  assert any(r.rubric_reward == 1.0 for r in results)  # harmless mutations still score


def test_fuzzed_trajectories_llm_backend():
  records = list(fuzzed_records(seed=11, count=150))
  with ScriptedServer(canned_reply) as server:
    judge = Judge(JudgeConfig(base_url=server.base_url, model="m", api_key_env=""))
    results = asyncio.run(judge.score_batch(records))
  _check(results)
  assert judge.metrics()["call_errors"] == 0  # every request we sent was well-formed


@pytest.mark.parametrize("seed", range(4))
def test_parsers_raise_only_output_error(seed):
  rng = random.Random(seed)
  for _ in range(500):
    value = rng.choice(ODD_VALUES + [{"E0": v, "E1": w} for v in ODD_VALUES[:6]
                                     for w in ODD_VALUES[:3]])
    text = rng.choice([json.dumps(value), f"```json\n{json.dumps(value)}\n```",
                       str(value)[:200], value])
    for parse in (lambda t: parse_entity_names(t, ["E0", "E1"]),
                  lambda t: parse_support(t, ["E0", "E1"]), parse_outcome):
      try:
        parse(text)
      except OutputError as e:
        assert e.reason
