"""The lab's probes of reading: the page swap (lab/probes/page_swap.py, the world's
`swap_eval_pages`), the listing-reveal share (lab/probes/listing_reveal.py) and the copy of
each chain term into its search (lab/probes/hop_copy.py).

  python -m pytest tests/lab/test_page_probes.py -q
"""
from __future__ import annotations

import json
import math

import pytest

from lab.probes import hop_copy, listing_reveal, page_swap
from lab.world import build_world, lookup
from rollout.tools.corpus import CorpusBackend


def _world(**kw):
  return build_world(5, 300, 64, style="reference", prompt="brief",
                     eval_fraction=0.25, distractors=0, shortcut_fraction=0.8,
                     eval_shortcut_fraction=0.5, **kw)


@pytest.fixture(scope="module")
def worlds():
  return _world(), _world(swap_eval_pages=True)


def _page_kind(world, record) -> str:
  (kind,) = lookup.STATED_KIND.findall(
      world.pages[f"glossary:{record['metadata']['gold']['term']}"].content)
  return kind


def test_the_swap_flips_held_out_pages_and_gold_and_nothing_else(worlds):
  plain, swapped = worlds
  assert swapped.train == plain.train  # the training split is untouched
  for a, b in zip(plain.eval, swapped.eval):
    ga, gb = a["metadata"]["gold"], b["metadata"]["gold"]
    assert a["input_messages"] == b["input_messages"]  # the same question
    assert b["label"] != a["label"] and b["label"] == _page_kind(swapped, b)  # gold follows
    assert _page_kind(plain, a) == a["label"]
    assert gb["shortcut"] == (not ga["shortcut"]) == (gb["shortcut_answer"] == b["label"])
    assert gb["rubrics"][0]["evidence"] in swapped.pages[f"glossary:{gb['term']}"].content
  with pytest.raises(ValueError, match="swap_eval_pages is not read by lookup questions"):
    build_world(5, 300, 64, style="lookup", swap_eval_pages=True)


def test_follow_rates_per_split():
  """Hand-worked: question 0 (plain) follows on 1 of 2 samples, question 1 (plain) on 2 of 2,
  question 2 (evidence-only) on none."""
  rows = [{"samples": [{"outcome": 1.0}, {"outcome": 0.0}]},
          {"samples": [{"outcome": 1.0}, {"outcome": 1.0}]},
          {"samples": [{"outcome": 0.0}, {"outcome": 0.0}]}]
  rates = page_swap.follow_rates(rows, [True, True, False])
  assert rates["follow_plain"] == 0.75 and rates["follow_evidence_only"] == 0.0
  assert rates["follow"] == pytest.approx(0.5) and rates["n"] == 3 and rates["samples"] == 2
  assert math.isnan(page_swap.follow_rates(rows[:2], [True, True])["follow_evidence_only"])


def test_listings_never_show_the_evidence_but_a_one_sentence_page_would(worlds):
  world = worlds[0]
  records = {r["id"]: r for r in world.train + world.eval}
  backend = world.corpus_backend()
  forms = {qid: listing_reveal.form_queries(r) for qid, r in records.items()}
  rate, questions, searches = listing_reveal.share(backend, forms, records)
  assert (rate, questions) == (0.0, len(records)) and searches == 10 * len(records)
  # the same records over pages that name the term first: the listing shows the matching
  # sentence and what follows it, the evidence included
  old = [{"url": r["metadata"]["gold"]["rubrics"][0]["url"], "title": f"Glossary: {t}",
          "content": f"Filed as {t}. " + r["metadata"]["gold"]["rubrics"][0]["evidence"],
          "published_time": ""}
         for r in records.values() for t in [r["metadata"]["gold"]["term"]]]
  one = {qid: [(f"glossary {records[qid]['metadata']['gold']['term']}", 1)] for qid in records}
  assert listing_reveal.share(CorpusBackend.from_records(old), one, records)[0] == 1.0


def test_searched_queries_read_the_history():
  history = [{"role": "assistant", "tool_calls": [
                 {"name": "browser.search", "arguments": '{"query": "glossary link 417", '
                                                        '"num": 1}'},
                 {"name": "browser.open", "arguments": '{"id": 0}'}]},
             {"role": "assistant", "tool_calls": [
                 {"name": "browser.search", "arguments": '{"query": "link 4'}]},  # cut off
             {"role": "assistant", "tool_calls": [
                 {"name": "browser.search", "arguments": '{"query": "link 417"}'}]}]
  assert listing_reveal.searched_queries(history) == [("glossary link 417", 1), ("link 417", 10)]


def _searches(*queries):
  return [{"role": "assistant", "tool_calls": [
      {"name": "browser.search", "arguments": json.dumps({"query": q, "num": 1})}]}
      for q in queries]


def test_hop_copy_counts_each_hop_over_the_episodes_that_reached_it(tmp_path):
  chain = ["link 417", "code 135"]
  records = {"q": {"metadata": {"gold": {"chain": chain}}}}
  episodes = [_searches("glossary link 417", "glossary code 135"),  # both copied
              _searches("glossary link 417", "glossary code 13"),  # a digit lost
              _searches("glossary link 4170"),  # miscopied, no second search
              _searches("Glossary LINK 417", "code 135 kind", "code 135")]  # extra search
  path = tmp_path / "step_1.jsonl"
  path.write_text("".join(json.dumps({"prompt_id": "q", "history": h}) + "\n"
                          for h in episodes))
  counts = hop_copy.hop_counts(hop_copy.episodes_of([str(path)], records))
  assert counts == [(3, 4), (2, 3)]
  assert not hop_copy.names("glossary code 1350", "code 135")


def test_hop_copy_counts_replies_whose_first_citation_is_the_questions_page(tmp_path):
  records = {"q": {"metadata": {"gold": {"chain": ["link 800", "code 319"]}}}}
  url = "https://synthwiki.example/glossary/"

  def reply(text):
    return _searches("glossary link 800") + [{"role": "assistant", "content": text}]
  episodes = [reply(f"A. [[1]({url}link_800)] B. [[2]({url}code_319)]"),  # the own page
              reply(f"A. [[1]({url}link_840)] B. [[2]({url}code_319)]"),  # a mistyped number
              reply(f"B. [[1]({url}code_319)] A. [[2]({url}link_800)]"),  # the pages swapped
              reply("## Exact Answer\norganization"),  # cites nothing: not counted
              _searches("glossary link 800")]  # no reply: not counted
  path = tmp_path / "step_1.jsonl"
  path.write_text("".join(json.dumps({"prompt_id": "q", "history": h}) + "\n"
                          for h in episodes))
  assert hop_copy.cite_count([str(path)], records) == (1, 3)
