"""The three-step judge end to end: gold backend, LLM backend over real HTTP, bad inputs.

The LLM backend runs against a scripted server whose judge (tests/judge/oracle.py) sees only
the prompts, so gold and LLM agreeing on every variant checks the shared pipeline plumbing.
Run: python -m pytest tests/judge/test_pipeline.py -q
"""
import asyncio
import copy

import pytest

from judge import Judge, JudgeConfig
from judge import example_world as ew
from judge.testing import Reply, ScriptedServer
from tests.judge.oracle import oracle

GOLD = JudgeConfig(backend="gold")


def _answer(explanation: str, exact: str = ew.NAMES["E0"]) -> str:
  return f"## Explanation with Citations\n{explanation}\n\n## Exact Answer\n{exact}\n"


def _variants():
  n = ew.NAMES
  partial = (f"{n['E0']} studied composition at the {n['E1']} {ew.cite(1, 'E0')}, in "
             f"{n['E2']}. In 1998 {n['E0']} received the {n['E3']} {ew.cite(1, 'E0')}.")
  no_prize = ew.good_answer().replace(f"the {n['E3']} ", "a prize ")
  snippet_only = ew.TrajectoryBuilder().search("q", [
      ("Orla Venn", ew.URLS["E0"], "Orla Venn is a composer of chamber operas.")])
  # name -> (trajectory, outcome, rubric reward, connected rubric indices)
  return {
      "good": (ew.good_trajectory(), 1.0, 1.0, {0, 1, 2, 3}),
      # the explanation names E0, the answer contradicts it: E0 is not identified
      "wrong answer": (ew.visit_all().answer(ew.good_answer().replace(
          "## Exact Answer\nOrla Venn", "## Exact Answer\nMira Holt")), 0.0, 0.0, set()),
      "alias answer": (ew.visit_all().answer(ew.good_answer().replace(
          "## Exact Answer\nOrla Venn", "## Exact Answer\nO. Venn")), 1.0, 1.0, {0, 1, 2, 3}),
      "no citations": (ew.visit_all().answer(_answer(
          f"{n['E0']} studied at the {n['E1']} in {n['E2']}.")), 1.0, 0.0, set()),
      "only the E0 page cited": (ew.visit_all().answer(_answer(partial)), 1.0, 0.5, {0, 3}),
      "E3 never named": (ew.visit_all().answer(no_prize), 1.0, 0.75, {0, 1, 2}),
      "cited page only seen as a snippet": (snippet_only.answer(_answer(partial)), 1.0, 0.0,
                                            set()),
  }


VARIANTS = _variants()


@pytest.mark.parametrize("name", list(VARIANTS))
def test_gold_backend_rewards(name):
  trajectory, outcome, rubric, connected = VARIANTS[name]
  breakdown = Judge(GOLD).score_sync(trajectory, ew.example_task())
  assert (breakdown.outcome_reward, breakdown.rubric_reward) == (outcome, rubric)
  assert {r.index for r in breakdown.rubrics if r.connected} == connected
  assert breakdown.outcome_reason and breakdown.rubric_reason and not breakdown.errors
  assert breakdown.backend == "gold (synthetic world only)"


def test_llm_backend_agrees_with_gold_on_every_variant():
  task = ew.example_task()
  with ScriptedServer(oracle(task)) as server:
    judge = Judge(JudgeConfig(base_url=server.base_url, model="oracle", api_key_env=""))

    async def run():
      return await judge.score_batch([(v[0], task) for v in VARIANTS.values()])

    llm = asyncio.run(run())
  gold = [Judge(GOLD).score_sync(v[0], task) for v in VARIANTS.values()]
  for name, got, want in zip(VARIANTS, llm, gold):
    assert (got.outcome_reward, got.rubric_reward) == (want.outcome_reward,
                                                       want.rubric_reward), name
    assert [(r.identified, r.supported, r.connected) for r in got.rubrics] == [
        (r.identified, r.supported, r.connected) for r in want.rubrics], name
    assert got.errors == [], name


