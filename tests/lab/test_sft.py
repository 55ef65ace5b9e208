"""Cold-start SFT: example rendering (mask = assistant tokens of the chat template), the loss
(= cross-entropy over those tokens, checked against float64 NumPy), micro-batch invariance,
and the SFT loop on the scripted expert's trajectories (loss falls, checkpoints resume).

  .venv/bin/python -m pytest tests/lab/test_sft.py -q              # fast
  .venv/bin/python -m pytest tests/lab/test_sft.py -q -m slow      # SFT -> evaluate CLIs
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import jax
import numpy as np
import optax
import pytest

from carr_jax.coldstart import examples as sft_data
from carr_jax.coldstart import step as sft_step
from carr_jax.jobs import sft_train
from carr_jax.model import qwen3 as model_lib
from carr_jax.model import sharding
from carr_jax.model.config import get_preset
from carr_jax.rl import optim
from carr_jax.rl import train_step as ts
from lab.configs import demo_cpu
from rollout import chat
from rollout.tools.schemas import tool_schemas
from tests.carr_jax.sft_batch import CFG, packed_batch
from tests.carr_jax.test_tokenizer import qwen3_tokenizer, qwen3_tokenizer_dir
from tests.lab.test_expert import template_assistant_mask

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def fmt():
  return chat.ChatFormat(qwen3_tokenizer())


# ---------------------------------------------------------------- data

CALL = {"name": "browser.search", "arguments": {"query": "Velmora harbour", "num": 3}}
DEEPDIVE = {
    "id": 7, "question": "q", "answer": "a",
    "conversations": [
        {"role": "system", "content": "You are a careful researcher."},
        {"role": "user", "content": "Which harbour town founded the guild?"},
        {"role": "assistant", "content": "<think>\nFirst search.\n</think>\n\n<tool_call>\n"
                                         + json.dumps(CALL) + "\n</tool_call>"},
        {"role": "tool", "content": "[0] Title: Velmora\n[0] URL Source: https://x.example/v"},
        {"role": "assistant", "content": "<think>\nIt is Velmora.\n</think>\n\n## Exact Answer"
                                         "\nVelmora [[1](https://x.example/v)]"},
    ]}
# The same conversation as HF chat messages (what the template takes).
HF = [DEEPDIVE["conversations"][0], DEEPDIVE["conversations"][1],
      {"role": "assistant", "reasoning_content": "First search.", "content": "",
       "tool_calls": [CALL]},
      {"role": "tool", "content": DEEPDIVE["conversations"][3]["content"]},
      {"role": "assistant", "reasoning_content": "It is Velmora.",
       "content": "## Exact Answer\nVelmora [[1](https://x.example/v)]"}]


def test_deepdive_conversations_mask_exactly_the_assistant_tokens(fmt):
  ex = sft_data.example_from_record(DEEPDIVE, fmt, "line 1")
  ids, mask = template_assistant_mask(HF, tool_schemas())
  assert ex["token_ids"] == ids and ex["loss_mask"] == mask
  text = [fmt.decode([t for t, m in zip(ids, mask) if m == k]) for k in (0, 1)]
  assert text[1].count("<|im_end|>") == 2 and "</tool_call>" in text[1]
  assert "<tool_response>" not in text[1] and "Which harbour" not in text[1]
  # ShareGPT keys map the same way; a record's own tools win over the default schemas.
  sharegpt = {"conversations": [{"from": {"system": "system", "user": "human", "assistant": "gpt",
                                          "tool": "observation"}[m["role"]],
                                 "value": m["content"]} for m in DEEPDIVE["conversations"]]}
  assert sft_data.example_from_record(sharegpt, fmt, "x")["token_ids"] == ids
  one_tool = [tool_schemas()[0]]
  with_tools = sft_data.example_from_record({**DEEPDIVE, "tools": one_tool}, fmt, "x")
  assert with_tools["token_ids"] == template_assistant_mask(HF, one_tool)[0]


def test_records_listing_tools_in_the_system_prompt_get_none_added(fmt):
  system = chat.system_text(None, tool_schemas())[len("<|im_start|>system\n"):-len(
      "<|im_end|>\n")]
  conv = [{"role": "system", "content": system}] + DEEPDIVE["conversations"][1:]
  ex = sft_data.example_from_record({"conversations": conv}, fmt, "x")
  text = fmt.decode(ex["token_ids"])
  assert text.startswith(chat.system_text(None, tool_schemas())) and text.count("# Tools") == 1
  # Same ids as the default-tools rendering of the conversation without that system turn.
  plain = sft_data.example_from_record({"conversations": conv[1:]}, fmt, "x")
  assert ex == plain


@pytest.mark.parametrize("record, field", [
    ({"conversations": []}, "conversations"),
    ({"conversations": [{"role": "robot", "content": "x"}]}, r"conversations\[0\].role"),
    ({"messages": [{"role": "user", "content": 3}]}, r"messages\[0\].content"),
    ({"messages": [{"role": "user", "content": "q"}]}, "no assistant turn"),
    ({"messages": [{"role": "assistant", "content": "a"}]}, "cannot start"),
    ({"history": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "",
                                                     "tool_calls": [{"name": "x"}]}]},
     r"history\[1\].tool_calls\[0\]"),
    ({"token_ids": [1, 2], "loss_mask": [0]}, "loss_mask"),
    ({"token_ids": [1, 2], "loss_mask": [0, 2]}, "loss_mask"),
    ({"messages": HF, "tools": [{"description": "no name"}]}, "tools"),
    ({"question": "q"}, "no token_ids"),
])
def test_bad_records_name_the_field(fmt, record, field):
  with pytest.raises(sft_data.SFTDataError, match=field):
    sft_data.example_from_record(record, fmt, "f.jsonl:3")


def test_rollout_records_are_used_as_is_and_filtered(fmt, tmp_path):
  rows = [{"prompt_id": "a", "token_ids": [5, 6, 7], "loss_mask": [0, 1, 1], "status": "completed",
           "judge": {"outcome_reward": 1.0}},
          {"prompt_id": "b", "token_ids": [5, 6], "loss_mask": [0, 1], "status": "truncated"},
          {"prompt_id": "c", "token_ids": [5, 6], "loss_mask": [0, 1], "status": "completed",
           "judge": {"outcome_reward": 0.0}},
          {"prompt_id": "d", "token_ids": [5, 6], "loss_mask": [0, 0], "status": "completed"}]
  path = tmp_path / "r.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
  examples, skipped = sft_data.load_examples(path, fmt)
  assert [e["id"] for e in examples] == ["a", "c"] and skipped == 1  # d: no loss token
  examples, skipped = sft_data.load_examples(path, fmt, min_outcome=1.0)
  assert [e["id"] for e in examples] == ["a"] and skipped == 3  # b, c, d (no judge)
  assert examples[0]["token_ids"] == [5, 6, 7] and examples[0]["loss_mask"] == [0, 1, 1]
  path.write_text('{"messages": [}\n')
  with pytest.raises(sft_data.SFTDataError, match="r.jsonl:1: invalid JSON"):
    sft_data.load_examples(path, fmt)


def test_a_stage_that_names_no_data_says_so(fmt, tmp_path):
  from lab.configs import named_cpu
  config = named_cpu.get_config("copy")  # its data is the warm-up file the user makes
  with pytest.raises(sft_data.SFTDataError, match=r"sft.data is empty.*--config.sft.data"):
    sft_train.sft_examples(config, fmt, str(tmp_path))


# ---------------------------------------------------------------- the step


def reference_nll(params, examples):
  """float64 NumPy cross-entropy over the loss tokens, each example run alone (unpacked)
  through the model's full logits: independent of packing and of the loss-position gather."""
  total, count = 0.0, 0
  for e in examples:
    ids = np.asarray(e["token_ids"])[None]
    logits = np.asarray(model_lib.forward_logits(
        params, CFG, ids, np.arange(ids.shape[1])[None], np.ones_like(ids)), np.float64)[0]
    logits -= logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    for t in range(1, ids.shape[1]):
      if e["loss_mask"][t]:
        total -= logp[t - 1, ids[0, t]]
        count += 1
  return total / count, count


