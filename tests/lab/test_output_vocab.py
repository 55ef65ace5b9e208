"""Restricted output vocabulary (carr_jax/model/restricted_vocab.py; the world's ids:
lab/world/output_vocab.py).

  .venv/bin/python -m pytest tests/lab/test_output_vocab.py -q

The train step's log-probs are a float64 log-softmax over the subset's columns of the full
logits, gradients reach only the subset's head columns, the sampler emits only subset ids and
reports the train step's log-probs, exports and checkpoints know nothing of it, loss tokens
outside the subset are refused, and the synthetic world's subset covers the expert's generated
tokens.
"""
import asyncio
import dataclasses
import json

import jax
import numpy as np
import pytest

from carr_jax.coldstart import step as sft_step
from carr_jax.jobs import components
from carr_jax.model import convert
from carr_jax.model import decode
from carr_jax.model import hf_config
from carr_jax.model import hf_io
from carr_jax.model import qwen3 as M
from carr_jax.model import restricted_vocab as RV
from carr_jax.model.config import Qwen3Config, get_preset
from carr_jax.model.restricted_vocab import RestrictedVocab
from carr_jax.rl import packing
from carr_jax.rl import train_step as ts
from lab.world import output_vocab
from tests.carr_jax.test_decode import tiny_setup

VOCAB = 512
STOPS = (500, 511)  # stand-ins for <|im_end|> / <|endoftext|>: high ids, in the subset
_forward = jax.jit(M.forward_logits, static_argnums=1)
_logprobs = jax.jit(ts.target_logprobs, static_argnums=(1, 3, 4, 5, 6))


def subset(seed=0, size=96) -> RestrictedVocab:
  rng = np.random.default_rng(seed)
  return RestrictedVocab(tuple(sorted(set(rng.choice(VOCAB, size, replace=False).tolist())
                                      | set(STOPS))))


def log_softmax64(logits: np.ndarray) -> np.ndarray:
  z = logits.astype(np.float64)
  z = z - z.max(axis=-1, keepdims=True)
  return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def restricted_reference(params, cfg, vocab, batch, temperature):
  """float64 log-softmax over the subset's columns of the full logits, at the targets."""
  full = np.asarray(_forward(params, cfg, batch["tokens"], batch["positions"],
                             batch["segment_ids"]), np.float64)  # [R, S, V]
  ids = np.asarray(vocab.ids)
  lp = log_softmax64(full[..., ids] / temperature)  # [R, S, V']
  cols = np.searchsorted(ids, batch["targets"])
  return np.take_along_axis(lp, cols[..., None], axis=-1)[..., 0]


