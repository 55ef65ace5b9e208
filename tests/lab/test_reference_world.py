"""Reference questions (lab/world/lookup.py, style "reference"): the world in which only
cited evidence buys accuracy.

Checked against the graph's relations, the glossary pages and the real tools, not the
generator's flags: the evidence-only questions are exactly those whose shortcut answer (the
stated relation's usual kind) is wrong; each question's own glossary page states its right
answer and ranks first for "glossary <link>"; exceptions read like every other question; the
gold judge pays a cited right answer outcome 1 and rubric 1, the shortcut outcome 0 on the
evidence-only split, and a reply whose exact answer contradicts the page it cites no rubric
credit. With stale training pages (`stale_fraction`) only training shortcut questions' pages
change, each to the other kind, and a stale page earns no answer its rubric.

  python -m pytest tests/lab/test_reference_world.py -q
"""
from __future__ import annotations

import asyncio
import collections
import re

import pytest

from judge import Judge, JudgeConfig
from lab import metrics as lab_metrics
from lab.probes import kind_probe
from lab.world import build_world, lookup, named
from lab.world import ontology as on
from rollout import chat
from tests.carr_jax.test_tokenizer import qwen3_tokenizer
from tests.lab.test_lookup_world import judged_expert_episodes

_TEXT = re.compile(r", an? [a-z ]+, (?P<verb>[a-z ]+) something \(link (?P<code>\d+)\)\. Is that "
                   r"a city or an organization\? Answer with one word\.$")


@pytest.fixture(scope="module")
def world():
  return build_world(5, 300, 128, style="reference", prompt="brief",
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
    assert lookup.STATED_KIND.findall(page.content) == [record["label"]]  # its body holds it
  assert set(codes.values()) == {1}  # every link asked once: no held-out link seen in training
  train_share = sum(_gold(r)["shortcut"] for r in world.train) / len(world.train)
  assert 0.7 <= train_share < 1.0, train_share  # tempting, and sometimes wrong
  assert sum(_gold(r)["shortcut"] for r in world.eval) == len(world.eval) // 2
  for split in (world.train, world.eval):
    kinds = collections.Counter((_gold(r)["shortcut"], r["label"]) for r in split)
    assert kinds[(True, "city")] == kinds[(True, "organization")] > 0
    assert kinds[(False, "city")] == kinds[(False, "organization")] > 0


def test_the_question_own_link_finds_its_page_first(world):
  """The page ranks first; its listing names the link, never the kind: only opening it
  answers the question."""
  backend = world.corpus_backend()

  async def first_hits():
    return [(await backend.search(f"glossary {_gold(r)['term']}", 1))[0] for r in world.eval]
  for record, hit in zip(world.eval, asyncio.run(first_hits())):
    term = _gold(record)["term"]
    assert hit.url == lookup.glossary_url(term)
    assert hit.snippet.endswith(f"in the glossary as {term}.")
    assert "kind" not in hit.snippet


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
  m = lab_metrics.evidence_subset_metrics(records, scores)
  assert m["eval/evidence_only_questions"] == len(records) // 2
  assert m["eval/evidence_only_accuracy"] == 0.5  # the searched sample of each
  assert m["eval/evidence_only_shortcut_answer"] == 0.5  # the tool-free one


@pytest.fixture(scope="module")
def stale_world():
  return build_world(5, 300, 128, style="reference", prompt="brief",
                     eval_fraction=0.25, distractors=0, shortcut_fraction=0.8,
                     eval_shortcut_fraction=0.5, stale_fraction=0.25)


def _page_kind(world, record) -> str:
  content = world.pages[f"glossary:{_gold(record)['term']}"].content
  (kind,) = lookup.STATED_KIND.findall(content)
  return kind


def test_stale_pages_only_change_training_shortcut_pages(world, stale_world):
  """The same questions, labels and held-out pages; on a quarter of each relation's training
  shortcut questions (rounded down) the page states the other kind, so on training questions
  the page is right about as often as the shortcut."""
  assert [r["input_messages"] for r in world.train + world.eval] == \
      [r["input_messages"] for r in stale_world.train + stale_world.eval]
  assert [r["label"] for r in world.train] == [r["label"] for r in stale_world.train]
  for record in stale_world.eval:
    assert not _gold(record)["stale"] and _page_kind(stale_world, record) == record["label"]
  per_relation = collections.defaultdict(collections.Counter)
  for record in stale_world.train:
    gold = _gold(record)
    assert gold["stale"] == (_page_kind(stale_world, record) != record["label"])
    assert not gold["stale"] or gold["shortcut"]  # only pages the shortcut does not need
    if gold["shortcut"]:
      per_relation[gold["relation"]][gold["stale"]] += 1
  for relation, counts in per_relation.items():
    assert counts[True] == int(0.25 * (counts[True] + counts[False])), (relation, counts)
  n = len(stale_world.train)
  page_right = sum(not _gold(r)["stale"] for r in stale_world.train) / n
  shortcut_right = sum(_gold(r)["shortcut"] for r in stale_world.train) / n
  assert abs(page_right - shortcut_right) < 0.05, (page_right, shortcut_right)
  assert not any(_gold(r)["stale"] for r in world.train)


def test_a_stale_page_earns_no_rubric_and_misleads_the_reader(stale_world):
  """On a stale training question the expert's searched sample answers what the page says and
  is wrong; its tool-free shortcut is right without rubric credit; a right answer citing the
  stale page is not supported by it."""
  records = [r for r in stale_world.train if _gold(r)["stale"]][:8]
  trajs, scores = judged_expert_episodes(stale_world, records)
  cited_right = []
  for i, record in enumerate(records):
    for k in range(2):
      b, t = scores[2 * i + k], trajs[2 * i + k]
      if t["num_tool_calls"].get("search", 0):
        assert b.extracted_answer == _page_kind(stale_world, record) != record["label"]
        assert (b.outcome_reward, b.rubric_reward) == (0.0, 0.0)
        history = [dict(m) for m in t["history"]]
        history[-1]["content"] = history[-1]["content"].replace(
            f"## Exact Answer\n{b.extracted_answer}", f"## Exact Answer\n{record['label']}")
        cited_right.append(({**t, "history": history}, record))
      else:
        assert b.extracted_answer == record["label"]
        assert (b.outcome_reward, b.rubric_reward) == (1.0, 0.0)
  assert len(cited_right) == len(records)
  judged = asyncio.run(Judge(JudgeConfig(backend="gold", use_cache=False)).score_batch(
      cited_right))
  for b in judged:
    assert (b.outcome_reward, b.rubric_reward) == (1.0, 0.0), b.rubric_reason


def test_stale_pages_are_for_reference_questions_only():
  with pytest.raises(ValueError, match="stale_fraction"):
    build_world(5, 300, 40, style="lookup", distractors=0,
                stale_fraction=0.25)


def test_reference_world_refuses_odd_splits():
  with pytest.raises(ValueError, match="pairs"):
    build_world(5, 300, 130, style="reference", eval_fraction=0.3,
                distractors=0)  # 39 held out


def test_the_copy_probe_asks_for_the_link_digits_in_order(world):
  """lab/probes/kind_probe.py's query-copy rows: the searched expert episode cut before each
  digit of the link in its query, that digit the target."""
  probe = kind_probe
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