def run(batch, micro_batches, tx=optax.sgd(1.0), steps=1):
  mesh = sharding.make_mesh({"data": 2}, jax.devices()[:2])
  state, shardings = ts.create_train_state(CFG, tx, mesh, seed=0)
  params0 = jax.device_get(state.params)
  step = sft_step.make_sft_step(
      CFG, sft_step.SFTStepConfig(micro_batches, logprob_chunk=8), tx, mesh, shardings)
  out = []
  for _ in range(steps):
    state, m = step(state, batch)
    out.append(jax.device_get(m))
  return params0, jax.device_get(state.params), out


def test_sft_loss_is_cross_entropy_on_assistant_tokens_and_micro_batch_invariant():
  examples, batch = packed_batch()
  # The packed loss positions are exactly the predicted tokens with loss mask 1.
  assert batch["loss_valid"].sum() == sum(sum(e["loss_mask"][1:]) for e in examples)
  params0, after1, (m1,) = run(batch, micro_batches=1)
  expected, count = reference_nll(params0, examples)
  assert m1["tokens"] == count
  np.testing.assert_allclose(m1["loss"], expected, rtol=0, atol=1e-5)
  _, after2, (m2,) = run(batch, micro_batches=2)
  np.testing.assert_allclose(m2["loss"], m1["loss"], rtol=0, atol=1e-5)
  # SGD(1): params_after - params_before = -gradient, so this compares the gradients.
  for a, b in zip(jax.tree.leaves(after1), jax.tree.leaves(after2)):
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