def packed_batch(vocab, rows=2, seq=24, seed=1):
  """Two segments per row; inputs anywhere in the vocab, targets in the subset."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, VOCAB, (rows, seq)).astype(np.int32)
  cut = seq // 2 - 3
  segs = np.where(np.arange(seq) < cut, 1, 2)[None].repeat(rows, 0).astype(np.int32)
  segs[:, -2:] = 0  # padding
  pos = np.where(segs == 1, np.arange(seq), np.arange(seq) - cut)
  pos = np.where(segs > 0, pos, 0).astype(np.int32)
  targets = rng.choice(np.asarray(vocab.ids), (rows, seq)).astype(np.int32)
  return {"tokens": tokens, "positions": pos, "segment_ids": segs, "targets": targets}


def test_vocab_validates_and_normalizes_its_ids():
  vocab = RestrictedVocab(np.array([3, 7, 9]))
  assert vocab.ids == (3, 7, 9) and isinstance(vocab.ids[0], int)
  hash(vocab)  # a static jit argument
  vocab.check_fits(VOCAB)
  with pytest.raises(ValueError, match="vocab_size=9"):
    vocab.check_fits(9)
  for bad, why in (((7, 3), "sorted and unique"), ((3, 3), "sorted and unique"),
                   ((-1, 2), "non-negative"), ((), "at least one")):
    with pytest.raises(ValueError, match=why):
      RestrictedVocab(bad)
  assert RV.size(vocab, VOCAB) == 3 and RV.size(None, VOCAB) == VOCAB


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_train_logprobs_are_the_restricted_log_softmax(temperature):
  cfg, params = tiny_setup("tiny_dense")
  vocab = subset()
  batch = packed_batch(vocab)
  got = np.asarray(_logprobs(params, cfg, batch, temperature, 8, False, vocab)[0])  # [R, S]
  want = restricted_reference(params, cfg, vocab, batch, temperature)
  live = batch["segment_ids"] > 0
  np.testing.assert_allclose(got[live], want[live], atol=1e-5, rtol=0)
  # Only at the loss positions (the SFT / loss_positions path): the same values.
  index = np.tile(np.arange(0, 20, 2, dtype=np.int32), (2, 1))  # [R, K]
  gathered = np.asarray(_logprobs(params, cfg, {**batch, "loss_index": index}, temperature, 4,
                                  True, vocab)[0])
  np.testing.assert_allclose(gathered, np.take_along_axis(want, index, 1), atol=1e-5, rtol=0)
  # A target outside the subset (allowed at a non-loss slot) stays finite.
  outside = next(i for i in range(VOCAB) if i not in vocab.ids)
  odd = {**batch, "targets": np.full_like(batch["targets"], outside)}
  assert np.isfinite(np.asarray(_logprobs(params, cfg, odd, temperature, 8, False,
                                          vocab)[0])).all()


@pytest.mark.parametrize("tied", [False, True])
def test_gradients_reach_only_the_subset_columns(tied):
  cfg, params = tiny_setup("tiny_dense", tie_word_embeddings=tied)
  vocab = subset()
  batch = packed_batch(vocab)
  mask = (batch["segment_ids"] > 0).astype(np.float32)

  def objective(p):
    return (_logprobs(p, cfg, batch, 1.0, 8, False, vocab)[0] * mask).sum()
  grads = jax.jit(jax.grad(objective))(params)
  ids = np.asarray(vocab.ids)
  if tied:  # head columns outside the subset and rows of unused inputs get nothing
    g = np.asarray(grads["embed"]["embedding"])  # [V, D]
    used = np.union1d(ids, batch["tokens"])
  else:
    g = np.asarray(grads["lm_head"]["kernel"]).T  # [V, D]
    used = ids
  outside = np.setdiff1d(np.arange(VOCAB), used)
  assert len(outside) > VOCAB // 2
  np.testing.assert_array_equal(g[outside], 0.0)
  assert (np.abs(g[ids]).sum(axis=1) > 0).mean() > 0.9


def test_columns_round_trip():
  vocab = subset()
  ids = np.asarray(vocab.ids)
  tokens = np.arange(VOCAB, dtype=np.int32)
  cols, inside = (np.asarray(x) for x in RV.columns(vocab, tokens))
  np.testing.assert_array_equal(inside, np.isin(tokens, ids))
  np.testing.assert_array_equal(np.asarray(RV.token_ids(vocab, cols))[inside], tokens[inside])
  assert cols.min() >= 0 and cols.max() < len(ids)
  cols, inside = RV.columns(None, tokens)  # the full vocabulary: columns are token ids
  np.testing.assert_array_equal(np.asarray(cols), tokens)
  assert np.asarray(inside).all()
  np.testing.assert_array_equal(np.asarray(RV.token_ids(None, tokens)), tokens)


def _generate(params, cfg, vocab, prompts, lengths, temperature, stop, steps=10):
  b = len(lengths)
  stop_ids = np.full((b, 2), -1, np.int32)
  stop_ids[:, 0] = stop
  return jax.device_get(decode.generate_jit(
      params, cfg, tokens=prompts, lengths=lengths, seeds=np.arange(b, dtype=np.uint32) + 7,
      temperature=np.asarray(temperature, np.float32), top_p=np.ones(b, np.float32),
      top_k=np.full(b, -1, np.int32), max_new_tokens=np.full(b, steps, np.int32),
      stop_ids=stop_ids, max_steps=steps, vocab=vocab))


def test_generate_emits_subset_ids_and_the_train_step_logprobs():
  cfg, params = tiny_setup("tiny_dense", seed=3)
  vocab = subset(seed=2, size=40)
  ids = set(vocab.ids)
  rng = np.random.default_rng(4)
  lengths = np.array([5, 9, 3], np.int32)
  prompts = np.zeros((3, 12), np.int32)
  for r, n in enumerate(lengths):  # prompts use the whole vocabulary
    prompts[r, :n] = rng.integers(0, VOCAB, n)
  temperature = [1.0, 1.0, 0.0]  # two sampled rows, one greedy row
  free = _generate(params, cfg, vocab, prompts, lengths, temperature, stop=-1)
  assert (free["num_tokens"] == 10).all() and (free["stop_token"] == -1).all()
  assert set(free["tokens"].ravel().tolist()) <= ids

  # Log-probs: the train step on prompt + generated tokens, at temperature 1 (greedy rows
  # report log_softmax(logits), i.e. temperature 1 too).
  seq = 12 + 10
  batch = {k: np.zeros((3, seq), np.int32) for k in ("tokens", "positions", "segment_ids",
                                                      "targets")}
  for r, n in enumerate(lengths):
    row = np.concatenate([prompts[r, :n], free["tokens"][r]])
    batch["tokens"][r, :len(row) - 1] = row[:-1]
    batch["targets"][r, :len(row) - 1] = row[1:]
    batch["segment_ids"][r, :len(row) - 1] = 1
    batch["positions"][r, :len(row) - 1] = np.arange(len(row) - 1)
  train_lp = np.asarray(_logprobs(params, cfg, batch, 1.0, 8, False, vocab)[0])
  full_logits = np.asarray(_forward(params, cfg, batch["tokens"], batch["positions"],
                                    batch["segment_ids"]))
  sub = np.asarray(vocab.ids)
  for r, n in enumerate(lengths):
    gen_slots = np.arange(n - 1, n - 1 + 10)
    np.testing.assert_allclose(free["logprobs"][r], train_lp[r, gen_slots], atol=1e-5, rtol=0)
    if temperature[r] == 0.0:  # greedy: the argmax over the subset's columns
      want = sub[np.argmax(full_logits[r, gen_slots][:, sub], axis=-1)]
      np.testing.assert_array_equal(free["tokens"][r], want)

  # Stop ids: the same draws (seeded per row and step) end at the first stop id.
  stop = int(free["tokens"][0, 4])
  stopped = _generate(params, cfg, vocab, prompts, lengths, temperature, stop=stop)
  for r in range(3):
    hits = np.flatnonzero(free["tokens"][r] == stop)
    n = int(hits[0]) + 1 if len(hits) else 10
    assert stopped["num_tokens"][r] == n
    assert stopped["stop_token"][r] == (stop if len(hits) else -1)
    np.testing.assert_array_equal(stopped["tokens"][r, :n], free["tokens"][r, :n])
    np.testing.assert_allclose(stopped["logprobs"][r, :n], free["logprobs"][r, :n], atol=1e-6)


def test_the_model_config_and_its_files_know_nothing_of_it(tmp_path):
  """The vocabulary is the run's: no model config field, nothing in the HF export or in our
  checkpoint format (each round-trips the architecture exactly)."""
  assert not any("vocab" in f.name and f.name != "vocab_size"
                 for f in dataclasses.fields(Qwen3Config))
  cfg, params = tiny_setup("tiny_dense")
  hf_io.save_hf(params, cfg, str(tmp_path / "hf"))
  assert "output" not in (tmp_path / "hf" / "config.json").read_text()
  assert hf_config.read_hf_config(str(tmp_path / "hf")).vocab_size == cfg.vocab_size
  convert.save_ours(params, cfg, str(tmp_path / "ours"))
  stored = json.loads((tmp_path / "ours" / "model_config.json").read_text())
  assert set(stored) == {f.name for f in dataclasses.fields(Qwen3Config)}
  assert convert.read_ours_config(str(tmp_path / "ours")) == cfg


def test_check_scored():
  vocab = RestrictedVocab((2, 5, 9))
  tokens = np.array([[2, 7, 5, 11], [9, 9, 3, 0]])
  mask = np.array([[1, 0, 1, 0], [1, 1, 0, 0]])
  RV.check_scored(vocab, tokens, mask)  # 7, 11, 3, 0 carry no loss
  RV.check_scored(None, tokens, np.ones_like(mask))
  bad = mask.copy()
  bad[0, 3] = bad[1, 2] = 1
  with pytest.raises(ValueError, match=r"2 of 6 loss tokens are outside .* token id 11"):
    RV.check_scored(vocab, tokens, bad)
  with pytest.raises(ValueError, match="shape"):
    RV.check_scored(vocab, tokens, bad[:, :2])
  # The SFT batch builder checks its packed loss tokens.
  examples = [{"token_ids": [1, 2, 5, 9], "loss_mask": [0, 1, 1, 1]}]
  pack_cfg = packing.PackingConfig(row_lengths=(8,))
  sft_step.make_batch(examples, pack_cfg, 4, vocab)
  with pytest.raises(ValueError, match="token id 4"):
    sft_step.make_batch([{"token_ids": [1, 2, 4], "loss_mask": [0, 1, 1]}], pack_cfg, 4, vocab)


@pytest.fixture(scope="module")
def fmt():
  from rollout.chat import ChatFormat
  from tests.carr_jax.test_tokenizer import qwen3_tokenizer
  return ChatFormat(qwen3_tokenizer())


def test_world_output_ids_cover_the_expert_and_are_small(fmt):
  from lab.world.expert import ExpertConfig, expert_trajectories
  from lab.world import build_world
  from rollout import chat
  world = build_world(seed=0, num_entities=40, num_questions=8)
  corpus = world.corpus()
  ids = output_vocab.world_output_ids(world.train, world.eval, corpus, fmt)
  assert list(ids) == sorted(set(ids))
  vocab = get_preset("tiny_dense").vocab_size
  assert 500 < len(ids) < vocab // 20, len(ids)
  vocab = RestrictedVocab(ids)
  vocab.check_fits(get_preset("tiny_dense").vocab_size)
  assert {chat.IM_END_ID, chat.ENDOFTEXT_ID, chat.THINK_ID, chat.THINK_END_ID,
          chat.TOOL_CALL_ID, chat.TOOL_CALL_END_ID} <= set(ids)
  backend = world.corpus_backend()
  # The default settings and combinations of them that world_output_ids did not run.
  for expert_cfg in (ExpertConfig(), ExpertConfig(search_results=1, use_find=False,
                                                  answer="brief"),
                     ExpertConfig(search_results=1, use_find=True, answer="evidence"),
                     ExpertConfig(search_results=3, use_find=False, answer="brief")):
    trajs = asyncio.run(expert_trajectories(world.train + world.eval, backend, fmt, expert_cfg))
    for t in trajs:
      RV.check_scored(vocab, t["token_ids"], t["loss_mask"])
  for record in world.train + world.eval:
    assert set(fmt.encode(record["label"])) <= set(ids)
  # Any ASCII text stays expressible, one character per token at worst.
  assert all(set(fmt.encode(chr(c))) <= set(ids) for c in range(32, 127))


def test_the_task_source_adds_the_ids_of_the_worlds_seeded_after_it(fmt):
  from lab import tasks as lab_tasks
  from lab.configs import lab_config
  c = lab_config()
  c.world.entities, c.world.questions = 20, 4
  alone = set(lab_tasks.output_ids(c, fmt))
  c.world.output_vocab_worlds = 1
  both = set(lab_tasks.output_ids(c, fmt))
  c.world.seed += 1
  c.world.output_vocab_worlds = 0
  after = set(lab_tasks.output_ids(c, fmt))
  assert both == alone | after and both > alone  # the next world's names add ids


def test_components_build_world_ids_for_the_jax_engine_only():
  from lab.configs import demo_cpu
  from tests.carr_jax.test_tokenizer import qwen3_tokenizer_dir
  c = demo_cpu.get_config()
  c.rollout.tokenizer_dir = str(qwen3_tokenizer_dir())
  c.world.entities, c.world.questions = 20, 4
  c.model.output_vocab = "task"
  cfg, vocab = components.model_config(c), components.output_vocab(c)
  assert cfg == get_preset(c.model.preset)  # the model is the same with either vocabulary
  assert 0 < len(vocab.ids) < cfg.vocab_size // 20
  # ... and the loss and the sampler get the vocabulary.
  assert components.step_config(c, vocab).vocab == vocab
  assert components.sft_step_config(c, vocab).vocab == vocab
  assert components.engine(c, None, cfg, "0", vocab).vocab == vocab
  c.rollout.engine, c.rollout.sglang_urls = "sglang", "http://127.0.0.1:9"
  with pytest.raises(ValueError, match="model.output_vocab"):
    components.output_vocab(c)
  with pytest.raises(ValueError, match="model.output_vocab"):
    components.engine(c, None, cfg, "0", vocab)
  c.rollout.engine, c.data.source = "jax", "jsonl"
  with pytest.raises(ValueError, match="model.output_vocab"):
    components.output_vocab(c)
  c.model.output_vocab = "words"
  with pytest.raises(ValueError, match="model.output_vocab"):
    components.output_vocab(c)
  c.model.output_vocab = "full"
  assert components.output_vocab(c) is None