def test_breakdown_records_citations_calls_and_tokens():
  task = ew.example_task()
  with ScriptedServer(oracle(task)) as server:
    judge = Judge(JudgeConfig(base_url=server.base_url, model="oracle", api_key_env=""))
    first = judge.score_sync(ew.good_trajectory(), task)
    second = judge.score_sync(ew.good_trajectory(), task)
    assert len(server.requests) == 3
  assert first.cited_urls == [ew.URLS["E0"], ew.URLS["E1"], ew.URLS["E2"]]
  assert first.cited_visited == 3 and first.cited_opened == 3
  assert (first.judge_calls, first.prompt_tokens, first.completion_tokens) == (3, 300, 60)
  assert first.entities == {e: ew.NAMES[e] for e in ew.NAMES}
  assert first.rubrics[1].filled == "Brightwater Conservatory is located in Tessaly."
  assert (second.judge_calls, second.cache_hits) == (0, 3)
  cost = {"judge_calls": 3, "cache_hits": 0, "prompt_tokens": 300, "completion_tokens": 60}
  assert second.to_dict() | cost == first.to_dict()  # same judgment, no cost
  metrics = judge.metrics()
  assert metrics["calls"] == 3 and metrics["cache_hits"] == 3 and metrics["cache_hit_rate"] == 0.5


def test_outcome_and_identification_run_concurrently_and_batches_overlap():
  task = ew.example_task()
  with ScriptedServer(oracle(task), delay=0.3) as server:
    judge = Judge(JudgeConfig(base_url=server.base_url, model="oracle", api_key_env="",
                              use_cache=False))
    judge.score_sync(ew.good_trajectory(), task)
    assert server.max_in_flight == 2  # outcome + identification together
    items = [(ew.good_trajectory(extra=f"#{i}"), task) for i in range(8)]
    results = asyncio.run(judge.score_batch(items))
    assert server.max_in_flight >= 8  # the trajectories of a batch are judged together
    peaks = judge.in_flight_peaks()  # what the trainer logs per step
    assert peaks["judge/trajectories_in_flight_peak"] == 8
    assert 8 <= peaks["judge/calls_in_flight_peak"] <= server.max_in_flight
    assert judge.in_flight_peaks() == {"judge/trajectories_in_flight_peak": 0,
                                       "judge/calls_in_flight_peak": 0}  # none since
  assert all(r.rubric_reward == 1.0 and r.outcome_reward == 1.0 for r in results)


def _with(trajectory=None, **task_changes):
  task = ew.example_task()
  task["metadata"]["remote_env_info"].update(task_changes)
  return trajectory or ew.good_trajectory(), task


def _bad_final(content):
  trajectory = ew.good_trajectory()
  trajectory["history"][-1]["content"] = content
  return trajectory


BAD_INPUTS = {
    "empty answer": (_with(_bad_final("   ")), "final answer is empty"),
    "answer is not text": (_with(_bad_final({"x": 1})), "final answer is not text"),
    "no final answer": (_with(ew.visit_all().answer("x") | {"history": ew.visit_all().history}),
                        "last message is not an assistant answer"),
    "unfinished": (_with(ew.visit_all().answer(ew.good_answer(), status="truncated")),
                   "task unfinished (status='truncated')"),
    "only references": (_with(_bad_final("## References\n[[1](https://x.example)]")),
                        "nothing before the References heading"),
    "history not a list": (_with({"status": "completed", "history": "oops"}),
                           "bad input: history: must be a list"),
    "trajectory not a dict": (_with(["nope"]), "bad input: history"),
    "label missing": ((ew.good_trajectory(), {k: v for k, v in ew.example_task().items()
                                               if k != "label"}), "bad input: label"),
    "task not a dict": ((ew.good_trajectory(), "task"), "bad input"),
}


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_inputs_score_zero_with_a_reason(name):
  (trajectory, task), reason = BAD_INPUTS[name]
  breakdown = Judge(GOLD).score_sync(trajectory, task)
  assert (breakdown.outcome_reward, breakdown.rubric_reward) == (0.0, 0.0)
  assert reason in breakdown.outcome_reason and reason in breakdown.rubric_reason


