"""Kind questions (lab/world/named.py), the tool-free "answer" prompt, the guessing expert.

Checked against the graph, not the generator: each answer is the type of the questioned
relation's object, both answers come in equal numbers in each split, a reply naming the type
scores outcome 1 with the gold judge and the other type 0, and K guessing samples of a
question give each of its K options once.

  python -m pytest tests/lab/test_kinds_world.py -q
"""
from __future__ import annotations

import asyncio
import collections
import re

import pytest

from judge import Judge, JudgeConfig
from lab.world import build_world, named
from lab.world import ontology as on
from lab.world.expert import ExpertConfig, expert_trajectories
from rollout import chat
from rollout.agent import RolloutConfig, initial_messages
from tests.carr_jax.test_tokenizer import qwen3_tokenizer


@pytest.fixture(scope="module")
def world():
  return build_world(5, 160, 64, style="kinds", prompt="answer",
                     eval_fraction=0.25, distractors=0)


def test_answers_are_the_object_types_in_equal_numbers(world):
  g = world.graph
  names = {d["name"]: n for n, d in g.nodes(data=True)}
  verbs = {r.forward.format(x="something"): r.name for r in on.RELATIONS.values()}
  for records in (world.train, world.eval):
    labels = collections.Counter(r["label"] for r in records)
    assert set(labels) == set(named.KINDS) and len(set(labels.values())) == 1, labels
  for q, record in zip(world.questions, world.train + world.eval):
    obj, subject = q.walk
    text = record["input_messages"][-1]["content"]
    assert text.startswith("Reply with ## Exact Answer") and text.endswith(q.text)
    match = re.match(r"(.+?), an? [a-z ]+, (.+)\. Is that a city or an organization\?", q.text)
    assert match and names[match.group(1)] == subject, q.text
    assert g.has_edge(subject, obj, key=verbs[match.group(2)])  # the relation the text states
    assert record["label"] == g.nodes[obj]["type"]
    assert record["tools"] == [] and record["metadata"]["gold"]["options"] == list(named.KINDS)
  assert len({q.text for q in world.questions}) == len(world.questions)


def test_too_small_a_graph_is_a_clear_error():
  with pytest.raises(ValueError, match="kind questions .* raise num_entities"):
    build_world(5, 40, 200, style="kinds")


def test_guessing_expert_gives_each_option_once_and_the_judge_scores_the_type(world):
  fmt = chat.ChatFormat(qwen3_tokenizer())
  records = world.train[:6]
  trajs = asyncio.run(expert_trajectories(records, world.corpus_backend(), fmt,
                                          ExpertConfig(answer="guess"), samples=2))
  assert len(trajs) == 12
  prompt = fmt.prompt_ids(initial_messages(records[0], RolloutConfig()), [])
  assert "<tools>" not in fmt.decode(prompt)  # no tool schemas for a tool-free record
  assert trajs[0]["token_ids"][:len(prompt)] == prompt
  judge = Judge(JudgeConfig(backend="gold", use_cache=False))
  pairs = [(t, r) for r in records for t in trajs if t["prompt_id"] == r["id"]]
  scores = asyncio.run(judge.score_batch(pairs))
  for k, record in enumerate(records):
    answers = [trajs[2 * k + s]["history"][-1]["content"] for s in range(2)]
    assert sorted(a.split("\n")[-1] for a in answers) == sorted(named.KINDS)
    assert [(sum(t["num_tool_calls"].values()), t["status"])
            for t in trajs[2 * k:2 * k + 2]] == [(0, "completed")] * 2
    outcomes = [scores[2 * k + s].outcome_reward for s in range(2)]
    right = [a.endswith("\n" + record["label"]) for a in answers]
    assert outcomes == [float(r) for r in right] and sum(outcomes) == 1.0


def test_noisy_expert_answers_known_questions_right_in_every_sample(world):
  fmt = chat.ChatFormat(qwen3_tokenizer())
  records = world.train
  answers = collections.defaultdict(list)  # record id -> its samples' exact answers
  trajs = asyncio.run(expert_trajectories(records, world.corpus_backend(), fmt,
                                          ExpertConfig(answer="guess", known_fraction=0.5),
                                          samples=2))
  for t in trajs:
    answers[t["prompt_id"]].append(t["history"][-1]["content"].split("\n")[-1])
  known = [r for r in records if answers[r["id"]] == [r["label"]] * 2]
  for r in records:
    assert answers[r["id"]] in ([r["label"]] * 2, sorted(named.KINDS), sorted(named.KINDS)[::-1])
  assert 0.3 < len(known) / len(records) < 0.7, len(known)  # 48 records, each known w.p. 1/2
  clean = asyncio.run(expert_trajectories(records[:8], world.corpus_backend(), fmt,
                                          ExpertConfig(answer="guess", known_fraction=1.0)))
  assert [t["history"][-1]["content"] for t in clean] == [
      f"## Exact Answer\n{r['label']}" for r in records[:8]]


def test_noisy_expert_refuses_a_label_outside_the_options():
  from lab.world.expert import ExpertError, guess_answer
  gold = {"options": ["city", "organization"]}
  with pytest.raises(ExpertError, match="not one of its options"):
    guess_answer(gold, "q-1", 0, "person", known_fraction=1.0)
  assert guess_answer(gold, "q-1", 0, "city", known_fraction=1.0) == "## Exact Answer\ncity"