# ---------------------------------------------------------------- the loop


def test_loss_falls_on_expert_trajectories_also_on_held_out_ones(fmt):
  """The scripted expert's episodes (first 1,024 tokens: prompt and the first tool turns):
  training on two of them lowers the loss on two others, as the format is shared."""
  from lab.world.expert import ExpertConfig, expert_trajectories
  from lab.world import build_world
  world = build_world(0, 60, 12)
  trajs = asyncio.run(expert_trajectories(world.train[:4], world.corpus_backend(), fmt,
                                          ExpertConfig(search_results=1, use_find=False)))
  cfg = get_preset("tiny_dense")
  pack_cfg = sft_step.packing.PackingConfig(row_lengths=(1024,), overflow="truncate",
                                       coarse_rows=False)
  train, _ = sft_step.make_batch(trajs[:2], pack_cfg)
  held_out, _ = sft_step.make_batch(trajs[2:], pack_cfg)
  assert train["loss_valid"].sum() > 100
  mesh = sharding.make_mesh({"data": 1}, jax.devices()[:1])
  tx = optim.make_optimizer(optim.OptimConfig(learning_rate=3e-2, weight_decay=0.0))
  state, shardings = ts.create_train_state(cfg, tx, mesh, seed=0)
  step = sft_step.make_sft_step(cfg, sft_step.SFTStepConfig(logprob_chunk=128), tx, mesh,
                                   shardings)
  nll = jax.jit(lambda p, b: (lambda n, t, *_: n / t)(*sft_step.loss_sums(
      p, cfg, sft_step.SFTStepConfig(logprob_chunk=128), b)))
  before = float(nll(state.params, held_out))
  losses = []
  for _ in range(5):
    state, m = step(state, train)
    losses.append(float(m["loss"]))
  after = float(nll(state.params, held_out))
  assert losses[0] == pytest.approx(before, abs=0.05)  # both ~log(151,936) at init
  assert losses[-1] < 0.6 * losses[0], losses
  assert after < 0.7 * before, (before, after)


def conversations(n, seed=0):
  """Short judge-format conversations (one tool turn, one answer) as JSONL rows."""
  rng = np.random.default_rng(seed)
  words = ["harbour", "guild", "river", "tower", "market", "bridge", "archive", "garden"]
  rows = []
  for i in range(n):
    w = [str(x) for x in rng.choice(words, 3)]
    rows.append({"id": f"c{i}", "history": [
        {"role": "user", "content": f"Which {w[0]} is near the {w[1]}?"},
        {"role": "assistant", "reasoning_content": "Search first.", "content": "",
         "tool_calls": [{"tool_call_id": "t0", "name": "browser.search",
                         "arguments": json.dumps({"query": f"{w[0]} {w[1]}"})}]},
        {"role": "tool", "content": [{"tool_call_id": "t0", "output": f"[0] Title: {w[2]}"}]},
        {"role": "assistant", "reasoning_content": "Found it.",
         "content": f"## Exact Answer\n{w[2]}"}]})
  return rows


def demo_config(data_path):
  c = demo_cpu.get_config("sft")
  c.rollout.tokenizer_dir = str(qwen3_tokenizer_dir())
  c.sft.data = str(data_path)
  c.sft.default_tools = False  # short rows: no tool schemas in the prompt
  c.model.output_vocab = "full"  # the conversations' words are not the world's
  c.sft.batch_size, c.sft.epochs, c.sft.num_steps = 8, 2, 3
  c.batch.row_lengths = (128,)
  c.optim.learning_rate, c.optim.warmup_steps = 1e-2, 0
  c.checkpoint.every = 2
  return c


