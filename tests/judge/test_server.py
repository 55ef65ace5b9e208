"""The reward server: release-compatible /evaluate, 400s naming the field, same rewards as the
in-process judge (gold and LLM backends), and a real `python -m judge.server` process.

Run: python -m pytest tests/judge/test_server.py -q
"""
import asyncio
import os
import pathlib
import subprocess
import sys
import time

import httpx
import pytest

from judge import Judge, JudgeConfig, to_request
from judge import example_world as ew
from judge.server import create_app
from judge.testing import ScriptedServer, ServedApp
from rollout.engines.sglang_launcher import free_port
from tests.judge.oracle import oracle

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLD = JudgeConfig(backend="gold")


def _trajectories():
  partial = ew.good_answer().replace(ew.cite(2, "E1"), "").replace(ew.cite(3, "E2"), "")
  return {
      "good": ew.good_trajectory(),
      "partial": ew.visit_all().answer(partial),
      "wrong": ew.visit_all().answer(ew.good_answer().replace("Answer\nOrla", "Answer\nMira")),
      "unfinished": ew.visit_all().answer(ew.good_answer(), status="tool_limit"),
      "no answer": {"status": "completed", "history": ew.visit_all().history},
  }


def _requests():
  task = ew.example_task()
  return [to_request(t, task, ratio) for t in _trajectories().values() for ratio in (0, 0.3, 1)]


def test_gold_server_matches_in_process_judge():
  requests = _requests()
  with ServedApp(create_app(Judge(GOLD))) as served, httpx.Client(base_url=served.url) as http:
    assert http.get("/health").json() == {"status": "ok",
                                          "backend": "gold (synthetic world only)"}
    served_results = [http.post("/evaluate", json=r).json() for r in requests]
  local = Judge(GOLD)
  for request, served_result in zip(requests, served_results):
    ratio = request["remote_env_info"]["rubric_reward_ratio"]
    expected = asyncio.run(local.score_request(request)).release_response(ratio)
    assert {k: served_result[k] for k in expected} == expected
  good_03 = served_results[1]
  assert good_03["reward"] == pytest.approx(0.7 * 1.0 + 0.3 * 1.0)
  assert good_03["rubric_scores"]["0"]["filled_rubric"] == (
      "Orla Venn studied composition at Brightwater Conservatory.")
  partial_03 = served_results[4]
  assert (partial_03["outcome_reward"], partial_03["rubric_reward"]) == (1.0, 0.5)
  assert partial_03["reward"] == pytest.approx(0.7 + 0.3 * 0.5)
  assert served_results[3]["rubric_scores"] == {}  # ratio 0: rubrics not judged (release)
  unfinished = served_results[10]
  assert unfinished["reward"] == 0 and "task unfinished" in unfinished["breakdown"][
      "rubric_reason"]


def test_llm_server_matches_in_process_judge_and_score():
  task = ew.example_task()
  trajectories = _trajectories()
  with ScriptedServer(oracle(task)) as llm:
    config = JudgeConfig(base_url=llm.base_url, model="oracle", api_key_env="")
    with ServedApp(create_app(Judge(config))) as served, httpx.Client(
        base_url=served.url, timeout=30) as http:
      served_results = {name: http.post("/evaluate", json=to_request(t, task, 0.5)).json()
                        for name, t in trajectories.items()}
    local = Judge(config)  # its own cache: every judgment is asked again over HTTP
    for name, trajectory in trajectories.items():
      breakdown = local.score_sync(trajectory, task)
      served_result = served_results[name]
      assert (served_result["outcome_reward"], served_result["rubric_reward"]) == (
          breakdown.outcome_reward, breakdown.rubric_reward), name
      assert served_result["reward"] == pytest.approx(
          0.5 * breakdown.outcome_reward + 0.5 * breakdown.rubric_reward)
      assert served_result["rubric_scores"] == breakdown.release_scores()
  assert served_results["partial"]["rubric_reward"] == 0.5


def _valid():
  return to_request(ew.good_trajectory(), ew.example_task(), 0.3)


def _without(key):
  request = _valid()
  del request[key]
  return request


def _set(path, value):
  request = _valid()
  target = request
  for key in path[:-1]:
    target = target[key]
  target[path[-1]] = value
  return request


BAD_REQUESTS = [
    ([1, 2], "body: must be a JSON object"),
    (_without("history"), "history: missing required field"),
    (_without("remote_env_info"), "remote_env_info: missing required field"),
    (_set(["history"], "text"), "history: must be a list of messages"),
    (_set(["history", 1], "text"), "history[1]: must be an object"),
    (_set(["label"], None), "label: must be a string"),
    (_set(["task_unfinished"], "no"), "task_unfinished: must be a boolean"),
    (_set(["remote_env_info"], []), "remote_env_info: must be an object"),
    (_set(["remote_env_info", "search_forbidden_strs"], []),
     "remote_env_info.search_forbidden_strs: must be a non-empty list"),
    (_set(["remote_env_info", "search_forbidden_strs"], [3]),
     "remote_env_info.search_forbidden_strs[0]: must be a string"),
    (_set(["remote_env_info", "rubrics"], "r"), "remote_env_info.rubrics: must be a list"),
    (_set(["remote_env_info", "rubrics", 2], {"t": 1}),
     "remote_env_info.rubrics[2]: must be a string"),
    (_set(["remote_env_info", "rubric_reward_ratio"], 1.5),
     "remote_env_info.rubric_reward_ratio: must be a number in [0, 1]"),
    (_set(["remote_env_info", "gold"], "gold"), "remote_env_info.gold: must be an object"),
]


def test_malformed_requests_get_400_naming_the_field():
  with ServedApp(create_app(Judge(GOLD))) as served, httpx.Client(base_url=served.url) as http:
    for body, message in BAD_REQUESTS:
      response = http.post("/evaluate", json=body)
      assert response.status_code == 400, message
      assert response.json()["detail"].startswith(message), response.json()
    response = http.post("/evaluate", content=b"{not json",
                         headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["detail"] == "body: not valid JSON"
    # Still serving, and the metrics endpoint reports what was scored.
    assert http.post("/evaluate", json=_valid()).json()["reward"] == pytest.approx(1.0)
    assert http.get("/metrics").json()["trajectories"] == 1


def _wait_healthy(process: subprocess.Popen, url: str, timeout_s: float = 60) -> None:
  """Until the server process at `url` answers /health (fails if it exits or times out)."""
  deadline = time.monotonic() + timeout_s
  while True:
    try:
      if httpx.get(url + "/health").status_code == 200:
        return
    except httpx.TransportError:
      pass
    assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
    time.sleep(0.2)


def test_module_entry_point_serves_on_loopback():
  port = free_port()
  env = {**os.environ, "PYTHONPATH": str(ROOT)}
  process = subprocess.Popen([sys.executable, "-m", "judge.server", "--backend", "gold",
                              "--port", str(port)], cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  try:
    url = f"http://127.0.0.1:{port}"
    _wait_healthy(process, url)
    result = httpx.post(url + "/evaluate", json=_valid(), timeout=30).json()
    assert (result["outcome_reward"], result["rubric_reward"]) == (1.0, 1.0)
  finally:
    process.terminate()
    process.wait(timeout=20)
