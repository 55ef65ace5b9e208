"""The judge/ vs release decisions of docs/judge-vs-release.md, end to end (issue 13, item 7).

Run: python -m pytest tests/judge/test_release_compat.py -q
"""
import json

import pytest

from judge import Judge, JudgeConfig
from judge import example_world as ew
from judge.records import cut_references
from judge.testing import Reply, ScriptedServer, prompt_kind
from tests.judge.oracle import oracle, oracle_value

GOLD = JudgeConfig(backend="gold")


@pytest.mark.parametrize("bad_name", ["", "N/A", "null", "x" * 400])
def test_placeholder_entity_name_only_unidentifies_its_rubrics(bad_name):
  task = ew.example_task()

  def script(body):
    value = oracle_value(task, body)
    if prompt_kind(body) == "identify":
      value["E3"] = bad_name  # E3 appears only in rubric R3
    return Reply(f"```json\n{json.dumps(value)}\n```")

  with ScriptedServer(script) as server:
    judge = Judge(JudgeConfig(base_url=server.base_url, model="m", api_key_env=""))
    breakdown = judge.score_sync(ew.good_trajectory(), task)
  assert breakdown.entities["E3"] is None and breakdown.reasks == 0
  assert [r.identified for r in breakdown.rubrics] == [True, True, True, False]
  assert breakdown.rubric_reward == 0.75 and not breakdown.errors


def test_received_url_with_brackets_counts():
  bracketed = ew.URLS["E0"] + "[1]"
  title, text = ew.PAGES[ew.URLS["E0"]]
  builder = ew.TrajectoryBuilder().open(bracketed, title=title, content=text)
  builder.open(ew.URLS["E1"]).open(ew.URLS["E2"])
  answer = ew.good_answer().replace(ew.URLS["E0"], bracketed)
  breakdown = Judge(GOLD).score_sync(builder.answer(answer), ew.example_task())
  assert bracketed in breakdown.cited_urls and breakdown.rubric_reward == 1.0
  with ScriptedServer(oracle(ew.example_task())) as server:
    llm = Judge(JudgeConfig(base_url=server.base_url, model="m", api_key_env=""))
    assert llm.score_sync(builder.answer(answer), ew.example_task()).rubric_reward == 1.0


def test_whitespace_inside_citation_parentheses_is_not_a_citation():
  spaced = ew.good_answer()
  for url in ew.URLS.values():
    spaced = spaced.replace(f"]({url})]", f"]( {url} )]")
  breakdown = Judge(GOLD).score_sync(ew.visit_all().answer(spaced), ew.example_task())
  assert breakdown.cited_urls == [] and breakdown.rubric_reward == 0.0
  assert "cites no URL in the accepted form" in breakdown.rubric_reason


def test_references_cut_is_at_the_last_references_heading_of_any_level_and_case():
  text = "Claim [[1](https://a.example/)].\n\n### references\n[1] https://a.example/"
  assert cut_references(text) == "Claim [[1](https://a.example/)]."
  inline = "Claim. See the ## References below for more.\n## References\n[1] x"
  assert cut_references(inline) == "Claim. See the ## References below for more."
