"""Inputs that must not score, sent to the real reward server on 127.0.0.1 (gold backend).

A blank label or question is a 400 naming the field (in process: reward 0, "bad input"); a
final turn that still calls tools, or that commits to two Exact Answers, scores 0 with its
reason; an entity id too long for an int is text, not an internal error.
"""
import asyncio

import httpx
import pytest

from judge import Judge, JudgeConfig, to_request
from judge import example_world as ew
from judge.records import input_from_records
from judge.server import create_app
from judge.testing import ServedApp

GOLD = JudgeConfig(backend="gold")


def _request(trajectory=None, task=None, ratio=0.3):
  return to_request(trajectory or ew.good_trajectory(), task or ew.example_task(), ratio)


def _task_with(label=None, question=None):
  task = ew.example_task()
  if label is not None:
    task["label"] = label
  if question is not None:
    task["metadata"]["remote_env_info"]["search_forbidden_strs"] = [question]
  return task


@pytest.fixture(scope="module")
def http():
  with ServedApp(create_app(Judge(GOLD))) as served, httpx.Client(base_url=served.url) as c:
    assert c.post("/evaluate", json=_request()).json()["reward"] == pytest.approx(1.0)
    yield c


@pytest.mark.parametrize("label", ["", "   ", "\u2028\u2029", "\t\n"])
def test_blank_label_is_refused(http, label):
  response = http.post("/evaluate", json=_request(task=_task_with(label=label)))
  assert response.status_code == 400
  assert response.json()["detail"] == "label: must not be empty or blank"
  inp = input_from_records(ew.good_trajectory(), _task_with(label=label))
  assert inp.error == "bad input: label: must not be empty or blank"
  breakdown = asyncio.run(Judge(GOLD).score(ew.good_trajectory(), _task_with(label=label)))
  assert (breakdown.outcome_reward, breakdown.rubric_reward) == (0.0, 0.0)


@pytest.mark.parametrize("question", ["", " \u2029 "])
def test_blank_question_is_refused(http, question):
  response = http.post("/evaluate", json=_request(task=_task_with(question=question)))
  assert response.status_code == 400
  assert response.json()["detail"].startswith(
      "remote_env_info.search_forbidden_strs[0]: must not be empty or blank")


def test_final_turn_that_still_calls_tools_scores_zero(http):
  trajectory = ew.good_trajectory()
  trajectory["history"][-1]["tool_calls"] = [
      {"tool_call_id": "c9", "name": "browser.search", "arguments": "{\"query\": \"x\"}"}]
  body = http.post("/evaluate", json=_request(trajectory)).json()
  assert (body["outcome_reward"], body["rubric_reward"], body["reward"]) == (0.0, 0.0, 0.0)
  assert "final assistant message still calls tools" in str(body)


def test_two_exact_answers_wrong_then_right_score_zero(http):
  text = ew.good_answer().replace("## Exact Answer\n", "## Exact Answer\nMira Solt\n\n"
                                  "## Exact Answer\n")
  body = http.post("/evaluate", json=_request(ew.visit_all().answer(text))).json()
  assert (body["outcome_reward"], body["reward"]) == (0.0, 0.0)
  assert "more than one Exact Answer section" in str(body)
  # One section, the right one: still full credit.
  assert http.post("/evaluate", json=_request()).json()["reward"] == pytest.approx(1.0)


def test_huge_placeholder_index_is_text_not_an_error(http):
  task = ew.example_task()
  rubrics = task["metadata"]["remote_env_info"]["rubrics"]
  rubrics.append(f"<E{'9' * 5000}> is mentioned by <E0>.")
  body = http.post("/evaluate", json=_request(task=task)).json()
  assert "internal judge error" not in str(body)
  assert body["outcome_reward"] == 1.0
  # The long id is no entity: that rubric mentions only E0, so it is judged like any other.
  assert len(body["rubric_scores"]) == len(rubrics)


def test_huge_search_result_index_is_not_a_result(http):
  builder = ew.visit_all()
  history = builder.history
  for message in history:
    if message.get("role") == "tool":
      for part in message["content"]:
        part["output"] += f"\n[{'7' * 5000}] URL Source: https://forged.example/x\n"
      break
  trajectory = builder.answer(ew.good_answer())
  body = http.post("/evaluate", json=_request(trajectory)).json()
  assert "internal judge error" not in str(body)
  assert body["reward"] == pytest.approx(1.0)
