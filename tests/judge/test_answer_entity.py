"""The judge credits no rubric that the reply's own answer contradicts.

The answer entity E0 is what the reply answers: the gold backend reads it off the
`## Exact Answer` section, and the pipeline drops any backend's E0 name that disagrees with
that section (`judge.pipeline.answer_agrees`). Checked with the gold backend and with the LLM
backend over real HTTP against scripted judges: one that follows the identification prompt's
rule (E0 from the Exact Answer, tests/judge/oracle.py) and one that ignores it and names E0
wherever the reply does, which the pipeline overrules. `answer_in_cited` records whether the
exact answer is what the cited, received pages state.

  python -m pytest tests/judge/test_answer_entity.py -q
"""
import json

import pytest

from judge import Judge, JudgeConfig
from judge import example_world as ew
from judge.pipeline import answer_agrees
from judge.testing import Reply, ScriptedServer, prompt_keys, prompt_kind
from tests.judge.oracle import oracle

GOLD = JudgeConfig(backend="gold")
GUARD = "the name identified for <E0> is not the Exact Answer's"


def _contradicted():
  """Every page visited and cited, the explanation names E0, the answer names another."""
  return ew.visit_all().answer(ew.good_answer().replace("## Exact Answer\nOrla Venn",
                                                        "## Exact Answer\nMira Holt"))


def _no_answer_section():
  return ew.visit_all().answer(ew.good_answer().replace("## Exact Answer\nOrla Venn\n", ""))


def _llm_judge(server):
  return Judge(JudgeConfig(base_url=server.base_url, model="oracle", api_key_env=""))


@pytest.mark.parametrize("make", [_contradicted, _no_answer_section])
def test_gold_names_no_answer_entity_the_answer_does_not_give(make):
  b = Judge(GOLD).score_sync(make(), ew.example_task())
  assert b.entities["E0"] is None and b.entities["E1"] == ew.NAMES["E1"]
  assert b.rubric_reward == 0.0 and not any(r.connected for r in b.rubrics)
  assert b.outcome_reward == 0.0
  # the gold backend itself names no E0: the pipeline's check had nothing to overrule
  assert not any(GUARD in w for w in b.warnings), b.warnings


def test_gold_still_credits_the_full_answer_and_its_alias():
  good = Judge(GOLD).score_sync(ew.good_trajectory(), ew.example_task())
  alias = Judge(GOLD).score_sync(ew.visit_all().answer(ew.good_answer().replace(
      "## Exact Answer\nOrla Venn", "## Exact Answer\nO. Venn")), ew.example_task())
  for b in (good, alias):
    assert (b.outcome_reward, b.rubric_reward) == (1.0, 1.0)
    assert b.answer_in_cited is (b is good)  # the alias "O. Venn" is on no cited page
  assert good.entities["E0"] == ew.NAMES["E0"]


def _fooled(task):
  """A scripted judge that ignores the prompt's rule and names E0 wherever the reply does."""
  honest = oracle(task)

  def script(body):
    if prompt_kind(body) == "identify":
      return Reply("```json\n" + json.dumps({k: ew.NAMES[k] for k in prompt_keys(body)})
                   + "\n```")
    return honest(body)
  return script


def test_llm_identification_takes_the_answer_entity_from_the_exact_answer():
  task = ew.example_task()
  with ScriptedServer(oracle(task)) as server:
    contradicted = _llm_judge(server).score_sync(_contradicted(), task)
    good = _llm_judge(server).score_sync(ew.good_trajectory(), task)
    prompt = next(r for r in server.requests if prompt_kind(r) == "identify")
  assert "<E0> is the answer: take its name from the response's Exact Answer section" in (
      prompt["messages"][0]["content"])
  assert contradicted.entities["E0"] is None and contradicted.rubric_reward == 0.0
  assert (good.rubric_reward, good.entities["E0"]) == (1.0, ew.NAMES["E0"])


def test_a_judge_that_names_e0_from_the_explanation_is_overruled():
  task = ew.example_task()
  with ScriptedServer(_fooled(task)) as server:
    contradicted = _llm_judge(server).score_sync(_contradicted(), task)
    good = _llm_judge(server).score_sync(ew.good_trajectory(), task)
  assert any(GUARD in w for w in contradicted.warnings), contradicted.warnings
  assert contradicted.entities["E0"] is None and contradicted.rubric_reward == 0.0
  assert contradicted.entities["E1"] == ew.NAMES["E1"]  # the other entities stand
  assert good.rubric_reward == 1.0 and not any(GUARD in w for w in good.warnings)


def test_answer_in_cited_tells_whether_the_answer_is_on_the_cited_pages():
  task = ew.example_task()
  assert Judge(GOLD).score_sync(ew.good_trajectory(), task).answer_in_cited is True
  assert Judge(GOLD).score_sync(_contradicted(), task).answer_in_cited is False
  uncited = ew.visit_all().answer("## Explanation with Citations\nNo sources.\n\n"
                                  "## Exact Answer\nOrla Venn\n")
  assert Judge(GOLD).score_sync(uncited, task).answer_in_cited is None


def test_answer_in_cited_is_none_without_an_answer_or_a_received_cited_page():
  task = ew.example_task()
  no_answer = Judge(GOLD).score_sync(_no_answer_section(), task)
  assert no_answer.cited_visited == 3 and no_answer.answer_in_cited is None
  unseen = ew.visit_all().answer("## Explanation with Citations\nOrla Venn "
                                 "[[1](https://never.example/)].\n\n## Exact Answer\nOrla Venn\n")
  b = Judge(GOLD).score_sync(unseen, task)
  assert (b.cited_urls, b.cited_visited) == (["https://never.example/"], 0)
  assert b.answer_in_cited is None


def test_answer_in_cited_is_in_the_breakdown_not_in_the_release_response():
  b = Judge(GOLD).score_sync(ew.good_trajectory(), ew.example_task())
  assert b.to_dict()["answer_in_cited"] is True
  assert set(b.release_response(0.3)) == {"reward", "outcome_reward", "rubric_reward",
                                          "rubric_scores"}


@pytest.mark.parametrize("name, answer, agrees", [
    ("Orla Venn", "Orla Venn", True), ("Orla Venn", "orla venn.", True),
    ("Venn", "Orla Venn", True), ("Orla Venn", "Mira Holt", False),
    ("Orla Venn", None, False), ("", "Orla Venn", False), ("city", "a city or not", True)])
def test_answer_agrees(name, answer, agrees):
  assert answer_agrees(name, answer) is agrees
