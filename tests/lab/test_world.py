"""The synthetic world: determinism, unique answers, gold evidence, records, splits, script.

Uniqueness is re-checked here by brute force, independently of the generator's solver: every
chain of graph entities is enumerated and tested against the question's clues in the form the
question states them (the noun, and the decade/range text of each revealed attribute).

  python -m pytest tests/lab/test_world.py -q
"""
import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lab.world import RESPONSE_FORMAT_SUFFIX, build_world, write_world
from lab.world.ontology import ATTRS
from lab.world.questions import SHORTCUT_MAX_CANDIDATES
from rollout.tools import BrowserSession, tool_schemas

SEED, ENTITIES, QUESTIONS = 7, 240, 60
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def world():
  return build_world(SEED, ENTITIES, QUESTIONS)


def _records(world):
  return world.train + world.eval


def _fits(g, node, gold_node, attrs):
  """Whether `node` satisfies the clues the question gives about `gold_node`."""
  d, gold = g.nodes[node], g.nodes[gold_node]
  return d["noun"] == gold["noun"] and all(
      a in d["attrs"] and ATTRS[a].vague(d["attrs"][a]) == ATTRS[a].vague(gold["attrs"][a])
      for a in attrs)


def _step(g, node, hop):
  if hop.forward:
    return [b for _, b, rel in g.out_edges(node, keys=True) if rel == hop.relation]
  return [a for a, _, rel in g.in_edges(node, keys=True) if rel == hop.relation]


def _all_solutions(g, q):
  solutions = []

  def extend(chain):
    i = len(chain)
    if i == len(q.walk):
      solutions.append(tuple(chain))
      return
    for nxt in _step(g, chain[-1], q.hops[i - 1]):
      if nxt not in chain and _fits(g, nxt, q.walk[i], q.attr_clues[i]):
        extend(chain + [nxt])

  for node in g.nodes:
    if _fits(g, node, q.walk[0], q.attr_clues[0]):
      extend([node])
  return solutions


def test_same_seed_same_files_other_seed_differs(world, tmp_path):
  again = build_world(SEED, ENTITIES, QUESTIONS)
  write_world(world, tmp_path / "a")
  write_world(again, tmp_path / "b")
  for name in ("corpus.jsonl", "train.jsonl", "eval.jsonl", "manifest.json"):
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
  other = build_world(SEED + 1, ENTITIES, QUESTIONS)
  assert [r["label"] for r in _records(other)] != [r["label"] for r in _records(world)]


def test_every_question_has_exactly_one_solution(world):
  for q, record in zip(world.questions, _records(world)):
    assert _all_solutions(world.graph, q) == [q.walk], record["id"]
    assert record["label"] == world.graph.nodes[q.walk[0]]["name"]


def test_clues_are_obfuscated_in_the_text(world):
  g = world.graph
  for q in world.questions:
    for i, node in enumerate(q.walk):
      d = g.nodes[node]
      assert d["noun"] in q.text
      for name in [d["name"], *d["aliases"]]:
        assert name not in q.text
      for attr in q.attr_clues[i]:
        value = d["attrs"][attr]
        assert ATTRS[attr].vague(value) in q.text
        assert not re.search(rf"\b{ATTRS[attr].exact(value)}\b", q.text)


def test_evidence_is_verbatim_on_its_page_and_rubrics_are_well_formed(world):
  corpus = {p["url"]: p for p in world.corpus()}
  for record in _records(world):
    gold = record["metadata"]["gold"]
    rubrics = gold["rubrics"]
    assert record["metadata"]["remote_env_info"]["rubrics"] == [r["text"] for r in rubrics]
    assert set(gold["entities"]) == {f"E{i}" for i in range(gold["hops"] + 1)}
    assert 2 <= gold["hops"] <= 4
    for r in rubrics:
      assert r["placeholders"], r
      assert re.findall(r"<(E\d+)>", r["text"]) == r["placeholders"]
      assert set(r["placeholders"]) <= set(gold["entities"])
      assert r["evidence"] in corpus[r["url"]]["content"]
    assert any("E0" in r["placeholders"] for r in rubrics)
    # One relation rubric per hop: every placeholder pair of neighbours is linked.
    pairs = {frozenset(r["placeholders"]) for r in rubrics if len(r["placeholders"]) == 2}
    assert pairs == {frozenset((f"E{i}", f"E{i + 1}")) for i in range(gold["hops"])}
    for e in gold["entities"].values():
      assert e["url"] in corpus and corpus[e["url"]]["title"] == e["name"]