def test_sft_loop_writes_metrics_and_checkpoints_and_resumes(tmp_path):
  data = tmp_path / "conv.jsonl"
  data.write_text("".join(json.dumps(r) + "\n" for r in conversations(16)))
  config = demo_config(data)
  history = sft_train.train_sft(config, str(tmp_path / "run"))
  assert len(history) == 3 and history[-1]["train/loss"] < history[0]["train/loss"]
  assert all(m["train/tokens"] > 0 and m["train/packing_rows"] % 8 == 0 for m in history)
  assert sorted(os.listdir(tmp_path / "run" / "checkpoints")) == ["2", "3"]
  assert any(p.startswith("events") for p in os.listdir(tmp_path / "run" / "tb"))
  # Resume: the 3 finished steps are not redone; step 4 continues the data loader.
  config.sft.num_steps = 4
  resumed = sft_train.train_sft(config, str(tmp_path / "run"))
  assert len(resumed) == 1 and resumed[0]["train/loss"] < history[0]["train/loss"]
  # The RL trainer (and evaluate) take the SFT params through checkpoint.init_dir.
  from carr_jax.runs import checkpointing as ckpt_lib
  cfg = get_preset(config.model.preset)
  mesh = sharding.make_mesh({"data": -1})
  abstract = model_lib.abstract_params(cfg)
  params = ckpt_lib.restore_params(str(tmp_path / "run" / "checkpoints"), ckpt_lib.with_shardings(
      abstract, sharding.param_shardings(abstract, mesh)))
  assert jax.tree.structure(params) == jax.tree.structure(abstract)


@pytest.mark.slow
@pytest.mark.timeout(3000)  # SFT + evaluation + one RL step: 16-18 min on 2 cores (2026-12-07)
def test_sft_then_evaluate_cli_tool_calls_well_formed(tmp_path):
  """Acceptance: SFT on the expert's episodes of the named-head world (lab/configs/named_cpu.py:sft),
  then `carr_jax.evaluate` on the held-out split: well-formed tool calls in at least half of
  the policy's turns (greedy decoding; measured 0.80 on 50 questions). Then one C-GRPO step
  from that policy (lab/configs/named_cpu.py) samples tool calls, which the random policy never
  does."""
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device
  env["PYTHONPATH"] = REPO
  common = [f"--config={REPO}/lab/configs/named_cpu.py:sft",
            f"--config.rollout.tokenizer_dir={qwen3_tokenizer_dir()}"]
  subprocess.run([sys.executable, "-m", "carr_jax.sft", *common, f"--workdir={tmp_path}/sft"],
                 env=env, check=True, timeout=1500)
  subprocess.run([sys.executable, "-m", "carr_jax.evaluate", *common, "--data=source:eval",
                  f"--checkpoint={tmp_path}/sft/checkpoints", f"--out={tmp_path}/eval",
                  "--config.rollout.temperature=0"], env=env, check=True, timeout=1500)
  summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
  print(json.dumps(summary, indent=1))
  assert summary["well_formed_tool_call_rate"] >= 0.5, summary
  subprocess.run([sys.executable, "-m", "carr_jax.train", f"--config={REPO}/lab/configs/named_cpu.py",
                  common[1], f"--workdir={tmp_path}/rl", "--config.train.num_steps=1",
                  "--config.train.eval_every=0",
                  f"--config.checkpoint.init_dir={tmp_path}/sft/checkpoints"],
                 env=env, check=True, timeout=900)
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
  events = EventAccumulator(str(tmp_path / "rl" / "tb"))
  events.Reload()
  (rate,) = events.Scalars("rollout/well_formed_tool_call_rate")
  (calls,) = events.Scalars("rollout/tool_calls")
  assert rate.value > 0 and calls.value > 0, (rate, calls)


@pytest.mark.parametrize("arg", ["tpu", "gpu", "tiny"])
def test_paper_sft_config_resolves_and_shards(arg):
  from jax.sharding import AbstractMesh

  from carr_jax.jobs import components
  from configs import cgrpo_qwen3_4b
  c = cgrpo_qwen3_4b.get_config(arg + ",sft")
  c.lock()
  assert (c.sft.epochs, c.sft.batch_size) == (3, 4 if arg == "tiny" else 16)
  assert c.optim.learning_rate == 4e-5
  if arg != "tiny":
    assert max(c.batch.row_lengths) == 131072 and c.model.preset == "qwen3_4b_thinking_2507"
  cfg = components.model_config(c)
  sizes = sharding.mesh_shape({a: c.mesh[a] for a in sharding.AXES},
                              c.mesh.target_devices or 8)
  mesh = AbstractMesh(tuple(sizes[a] for a in sharding.AXES), sharding.AXES)
  sharding.param_specs(model_lib.abstract_params(cfg), mesh)  # raises on an unsharded param
  rows = sizes["data"] * sizes["fsdp"] * sizes["expert"]
  assert c.sft.batch_size >= rows or arg == "tiny"
