"""Chain questions (lab/world/chain.py, style "chain"): evidence that takes two hops, one
rubric per hop, so identification, support and connectivity each decide part of the reward.

Checked against the real tools and the gold judge: the second search term is on the first
page, never in the question; every term's page ranks first for "glossary <term>"; the splits
are the reference world's (evidence-only exactly where the shortcut is wrong); the expert's
cited episode earns rubric 1 and fits the RL limits of lab/configs/chain_cpu.py; a reply citing
only the last page earns half, one that never names E1 nothing, and one whose only supported
rubric does not reach E0 nothing, unless `require_connected` is off (the ablation).

  python -m pytest tests/lab/test_chain_world.py -q
"""
from __future__ import annotations

import asyncio
import collections
import re

import pytest

from judge import Judge, JudgeConfig
from lab.configs import chain_cpu
from lab.probes import kind_probe
from carr_jax.rl.step_stats import has_unconnected_support
from lab.world import build_world, chain, lookup
from rollout import chat
from tests.carr_jax.test_tokenizer import qwen3_tokenizer
from tests.lab.test_lookup_world import judged_expert_episodes


@pytest.fixture(scope="module")
def world():
  return build_world(5, 300, 128, style="chain", min_hops=2, max_hops=2, prompt="brief",
                     eval_fraction=0.25, distractors=0, shortcut_fraction=0.8,
                     eval_shortcut_fraction=0.5)


@pytest.fixture(scope="module")
def judged(world):
  return judged_expert_episodes(world, world.eval)


def _gold(record):
  return record["metadata"]["gold"]


def test_the_second_term_is_on_the_first_page_only(world):
  reference = build_world(5, 300, 128, style="reference", 
                          prompt="brief", eval_fraction=0.25, distractors=0,
                          shortcut_fraction=0.8, eval_shortcut_fraction=0.5)
  codes = collections.Counter()
  for record, ref in zip(world.train + world.eval, reference.train + reference.eval):
    gold, text = _gold(record), record["input_messages"][0]["content"]
    assert text == ref["input_messages"][0]["content"]  # the reference world's questions
    assert record["label"] == ref["label"] and gold["shortcut"] == _gold(ref)["shortcut"]
    assert gold["shortcut"] == (gold["shortcut_answer"] == record["label"])
    first, second = gold["chain"]
    assert first == gold["term"] and f"({first})" in text
    assert re.fullmatch(r"code \d{3}", second) and second not in text
    codes.update(t.split()[1] for t in gold["chain"])
    pages = [world.pages[f"glossary:{t}"] for t in gold["chain"]]
    decide = [p.facts[("glossary",)] for p in pages]  # each body's deciding sentence
    assert decide[0].endswith(f"the trail continues under {second}.")
    assert decide[1].endswith(f"its object is of the kind {record['label']}.")
    assert [p.content.startswith(d) for p, d in zip(pages, decide)] == [True, True]
    # the first page's one kind is its lure's, about the next record: the shortcut's answer
    lure = lookup.lure_sentence(first, gold["shortcut_answer"])
    assert lookup.STATED_KIND.findall(pages[0].content) == [gold["shortcut_answer"]]
    assert lure in pages[0].content and not lure.startswith(decide[0].split(",")[0] + ",")
  assert set(codes.values()) == {1}  # every number used once, links included
  assert sum(_gold(r)["shortcut"] for r in world.eval) == len(world.eval) // 2


def test_every_term_finds_its_page_first(world):
  backend = world.corpus_backend()
  terms = [t for r in world.eval for t in _gold(r)["chain"]]

  async def first_hits():
    return [(await backend.search(f"glossary {t}", 1))[0] for t in terms]
  assert [h.url for h in asyncio.run(first_hits())] == [lookup.glossary_url(t) for t in terms]


def test_rubrics_name_the_hidden_term_and_chain_to_the_answer():
  terms = ("link 417", "code 733", "entry 250")
  assert [chain.rubric(terms, i) for i in range(3)] == [
      ("Link 417 continues under <E2>.", ["E2"]),
      ("<E2> continues under <E1>.", ["E2", "E1"]),
      ("<E1> is of the kind <E0>.", ["E1", "E0"])]
  with pytest.raises(ValueError, match="2 to 4 hops"):
    chain.chain_terms([], None, 1)