def test_rubric_set_problems_score_with_reasons():
  no_e0 = Judge(GOLD).score_sync(*_with(rubrics=["<E1> is located in <E2>."]))
  assert no_e0.rubric_reward == 0.0 and "no rubric mentions <E0>" in no_e0.rubric_reason
  none = Judge(GOLD).score_sync(*_with(rubrics=[]))
  assert none.rubric_reason == "no rubrics for this question" and none.outcome_reward == 1.0
  trajectory, task = _with()
  task["metadata"]["remote_env_info"]["rubrics"].append("Water is wet.")
  task["metadata"]["gold"]["rubrics"].append({"text": "Water is wet.", "evidence": "wet"})
  extra = Judge(GOLD).score_sync(trajectory, task)
  assert extra.rubric_reward == 0.8  # 4 of 5: the placeholder-free rubric never counts
  assert "rubric 4 has no placeholder and can never count" in extra.warnings


def test_undecodable_and_huge_text_is_bounded_not_fatal():
  bad_utf8 = ew.good_answer().encode() + b"\xff\xfe\xfa tail"
  breakdown = Judge(GOLD).score_sync(_bad_final(bad_utf8), ew.example_task())
  assert breakdown.rubric_reward == 1.0
  surrogates = ew.good_answer() + "\udcff\udcfe"
  assert Judge(GOLD).score_sync(_bad_final(surrogates), ew.example_task()).outcome_reward == 1.0
  huge = ew.good_answer() + "padding " * 200_000
  judge = Judge(GOLD.replace(max_response_chars=10_000))
  breakdown = judge.score_sync(_bad_final(huge), ew.example_task())
  assert breakdown.rubric_reward == 1.0 and "final answer cut to 10000 chars" in breakdown.warnings


def test_gold_backend_refuses_records_without_gold():
  trajectory, task = _with()
  del task["metadata"]["gold"]
  breakdown = Judge(GOLD).score_sync(trajectory, task)
  assert (breakdown.outcome_reward, breakdown.rubric_reward) == (0.0, 0.0)
  assert "only scores synthetic-world records" in breakdown.rubric_reason
  assert len(breakdown.errors) == 2


def _llm_judge(server, **kw):
  return Judge(JudgeConfig(base_url=server.base_url, model="m", api_key_env="",
                           backoff_base=0.001, backoff_max=0.01, **kw))


def test_unusable_judge_output_gives_zero_with_reason():
  with ScriptedServer(lambda body: 'Sure! {"E0": "null"} ```json\n{"E0": }```') as server:
    breakdown = _llm_judge(server, max_reasks=2).score_sync(*_with())
    assert len(server.requests) == 6  # outcome and identification, 1 + 2 re-asks each
  assert (breakdown.outcome_reward, breakdown.rubric_reward) == (0.0, 0.0)
  assert "unusable after 3 attempts" in breakdown.outcome_reason
  assert "unusable after 3 attempts: the JSON block is not valid JSON" in breakdown.rubric_reason
  assert breakdown.judge_calls == 6 and breakdown.reasks == 4 and len(breakdown.errors) == 2


def test_failing_transport_gives_zero_with_reason_and_counts():
  with ScriptedServer(lambda body: Reply(status=503, content=None)) as server:
    judge = _llm_judge(server, retries=2)
    breakdown = judge.score_sync(*_with())
  assert "judge call failed after 3 attempts: HTTP 503" in breakdown.rubric_reason
  assert judge.metrics()["call_errors"] == 2 and judge.metrics()["step_errors"] == 2


def test_support_failure_keeps_the_outcome():
  task = ew.example_task()
  answer = oracle(task)

  def script(body):
    return "nonsense" if "[judge step: support]" in body["messages"][0]["content"] else answer(
        body)

  with ScriptedServer(script) as server:
    breakdown = _llm_judge(server, max_reasks=1).score_sync(ew.good_trajectory(), task)
  assert breakdown.outcome_reward == 1.0 and breakdown.rubric_reward == 0.0
  assert breakdown.rubric_reason.startswith("judge output unusable after 2 attempts")
  assert all(r.identified and not r.supported for r in breakdown.rubrics)


def test_inputs_are_not_mutated():
  trajectory, task = _with()
  before = copy.deepcopy((trajectory, task))
  Judge(GOLD).score_sync(trajectory, task)
  assert (trajectory, task) == before
