"""Named-head questions (lab/world/named.py), the brief expert answer, held-out scoring.

Checked independently of the generator: each hop's relation has exactly one object in the
graph (so the answer is unique), the shortcut flag says whether the answer is named on an
earlier hop's page, the scripted expert solves the questions with full rewards from the gold
judge, and the old worlds are unchanged by the new options.

  python -m pytest tests/lab/test_named_world.py -q
"""
from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest

from carr_jax.evaluation import heldout
from carr_jax.evaluation.evidence_plot import evidence_graph
from judge import Judge, JudgeConfig
from judge.breakdown import Breakdown
from lab import metrics as lab_metrics
from lab.world import build_world
from lab.world.expert import ExpertConfig, expert_trajectories
from rollout import chat
from tests.carr_jax.test_tokenizer import qwen3_tokenizer


@pytest.fixture(scope="module")
def world():
  return build_world(3, 120, 40, style="named", min_hops=1, max_hops=2, locality=0.8,
                     shortcut_fraction=0.5, distractors=0)


def _objects(g, node, relation):
  return [b for _, b, rel in g.out_edges(node, keys=True) if rel == relation]


def test_named_questions_have_unique_answers_and_name_their_head(world):
  g = world.graph
  assert {len(q.hops) for q in world.questions} == {1, 2}
  for q, record in zip(world.questions, world.train + world.eval):
    head = g.nodes[q.walk[-1]]
    assert head["name"] in q.text  # searchable as written
    for i, hop in enumerate(q.hops):  # E_{i+1} --relation--> E_i, its only such object
      assert not hop.forward and _objects(g, q.walk[i + 1], hop.relation) == [q.walk[i]]
    assert record["label"] == g.nodes[q.walk[0]]["name"]
    assert g.nodes[q.walk[0]]["name"] not in q.text


def test_shortcut_flag_means_the_answer_is_named_before_the_last_hop(world):
  g = world.graph
  multi = [q for q in world.questions if len(q.hops) == 2]
  assert any(q.shortcut for q in multi) and any(not q.shortcut for q in multi)
  for q in world.questions:
    head_page = world.pages[q.walk[-1]].content
    named_early = len(q.hops) == 2 and re.search(
        rf"\b{re.escape(g.nodes[q.walk[0]]['name'])}\b", head_page) is not None
    assert q.shortcut == named_early, q.text


def test_old_worlds_are_unchanged_by_the_new_options():
  a = build_world(7, 80, 6)
  b = build_world(7, 80, 6, style="deep", locality=0.0, distractors=6)
  assert a.train == b.train and a.eval == b.eval and a.corpus() == b.corpus()
  with pytest.raises(ValueError, match="style"):
    build_world(7, 80, 6, style="vague")
  with pytest.raises(ValueError, match="min_hops"):
    build_world(7, 80, 6, min_hops=1)  # one hop needs named questions


def test_brief_expert_answers_earn_full_rewards(world):
  fmt = chat.ChatFormat(qwen3_tokenizer())
  records = world.train[:12]
  trajs = asyncio.run(expert_trajectories(records, world.corpus_backend(), fmt,
                                          ExpertConfig(1, False, "brief")))
  judge = Judge(JudgeConfig(backend="gold", use_cache=False))
  scores = asyncio.run(judge.score_batch(list(zip(trajs, records))))
  for traj, b in zip(trajs, scores):
    assert traj["status"] == "completed"
    assert b.outcome_reward == 1.0 and b.rubric_reward == 1.0, (b.outcome_reason,
                                                                b.rubric_reason)
  evidence = asyncio.run(expert_trajectories(records, world.corpus_backend(), fmt,
                                             ExpertConfig(1, False, "evidence")))
  for brief, full in zip(trajs, evidence):  # the same tool calls, a shorter answer
    assert sum(brief["loss_mask"]) < sum(full["loss_mask"])


def _breakdown(outcome, rubric):
  return Breakdown(outcome_reward=outcome, rubric_reward=rubric)


def test_heldout_accuracy_change_and_summary(tmp_path):
  # 3 questions x 2 samples, question-major.
  start = heldout.per_question_accuracy([_breakdown(o, 0) for o in (1, 0, 0, 0, 1, 1)], 3)
  end = heldout.per_question_accuracy([_breakdown(o, 0) for o in (1, 1, 1, 0, 1, 1)], 3)
  assert start.tolist() == [0.5, 0.0, 1.0] and end.tolist() == [1.0, 0.5, 1.0]
  c = heldout.change(start, end)
  diff = np.array([0.5, 0.5, 0.0])
  assert c["difference"] == pytest.approx(diff.mean())
  assert c["standard_error"] == pytest.approx(diff.std(ddof=1) / np.sqrt(3))
  heldout.save(str(tmp_path), 0, start, 2, {})
  heldout.save(str(tmp_path), 10, end, 2, {})
  assert [r["step"] for r in heldout.load_all(str(tmp_path))] == [0, 10]
  assert heldout.summary_line(c["start"], c["end"], 3, 2) == (
      "heldout_accuracy start=0.5000 end=0.8333 n=3 samples=2")