def test_expert_episode_is_full_credit_and_fits_the_rl_limits(world, judged):
  """The searched sample makes 2 searches and earns (1, 1); the tool-free one answers the
  relation's usual kind. Lengths are checked against lab/configs/chain_cpu.py's limits."""
  trajs, scores = judged
  fmt = chat.ChatFormat(qwen3_tokenizer())
  rollout = chain_cpu.get_config("main").rollout
  longest_episode = longest_turn = 0
  for i, record in enumerate(world.eval):
    for k in range(2):
      t, b = trajs[2 * i + k], scores[2 * i + k]
      if t["num_tool_calls"].get("search"):
        assert t["num_tool_calls"]["search"] == t["num_tool_calls"]["open"] == 2
        assert (b.outcome_reward, b.rubric_reward) == (1.0, 1.0), b.rubric_reason
        longest_episode = max(longest_episode, len(t["token_ids"]))
        reply = fmt.encode(chat.completion_text("", t["history"][-1]["content"]))
        longest_turn = max(longest_turn, len(reply))
      else:
        assert b.extracted_answer == _gold(record)["shortcut_answer"]
        assert b.rubric_reward == 0.0
  assert longest_episode <= 0.9 * rollout.max_context_tokens, longest_episode
  assert longest_turn <= 0.9 * rollout.max_turn_tokens, longest_turn


def test_the_copy_probe_asks_for_each_search_number(world):
  """lab/probes/kind_probe.py on a chain: search 0's rows ask for the question's link digits,
  search 1's for the code digits read off the first page, each cut right before its digit."""
  probe = kind_probe
  fmt = chat.ChatFormat(qwen3_tokenizer())
  records = world.eval[:4]
  searched = probe.expert_episodes(fmt, records, world.corpus_backend(), True)
  for hop in (0, 1):
    tokens, lengths, targets = probe.query_copy_inputs(fmt, searched, hop)
    assert len(targets) == 3 * len(records)
    for i, record in enumerate(records):
      term = _gold(record)["chain"][hop]  # "code 270"
      assert fmt.tokenizer.decode(targets[3 * i:3 * i + 3]) == term.split()[1]
      for k in range(3):
        prefix = fmt.tokenizer.decode(tokens[3 * i + k][:lengths[3 * i + k]])
        assert prefix.endswith(f'"query": "glossary {term[:len(term) - 3 + k]}')


def test_the_cite_probe_asks_for_the_first_cited_pages_number(world):
  """kind_probe.cite_copy_inputs: rows cut before each digit of the question's link where the
  reply first writes it, in the sentence its first citation supports."""
  fmt = chat.ChatFormat(qwen3_tokenizer())
  records = world.eval[:4]
  searched = kind_probe.expert_episodes(fmt, records, world.corpus_backend(), True)
  tokens, lengths, targets = kind_probe.cite_copy_inputs(fmt, searched)
  assert len(targets) == 3 * len(records)
  for i, record in enumerate(records):
    marker, number = _gold(record)["chain"][0].split()  # "link", "800"
    assert fmt.tokenizer.decode(targets[3 * i:3 * i + 3]) == number
    for k in range(3):
      prefix = fmt.tokenizer.decode(tokens[3 * i + k][:lengths[3 * i + k]])
      assert prefix.endswith(f"## Explanation with Citations\n{marker.title()} {number[:k]}")


def _rescored(world, judged, edit, **judge_kw):
  """The searched expert episodes with their final reply rewritten by `edit(reply, gold)`,
  scored by the gold judge: the pages were received, only the reply changes."""
  trajs, _ = judged
  items = []
  for t, r in zip(trajs, [r for r in world.eval for _ in range(2)]):
    if t["num_tool_calls"].get("search"):
      history = [dict(m) for m in t["history"]]
      history[-1]["content"] = edit(history[-1]["content"], _gold(r))
      items.append(({**t, "history": history}, r))
  judge = Judge(JudgeConfig(backend="gold", use_cache=False, **judge_kw))
  return asyncio.run(judge.score_batch(items))


