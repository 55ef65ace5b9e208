"""Lookup questions (lab/world/lookup.py), the "lookup" expert and the shortcut measure.

Checked against the graph and the real tools, not the generator: every answer is the type of
the questioned relation's object; coded questions are about people only, each with its own
link number (so no held-out number was seen in training); searching "glossary <term>" with the
real BM25 backend ranks the question's glossary page first; the gold judge gives a cited
expert reply outcome 1 and rubric reward 1 and a shortcut reply outcome 1 and rubric reward 0,
so the held-out shortcut rate of the expert's two samples per plain question is 1/2.

  python -m pytest tests/lab/test_lookup_world.py -q
"""
from __future__ import annotations

import asyncio
import collections
import re

import pytest

from judge import Judge, JudgeConfig
from lab import metrics as lab_metrics
from lab.world import build_world, lookup, named
from lab.world import ontology as on
from lab.world.expert import ExpertConfig, ExpertError, expert_trajectories
from rollout import chat
from tests.carr_jax.test_tokenizer import qwen3_tokenizer


@pytest.fixture(scope="module")
def world():
  return build_world(3, 200, 80, style="lookup", prompt="brief",
                     eval_fraction=0.25, distractors=0, shortcut_fraction=0.75)


def _gold(record):
  return record["metadata"]["gold"]


def test_answers_terms_and_shortcut_flags(world):
  g = world.graph
  records = world.train + world.eval
  codes = collections.Counter()
  for q, record in zip(world.questions, records):
    gold = _gold(record)
    assert record["label"] == g.nodes[q.walk[0]]["type"] in named.KINDS
    assert gold["shortcut"] == q.shortcut
    code = re.search(r" has link (\d+) to something\.", q.text)
    assert (code is None) == q.shortcut, q.text
    if code:  # no shortcut: about a person, whose noun does not decide the kind
      codes[code.group(1)] += 1
      assert g.nodes[q.walk[1]]["type"] == on.PERSON
      assert gold["term"] == f"link {code.group(1)}"
    else:
      assert f" {gold['term']} something." in q.text
      assert on.RELATIONS[q.hops[0].relation].forward.format(x="").strip() == gold["term"]
  assert set(codes.values()) == {1}  # each link number asked once
  for split in (world.train, world.eval):
    flags = collections.Counter((_gold(r)["shortcut"], r["label"]) for r in split)
    assert flags[(True, "city")] == flags[(True, "organization")] > 0
    assert flags[(False, "city")] == flags[(False, "organization")] > 0
  share = sum(_gold(r)["shortcut"] for r in records) / len(records)
  assert 0.7 <= share <= 0.8, share


def test_glossary_page_ranks_first_and_its_body_holds_the_evidence(world):
  """The search finds the page; its listing shows the line naming the term, not the
  evidence, which only the page's body holds (ahead of two notes and that line)."""
  backend = world.corpus_backend()

  async def first_hits():
    return [(await backend.search(f"glossary {_gold(r)['term']}", 1))[0]
            for r in world.train + world.eval]
  for record, hit in zip(world.train + world.eval, asyncio.run(first_hits())):
    gold = _gold(record)
    evidence = gold["rubrics"][0]["evidence"]
    assert hit.url == gold["entities"]["E0"]["url"] == lookup.glossary_url(gold["term"])
    assert evidence not in hit.snippet and "kind" not in hit.snippet
    assert hit.snippet == f"Record {lookup.record_number(gold['term'])} is filed in the " \
        f"glossary as {gold['term']}."
    body = world.pages[f"glossary:{gold['term']}"].content
    assert body.startswith(evidence) and evidence.endswith(f"of the kind {record['label']}.")
    assert len(re.findall(r"[.!?](?: |$)", body)) == 4  # evidence, two notes, the term's line


def test_record_numbers_are_distinct_and_never_a_term():
  terms = [f"link {n}" for n in range(100, 1000)] + lookup._RELATION_TERMS
  numbers = [lookup.record_number(t) for t in terms]
  assert len(set(numbers)) == len(terms) and min(numbers) >= 1000


def judged_expert_episodes(world, records, samples: int = 2, **expert):
  """The "lookup" expert's episodes (`samples` per record, record by record, its tool-free
  answer the known one; more ExpertConfig fields in `expert`) and their gold-judge
  Breakdowns, in the same order."""
  fmt = chat.ChatFormat(qwen3_tokenizer())
  cfg = ExpertConfig(search_results=1, answer="lookup", known_fraction=1.0, **expert)

  async def run():
    trajs = await expert_trajectories(records, world.corpus_backend(), fmt, cfg, samples)
    judge = Judge(JudgeConfig(backend="gold", use_cache=False))
    return trajs, await judge.score_batch(
        list(zip(trajs, [r for r in records for _ in range(samples)])))
  return asyncio.run(run())


def test_expert_cites_or_shortcuts_and_the_judge_tells_them_apart(world):
  records = world.eval
  trajs, scores = judged_expert_episodes(world, records)
  for i, record in enumerate(records):
    searched = [trajs[2 * i + k]["num_tool_calls"].get("search", 0) for k in range(2)]
    if _gold(record)["shortcut"]:
      assert sorted(searched) == [0, 1]
    else:
      assert searched == [1, 1]
    for k in range(2):
      b = scores[2 * i + k]
      assert b.outcome_reward == 1.0
      assert b.rubric_reward == (1.0 if searched[k] else 0.0), b.rubric_reason
  rate = lab_metrics.shortcut_subset_metrics(records, scores, 0.5)
  assert rate["eval/shortcut_admitting_rate"] == 0.5
  assert rate["eval/shortcut_questions"] == sum(_gold(r)["shortcut"] for r in records)


def test_expert_modes_refuse_the_wrong_world(world):
  fmt = chat.ChatFormat(qwen3_tokenizer())
  other = build_world(3, 200, 20, style="kinds", prompt="answer",
                      distractors=0)
  for records, answer in ((world.eval[:1], "evidence"), (other.eval[:1], "lookup")):
    with pytest.raises(ExpertError, match="lookup questions"):
      asyncio.run(expert_trajectories(records, world.corpus_backend(), fmt,
                                      ExpertConfig(answer=answer)))