def test_shortcut_rate_counts_correct_answers_without_evidence():
  records = [{"metadata": {"gold": {"shortcut": True}}},
             {"metadata": {"gold": {"shortcut": False}}}]
  scores = [_breakdown(1, 0.2), _breakdown(1, 1.0), _breakdown(1, 0.0), _breakdown(1, 0.0)]
  m = lab_metrics.shortcut_subset_metrics(records, scores, threshold=0.5)
  assert m["eval/shortcut_questions"] == 1.0
  assert m["eval/shortcut_admitting_rate"] == 0.5  # the second question's guesses not counted
  assert m["eval/shortcut_admitting_accuracy"] == 1.0


def test_evidence_graph_is_drawn_even_without_scored_rubrics():
  rubrics = ["<E1> studied at <E2>.", "<E2> is based in <E0>."]
  graph = evidence_graph(_breakdown(0, 0.0), rubrics)
  assert {"E0", "E1", "E2", "R0", "R1"} <= set(graph.nodes)
  assert all(graph.nodes[n]["state"] == "none" for n in ("R0", "R1"))


def test_short_names_are_one_token_with_and_without_a_leading_space():
  from lab.world.graph import SHORT_NAMES
  tok = qwen3_tokenizer()
  assert len(set(SHORT_NAMES)) == len(SHORT_NAMES) >= 150
  for name in SHORT_NAMES:
    assert len(tok.encode(name)) == 1 and len(tok.encode(" " + name)) == 1, name


def test_short_names_brief_prompt_world_is_solved_by_the_expert_with_a_shorter_prompt():
  from lab.world import ontology as on
  from lab.world.graph import SHORT_NAMES
  kwargs = dict(style="named", min_hops=1, max_hops=2, locality=0.8, shortcut_fraction=0.5,
                distractors=0)
  short = build_world(3, 100, 40, short_names=True, prompt="brief", **kwargs)
  full = build_world(3, 100, 40, **kwargs)
  names = {d["name"] for _, d in short.graph.nodes(data=True)
           if d["type"] in (on.PERSON, on.CITY, on.PROVINCE)}
  assert names and names <= set(SHORT_NAMES)
  assert [t["name"] for t in short.train[0]["tools"]] == ["browser.search", "browser.open"]
  fmt = chat.ChatFormat(qwen3_tokenizer())
  prompt_len = lambda r: len(fmt.prompt_ids(r["input_messages"], r["tools"]))  # noqa: E731
  assert prompt_len(short.train[0]) < 0.5 * prompt_len(full.train[0])  # 247 vs 528 tokens
  trajs = asyncio.run(expert_trajectories(short.train[:8], short.corpus_backend(), fmt,
                                          ExpertConfig(1, False, "brief")))
  judge = Judge(JudgeConfig(backend="gold", use_cache=False))
  scores = asyncio.run(judge.score_batch(list(zip(trajs, short.train[:8]))))
  assert all(b.outcome_reward == 1.0 and b.rubric_reward == 1.0 for b in scores)


def test_marked_names_are_bold_links_to_other_pages_and_keep_rewards():
  kwargs = dict(style="named", min_hops=1, max_hops=2, locality=0.8, shortcut_fraction=0.5,
                distractors=0, short_names=True, prompt="brief")
  marked = build_world(4, 100, 40, mark_names=True, **kwargs)
  plain = build_world(4, 100, 40, **kwargs)
  assert [q.walk for q in marked.questions] == [q.walk for q in plain.questions]
  for q, p in zip(marked.questions, plain.questions):
    head = marked.graph.nodes[q.walk[-1]]["name"]
    assert f"**{head}**" in q.text and q.text.replace("**", "") == p.text
  for node, page in marked.pages.items():
    other = plain.pages[node]
    assert (page.url, page.title) == (other.url, other.title)
    assert page.content.replace("**", "") == other.content
    assert f"**{page.title}**" not in page.content  # a page does not link itself
    assert all(fact in page.content for fact in page.facts.values())  # rubric evidence
  linked = re.findall(r"\*\*([^*]+)\*\*", " ".join(p.content for p in marked.pages.values()))
  names = {d["name"] for _, d in marked.graph.nodes(data=True)}
  assert linked and set(linked) <= names
  fmt = chat.ChatFormat(qwen3_tokenizer())
  trajs = asyncio.run(expert_trajectories(marked.train[:8], marked.corpus_backend(), fmt,
                                          ExpertConfig(1, False, "brief")))
  judge = Judge(JudgeConfig(backend="gold", use_cache=False))
  scores = asyncio.run(judge.score_batch(list(zip(trajs, marked.train[:8]))))
  assert all(b.outcome_reward == 1.0 and b.rubric_reward == 1.0 for b in scores)
