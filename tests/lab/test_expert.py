"""The scripted expert (lab/world/expert.py) on the synthetic world, judged by the gold judge.

  .venv/bin/python -m pytest tests/lab/test_expert.py -q

Real parts: the world's BM25 corpus behind a real BrowserSession, the real Qwen3 tokenizer and
its HF chat template (the reference the token ids and the loss mask are checked against), the
gold judge pipeline.
"""
from __future__ import annotations

import asyncio
import copy
import json
import re

import pytest

from carr_jax.coldstart import examples as sft_data
from judge import Judge, JudgeConfig
from lab.world import build_world
from lab.world.expert import ExpertConfig, ExpertError, expert_episode, expert_trajectories
from rollout import chat
from rollout.trajectory import check_record
from tests.carr_jax.test_tokenizer import qwen3_tokenizer
from tests.hf_chat import template_ids

NEWLINE_ID = 198


@pytest.fixture(scope="module")
def fmt():
  return chat.ChatFormat(qwen3_tokenizer())


@pytest.fixture(scope="module")
def world():
  return build_world(5, 80, 10)


@pytest.fixture(scope="module")
def episodes(world, fmt):
  records = world.train[:6]
  return records, asyncio.run(expert_trajectories(records, world.corpus_backend(), fmt))


def template_assistant_mask(history, tools):
  """1 on each assistant turn's generated tokens, derived from the HF template alone: the ids
  between the prompt (history before the turn, with generation prompt) and the rendering
  that includes the turn (whose closing "\\n" is not generated)."""
  full = template_ids(history, tools)[:-1]
  mask = [0] * len(full)
  for i, m in enumerate(history):
    if m["role"] != "assistant":
      continue
    start = len(template_ids(history[:i], tools, add_generation_prompt=True))
    end = len(template_ids(history[:i + 1], tools)) - 1
    assert template_ids(history[:i + 1], tools)[:end] == full[:end]  # a prefix, as it grows
    mask[start:end] = [1] * (end - start)
  return full, mask


def test_expert_episodes_score_full_rewards_with_the_gold_judge(episodes):
  records, trajs = episodes
  judge = Judge(JudgeConfig(backend="gold", use_cache=False))
  scores = asyncio.run(judge.score_batch(list(zip(trajs, records))))
  for record, traj, b in zip(records, trajs, scores):
    check_record(traj)
    gold = record["metadata"]["gold"]
    assert traj["status"] == "completed" and traj["tool_errors"] == {}
    # Hop by hop: one search and one open per entity of the chain.
    assert traj["num_tool_calls"]["search"] == traj["num_tool_calls"]["open"] == gold["hops"] + 1
    assert b.outcome_reward == 1.0, b.outcome_reason
    assert b.rubric_reward == 1.0, b.rubric_reason
    assert all(r.identified and r.supported and r.connected for r in b.rubrics)
    # Every cited page was opened by the expert in this episode.
    assert b.cited_urls and b.cited_opened == b.cited_visited == len(b.cited_urls)
    assert b.extracted_answer == gold["entities"]["E0"]["name"]


def test_expert_opens_pages_it_found_and_confirms_links(episodes):
  records, trajs = episodes
  for record, traj in zip(records, trajs):
    gold = record["metadata"]["gold"]
    chain = [gold["entities"][f"E{i}"] for i in range(gold["hops"], -1, -1)]
    calls = [(c["name"], json.loads(c["arguments"])) for m in traj["history"]
             if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    outputs = [m["content"][0]["output"] for m in traj["history"] if m["role"] == "tool"]
    searches = [a["query"] for n, a in calls if n == "browser.search"]
    assert searches == [e["name"] for e in chain]
    opened = [o for (n, _), o in zip(calls, outputs) if n == "browser.open"]
    assert [re.search(r"URL Source: (\S+)", o).group(1) for o in opened] == [e["url"]
                                                                              for e in chain]
    for (name, args), out in zip(calls, outputs):
      if name == "browser.find":
        assert out.startswith("[Match 1]") and args["pattern"].casefold() in out.casefold()
      if name == "browser.open" and isinstance(args["id"], int):  # a listed result number
        assert args["id"] < ExpertConfig().search_results


def test_expert_tokens_and_mask_equal_the_chat_template(episodes):
  records, trajs = episodes
  for record, traj in zip(records[:3], trajs[:3]):
    full, mask = template_assistant_mask(traj["history"], record["tools"])
    assert traj["token_ids"] == full
    assert traj["loss_mask"] == mask
    # The SFT renderer, from the history alone, agrees with the incremental build.
    rendered = sft_data.render_example(sft_data.normalize_messages(traj["history"]),
                                       record["tools"], chat.ChatFormat(qwen3_tokenizer()))
    assert rendered == {"token_ids": traj["token_ids"], "loss_mask": traj["loss_mask"]}


def test_expert_without_find_and_errors(world, fmt):
  record = world.train[0]
  traj = asyncio.run(expert_episode(record, world.corpus_backend(), fmt,
                                    ExpertConfig(search_results=5, use_find=False)))
  assert traj["num_tool_calls"]["find"] == 0 and traj["status"] == "completed"
  no_gold = copy.deepcopy(record)
  del no_gold["metadata"]["gold"]
  with pytest.raises(ExpertError, match="metadata.gold"):
    asyncio.run(expert_episode(no_gold, world.corpus_backend(), fmt))


def test_search_examples_are_each_search_turn_in_a_short_context(tmp_path, fmt):
  from lab.world.expert import search_examples
  named = build_world(5, 100, 12, style="named", min_hops=1, max_hops=2, locality=0.8,
                      distractors=0, short_names=True, prompt="brief", mark_names=True)
  record = named.train[0]
  episode = asyncio.run(expert_episode(record, named.corpus_backend(), fmt,
                                       ExpertConfig(1, False, "brief")))
  examples = search_examples(episode, fmt)
  gold = record["metadata"]["gold"]
  chain = [gold["entities"][f"E{i}"]["name"] for i in range(gold["hops"], -1, -1)]
  assert len(examples) == len(chain)  # one search per entity, head first
  question = chat.user_text(record["input_messages"][-1]["content"]) + chat.GENERATION_PROMPT
  for k, (example, name) in enumerate(zip(examples, chain)):
    ids, mask = example["token_ids"], example["loss_mask"]
    start = mask.index(1)
    assert set(mask[start:]) == {1} and not any(mask[:start])
    target = fmt.decode(ids[start:])
    assert f'"query": "{name}"' in target and target.endswith("<|im_end|>")
    context = fmt.decode(ids[:start])
    assert context.startswith(question) and "<tools>" not in context
    if k:  # the page the name is read from, marked there
      assert f"**{name}**" in context and context.count("<tool_response>") == 1
    else:
      assert context == question
  path = tmp_path / "search_examples.jsonl"
  path.write_text("".join(json.dumps(e) + "\n" for e in examples))
  loaded, skipped = sft_data.load_examples(str(path), fmt)
  assert skipped == 0 and [e["token_ids"] for e in loaded] == [e["token_ids"] for e in examples]
  assert [e["loss_mask"] for e in loaded] == [e["loss_mask"] for e in examples]