def _line(reply: str, url: str) -> str:
  return next(line for line in reply.splitlines() if f"]({url})]" in line)


def test_citing_only_the_last_page_earns_half(world, judged):
  def last_only(reply, gold):
    first = gold["rubrics"][0]["url"]
    return reply.replace(_line(reply, first) + "\n", "").replace("[[2](", "[[1](")
  for b in _rescored(world, judged, last_only):
    assert (b.outcome_reward, b.rubric_reward) == (1.0, 0.5), b.rubric_reason
    assert [r.supported for r in b.rubrics] == [False, True]


def test_an_expert_citing_every_page_half_the_time(world):
  """`chain_cite_all=0.5`: the searched replies split between citing both pages (rubric 1) and
  the last one only (rubric 0.5), each right; a cold start whose full-chain share leaves room
  for the rubric reward to raise it."""
  trajs, scores = judged_expert_episodes(world, world.eval, chain_cite_all=0.5)
  rubric = collections.Counter()
  for t, b in zip(trajs, scores):
    if t["num_tool_calls"].get("search"):
      assert b.outcome_reward == 1.0, b.rubric_reason
      cited = len(re.findall(r"\]\(https?://[^)]+\)\]", t["history"][-1]["content"]))
      assert (cited, b.rubric_reward) in ((2, 1.0), (1, 0.5)), b.rubric_reason
      rubric[b.rubric_reward] += 1
  assert sum(rubric.values()) == len(world.eval)  # one searched sample per question
  assert 0.3 < rubric[1.0] / sum(rubric.values()) < 0.7, rubric


def test_an_expert_citing_one_page_cites_the_first_or_the_last(world):
  """`chain_cite_all=0.4, chain_cite_first=0.5`: the replies that cite one page cite the first
  (a supported rubric not connected to the answer: rubric 0, 0.5 without the connectivity
  check) or the last (0.5 either way), each reply right; the three kinds each common."""
  trajs, scores = judged_expert_episodes(world, world.eval, chain_cite_all=0.4,
                                         chain_cite_first=0.5)
  unconnected = Judge(JudgeConfig(backend="gold", use_cache=False, require_connected=False))
  searched = [(t, r) for t, r in zip(trajs, [r for r in world.eval for _ in range(2)])
              if t["num_tool_calls"].get("search")]
  rescored = asyncio.run(unconnected.score_batch(searched))
  kinds = collections.Counter()
  for (t, record), b, b_free in zip(searched, [b for t, b in zip(trajs, scores)
                                               if t["num_tool_calls"].get("search")], rescored):
    urls = re.findall(r"\]\((https?://[^)]+)\)\]", t["history"][-1]["content"])
    pages = [r["url"] for r in _gold(record)["rubrics"]]
    kind = {tuple(pages): "all", tuple(pages[:1]): "first", tuple(pages[1:]): "last"}[tuple(urls)]
    expected = {"all": (1.0, 1.0), "first": (0.0, 0.5), "last": (0.5, 0.5)}[kind]
    assert b.outcome_reward == 1.0 and (b.rubric_reward, b_free.rubric_reward) == expected, kind
    kinds[kind] += 1
  assert sum(kinds.values()) == len(world.eval)
  assert all(0.2 < kinds[k] / len(world.eval) < 0.5 for k in ("all", "first", "last")), kinds


def test_a_reply_that_never_names_the_hidden_term_identifies_nothing(world, judged):
  def unnamed(reply, gold):
    return reply.replace(gold["chain"][1].capitalize(), "It").replace(gold["chain"][1],
                                                                      "the next code")
  for b in _rescored(world, judged, unnamed):
    assert b.outcome_reward == 1.0
    assert b.entities["E1"] is None and b.rubric_reward == 0.0
    assert not any(r.identified for r in b.rubrics)