def test_record_format(world):
  for record in _records(world):
    question = record["metadata"]["remote_env_info"]["search_forbidden_strs"][0]
    assert record["input_messages"] == [
        {"role": "user", "content": question + RESPONSE_FORMAT_SUFFIX}]
    assert record["tools"] == tool_schemas()
    assert record["metadata"]["gold"]["entities"]["E0"]["name"] == record["label"]
    json.dumps(record)  # serialisable
  for heading in ("## Explanation with Citations", "## Exact Answer", "## References"):
    assert heading in RESPONSE_FORMAT_SUFFIX
  assert "[[n](url)]" in RESPONSE_FORMAT_SUFFIX


def test_ids_contiguous_and_splits_disjoint(world):
  ids = [r["id"] for r in _records(world)]
  assert ids == [f"synth-{SEED}-{i:05d}" for i in range(QUESTIONS)]
  assert len(world.eval) == round(0.2 * QUESTIONS) or len(world.eval) > 0.2 * QUESTIONS
  assert len(world.train) + len(world.eval) == QUESTIONS and world.train and world.eval
  assert not {r["label"] for r in world.train} & {r["label"] for r in world.eval}


def test_shortcut_questions_exist_and_flags_are_right(world):
  g = world.graph
  flags = []
  for q, record in zip(world.questions, _records(world)):
    noun1 = g.nodes[q.walk[1]]["noun"]
    local = [v for v in g.nodes if _fits(g, v, q.walk[0], q.attr_clues[0]) and
             any(g.nodes[u]["noun"] == noun1 for u in _step(g, v, q.hops[0]))]
    assert q.walk[0] in local
    shortcut = len(local) <= SHORTCUT_MAX_CANDIDATES
    assert record["metadata"]["gold"]["shortcut"] is shortcut
    flags.append(shortcut)
  assert 0.15 * QUESTIONS <= sum(flags) <= 0.35 * QUESTIONS  # requested share: 0.25


def test_gold_pages_are_reachable_through_the_tools(world):
  backend = world.corpus_backend()

  async def check(record):
    question = record["metadata"]["remote_env_info"]["search_forbidden_strs"][0]
    s = BrowserSession(backend, question)
    for r in record["metadata"]["gold"]["rubrics"]:
      opened = await s.call("browser.open", {"id": r["url"]})
      found = await s.call("browser.find", {"pattern": r["evidence"]})
      assert opened.ok and found.ok and r["evidence"] in found.text, (record["id"], r)
    e0 = record["metadata"]["gold"]["entities"]["E0"]
    hits = await s.call("browser.search", {"query": e0["name"]})
    assert e0["url"] in hits.text
    return len(s.results)

  counts = [asyncio.run(check(r)) for r in _records(world)]
  assert sum(c > 1 for c in counts) >= 0.9 * len(counts)  # names are mentioned elsewhere too


def test_make_world_script_matches_library(tmp_path, world):
  out = tmp_path / "w"
  subprocess.run([sys.executable, "-m", "lab.make_world", "--seed", str(SEED),
                  "--num-questions", str(QUESTIONS), "--num-entities", str(ENTITIES),
                  "--out", str(out)], cwd=REPO, check=True, capture_output=True, timeout=120)
  lines = lambda name: [json.loads(l) for l in (out / name).read_text().splitlines()]  # noqa
  assert lines("train.jsonl") == world.train and lines("eval.jsonl") == world.eval
  assert lines("corpus.jsonl") == world.corpus()
  manifest = json.loads((out / "manifest.json").read_text())
  assert manifest["num_pages"] == ENTITIES and manifest["num_train"] == len(world.train)


def test_bad_sizes_are_clear_errors():
  with pytest.raises(ValueError, match="num_entities must be at least"):
    build_world(0, 5, 3)
  with pytest.raises(ValueError, match="raise num_entities"):
    build_world(0, 18, 500, max_hops=2)  # 18 entities hold about 70 such questions
  with pytest.raises(ValueError, match="max_hops"):
    build_world(0, 100, 3, max_hops=5)
