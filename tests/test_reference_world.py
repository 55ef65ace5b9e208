"""Reference questions (carr_jax/world/lookup.py, style "reference"): the world in which only
cited evidence buys accuracy.

Checked against the graph's relations, the glossary pages and the real tools, not the
generator's flags: the evidence-only questions are exactly those whose shortcut answer (the
stated relation's usual kind) is wrong; each question's own glossary page states its right
answer and ranks first for "glossary <link>"; exceptions read like every other question; the
gold judge pays a cited right answer outcome 1 and rubric 1, the shortcut outcome 0 on the
evidence-only split, and a reply whose exact answer contradicts the page it cites no rubric
credit.

  python -m pytest tests/test_reference_world.py -q
"""
from __future__ import annotations

import asyncio
import collections
import importlib.util
import pathlib
import re

import pytest

from carr_jax.evaluation import heldout
from carr_jax.world import build_world, lookup, named
from carr_jax.world import ontology as on
from judge import Judge, JudgeConfig
from rollout import chat
from tests.test_lookup_world import judged_expert_episodes
from tests.test_tokenizer import qwen3_tokenizer

_TEXT = re.compile(r", an? [a-z ]+, (?P<verb>[a-z ]+) something \(link (?P<code>\d+)\)\. Is that "
                   r"a city or an organization\? Answer with one word\.$")


@pytest.fixture(scope="module")
def world():
  return build_world(5, 300, 128, style="reference", min_hops=1, max_hops=1, prompt="brief",
                     eval_fraction=0.25, distractors=0, shortcut_fraction=0.8,
                     eval_shortcut_fraction=0.5)


def _gold(record):
  return record["metadata"]["gold"]


def _usual_kind(verb: str) -> str:
  """The kind the graph's relation of that wording points to."""
  return next(r.object for r in on.RELATIONS.values()
              if r.forward.format(x="").strip() == verb)


def test_evidence_only_questions_are_exactly_the_wrong_shortcuts(world):
  codes = collections.Counter()
  for q, record in zip(world.questions, world.train + world.eval):
    gold, text = _gold(record), record["input_messages"][0]["content"]
    match = _TEXT.search(text)
    assert match, text  # an exception reads like any other question
    codes[match["code"]] += 1
    usual = _usual_kind(match["verb"])
    assert gold["shortcut_answer"] == usual
    assert record["label"] in named.KINDS
    assert gold["shortcut"] == (usual == record["label"])  # evidence-only iff the shortcut fails
    assert world.graph.nodes[q.walk[0]]["type"] == record["label"]
    page = world.pages[f"glossary:{gold['term']}"]
    assert gold["term"] == f"link {match['code']}"
    assert page.content.endswith(f"is of the kind {record['label']}.")  # the page holds it
  assert set(codes.values()) == {1}  # every link asked once: no held-out link seen in training
  train_share = sum(_gold(r)["shortcut"] for r in world.train) / len(world.train)
  assert 0.7 <= train_share < 1.0, train_share  # tempting, and sometimes wrong
  assert sum(_gold(r)["shortcut"] for r in world.eval) == len(world.eval) // 2
  for split in (world.train, world.eval):
    kinds = collections.Counter((_gold(r)["shortcut"], r["label"]) for r in split)
    assert kinds[(True, "city")] == kinds[(True, "organization")] > 0
    assert kinds[(False, "city")] == kinds[(False, "organization")] > 0


def test_the_question_own_link_finds_its_page_first(world):
  backend = world.corpus_backend()

  async def first_hits():
    return [(await backend.search(f"glossary {_gold(r)['term']}", 1))[0] for r in world.eval]
  for record, hit in zip(world.eval, asyncio.run(first_hits())):
    assert hit.url == lookup.glossary_url(_gold(record)["term"])
    assert hit.snippet.endswith(f"of the kind {record['label']}.")


def test_gold_judge_pays_the_page_not_the_shortcut(world):
  """Expert episodes on the held-out split: the cited sample is right and fully credited, the
  tool-free sample answers the relation's usual kind, right exactly off the evidence-only
  split. A reply citing the received page but answering the shortcut earns nothing."""
  records = world.eval
  trajs, scores = judged_expert_episodes(world, records)
  contradicted = []
  for t, r in zip(trajs[::2] + trajs[1::2], records + records):
    if t["num_tool_calls"].get("search") and not _gold(r)["shortcut"]:
      history = [dict(m) for m in t["history"]]
      history[-1]["content"] = history[-1]["content"].replace(
          f"## Exact Answer\n{r['label']}", f"## Exact Answer\n{_gold(r)['shortcut_answer']}")
      contradicted.append(({**t, "history": history}, r))
  contra_scores = asyncio.run(
      Judge(JudgeConfig(backend="gold", use_cache=False)).score_batch(contradicted))
  for i, record in enumerate(records):
    for k in range(2):
      b, searched = scores[2 * i + k], trajs[2 * i + k]["num_tool_calls"].get("search", 0)
      if searched:
        assert (b.outcome_reward, b.rubric_reward) == (1.0, 1.0), b.rubric_reason
      else:
        assert b.extracted_answer == _gold(record)["shortcut_answer"]
        assert b.outcome_reward == float(_gold(record)["shortcut"])
        assert b.rubric_reward == 0.0
  assert len(contradicted) == len(records) // 2  # one searched sample per evidence-only question
  for (t, r), b in zip(contradicted, contra_scores):
    assert b.extracted_answer == _gold(r)["shortcut_answer"] != r["label"]
    assert (b.outcome_reward, b.rubric_reward) == (0.0, 0.0)
    assert b.entities.get("E0") is None  # identified from the exact answer only
  m = heldout.evidence_subset_metrics(records, scores)
  assert m["eval/evidence_only_questions"] == len(records) // 2
  assert m["eval/evidence_only_accuracy"] == 0.5  # the searched sample of each
  assert m["eval/evidence_only_shortcut_answer"] == 0.5  # the tool-free one


def test_reference_world_refuses_odd_splits():
  with pytest.raises(ValueError, match="pairs"):
    build_world(5, 300, 130, style="reference", min_hops=1, max_hops=1, eval_fraction=0.3,
                distractors=0)  # 39 held out


def load_kind_probe():
  """scripts/lab/kind_probe.py as a module."""
  spec = importlib.util.spec_from_file_location(
      "kind_probe", pathlib.Path(__file__).parent.parent / "scripts" / "lab" / "kind_probe.py")
  probe = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(probe)
  return probe


def test_the_copy_probe_asks_for_the_link_digits_in_order(world):
  """scripts/lab/kind_probe.py's query-copy rows: the searched expert episode cut before each
  digit of the link in its query, that digit the target."""
  probe = load_kind_probe()
  fmt = chat.ChatFormat(qwen3_tokenizer())
  records = world.eval[:6]
  searched = probe.expert_episodes(fmt, records, world.corpus_backend(), True)
  tokens, lengths, targets = probe.query_copy_inputs(fmt, searched)
  assert len(tokens) == len(lengths) == len(targets) == 3 * len(records)
  for i, record in enumerate(records):
    digits = _gold(record)["term"].split()[1]  # "link 517" -> "517"
    assert fmt.tokenizer.decode(targets[3 * i:3 * i + 3]) == digits
    for k in range(3):
      prefix = fmt.tokenizer.decode(tokens[3 * i + k][:lengths[3 * i + k]])
      assert prefix.endswith('"query": "glossary link ' + digits[:k])