def test_a_supported_rubric_cut_off_from_the_answer_earns_nothing(world, judged):
  """Only the first page cited: its rubric is identified and supported, but it mentions only
  E1, and the rubric joining E1 to E0 is unsupported: not connected, no credit. With the
  ablation's `require_connected=False` the same reply earns that rubric's half."""
  def first_only(reply, gold):
    return reply.replace(_line(reply, gold["rubrics"][1]["url"]), "")
  for b in _rescored(world, judged, first_only):
    assert [(r.identified, r.supported, r.connected) for r in b.rubrics] == [
        (True, True, False), (True, False, False)]
    assert (b.outcome_reward, b.rubric_reward) == (1.0, 0.0), b.rubric_reason
  for b in _rescored(world, judged, first_only, require_connected=False):
    assert b.rubric_reward == 0.5, b.rubric_reason


def test_chain_world_needs_one_length():
  with pytest.raises(ValueError, match="one length"):
    build_world(5, 300, 128, style="chain", min_hops=2, max_hops=3, eval_fraction=0.25,
                distractors=0)


def test_the_lure_is_in_no_listing(world):
  """A search for the first term shows that page's naming line only, never its lure."""
  backend = world.corpus_backend()

  async def listings():
    return [(await backend.search(f"glossary {_gold(r)['term']}", 10)) for r in world.eval]
  for record, hits in zip(world.eval, asyncio.run(listings())):
    assert not any(lookup.STATED_KIND.search(h.snippet) for h in hits), hits[0].snippet


def test_an_expert_answering_the_lure_is_supported_but_unconnected(world):
  """`chain_lure=1`: every searched reply stops at the first page and answers its lure: right
  exactly where the shortcut is, its one supported rubric cut off from the answer (rubric 0;
  1/2 without the connectivity check), and `has_unconnected_support` says so."""
  trajs, scores = judged_expert_episodes(world, world.eval, chain_lure=1.0)
  unconnected = Judge(JudgeConfig(backend="gold", use_cache=False, require_connected=False))
  pairs = [(t, r) for t, r in zip(trajs, [r for r in world.eval for _ in range(2)])]
  searched = [(i, t, r) for i, (t, r) in enumerate(pairs) if t["num_tool_calls"].get("search")]
  free = asyncio.run(unconnected.score_batch([(t, r) for _, t, r in searched]))
  assert len(searched) == len(world.eval)
  for (i, t, record), b_free in zip(searched, free):
    b, gold = scores[i], _gold(record)
    assert t["num_tool_calls"] == {"search": 1, "open": 1, "find": 0}
    assert b.outcome_reward == float(gold["shortcut"]), b.outcome_reason
    if gold["shortcut"]:
      assert (b.rubric_reward, b_free.rubric_reward) == (0.0, 0.5), b.rubric_reason
      assert [r.supported for r in b.rubrics] == [True, False]
      assert has_unconnected_support(b) and not has_unconnected_support(scores[i ^ 1])


def test_stale_chains_end_on_the_other_kind():
  """`stale_fraction`: the last page of a share of the training shortcut questions states the
  other kind, the gold evidence (the true sentence) is on no page; held-out chains are true."""
  stale = build_world(5, 300, 128, style="chain", min_hops=2, max_hops=2, prompt="brief",
                      eval_fraction=0.25, distractors=0, shortcut_fraction=0.8,
                      eval_shortcut_fraction=0.5, stale_fraction=0.25)
  contents = {p.content for p in stale.pages.values()}
  flagged = 0
  for record in stale.train + stale.eval:
    gold = _gold(record)
    last = stale.pages[f"glossary:{gold['chain'][-1]}"].content
    stated = lookup.STATED_KIND.search(last).group(1)
    assert (stated != record["label"]) == gold["stale"]
    assert any(gold["rubrics"][-1]["evidence"] in c for c in contents) != gold["stale"]
    flagged += gold["stale"]
    assert not (gold["stale"] and (record in stale.eval or not gold["shortcut"]))
  shortcuts = sum(_gold(r)["shortcut"] for r in stale.train)
  assert flagged == pytest.approx(0.25 * shortcuts, abs=5)
