"""A shared prefix computed once (`batch.prefix_multiple`): the leading tokens every row shares
(the chat template's system turn with the tool signatures) are cut off the rows by
`packing.split_shared_prefix` and run once; attention, the model, and the SFT and RL steps
then give what the whole rows give (fp32: 1e-5 attention and loss, 1e-4 model).

  .venv/bin/python -m pytest tests/lab/test_shared_prefix.py -q
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from carr_jax.coldstart import step as sft_step
from carr_jax.jobs import components
from carr_jax.jobs.sft_train import sft_examples
from carr_jax.model import attention as A
from carr_jax.model import qwen3 as model_lib
from carr_jax.model import sharding
from carr_jax.model.config import get_preset
from carr_jax.rl import loss as loss_lib
from carr_jax.rl import packing
from carr_jax.rl import train_step as ts
from lab.configs import lookup_cpu
from rollout.chat import ChatFormat
from tests.carr_jax.test_tokenizer import qwen3_tokenizer

CFG = get_preset("tiny_dense", vocab_size=512)


def rows_with_prefix(rng, rows: int, length: int, prefix: int, vocab: int = 512):
  """[rows, length] tokens / positions / segment ids whose first `prefix` tokens are shared;
  row 1 holds a second segment, row 2 ends in padding, the last row is padding."""
  tokens = rng.integers(1, vocab, (rows, length))
  tokens[:, :prefix] = tokens[0, :prefix]
  seg = np.ones((rows, length), np.int32)
  pos = np.tile(np.arange(length, dtype=np.int32), (rows, 1))
  seg[1, length - 7:], pos[1, length - 7:] = 2, np.arange(7)
  seg[2, length - 5:], pos[2, length - 5:], tokens[2, length - 5:] = 0, 0, 0
  seg[-1], pos[-1], tokens[-1] = 0, 0, 0
  return tokens, pos, seg


# ---------------------------------------------------------------- packing

@pytest.mark.parametrize("change,expected", [
    ("none", 11), ("token_at_6", 6), ("loss_at_4", 4), ("segment_ends_at_8", 8),
    ("all_padding", 0)])
def test_shared_length_stops_at_a_difference_a_loss_or_a_segment_end(change, expected):
  tokens = np.tile(np.arange(1, 13), (4, 1))  # three equal rows of 12 and a padding row
  seg = np.ones((4, 12), np.int32)
  tokens[3], seg[3] = 0, 0
  loss = np.zeros_like(seg, bool)
  if change == "token_at_6":
    tokens[2, 6] += 1
  if change == "loss_at_4":
    loss[1, 4] = True
  if change == "segment_ends_at_8":
    seg[1, 8:] = 2
  if change == "all_padding":
    seg[:] = 0
  # "none": every column is shared, but one stays with the rows (at most S - 1)
  assert packing.shared_prefix_length(tokens, seg, loss) == expected


def test_split_cuts_a_multiple_and_keeps_every_loss_slot():
  rng = np.random.default_rng(1)
  records = []
  shared = rng.integers(1, 500, 21).tolist()
  for n in (40, 33, 52):
    ids = shared + rng.integers(1, 500, n - 21).tolist()
    mask = [0] * 25 + [1] * (n - 25)
    records.append({"token_ids": ids, "loss_mask": mask, "rollout_logprobs": [-0.5] * n})
  arrays = packing.pack_trajectories(records, [1.0, -1.0, 0.5],
                                     packing.PackingConfig(row_lengths=(64,))).arrays()
  split = packing.split_shared_prefix(arrays, 8)
  assert split["prefix_tokens"].tolist() == shared[:16]  # 21 shared -> 16
  for k, v in arrays.items():
    np.testing.assert_array_equal(split[k], v[:, 16:])
  assert split["loss_mask"].sum() == arrays["loss_mask"].sum()
  assert packing.split_shared_prefix(arrays, 32)["prefix_tokens"].shape == (0,)


# ---------------------------------------------------------------- attention and model

@pytest.mark.parametrize("impl", ["dense", "blockwise"])
def test_attention_after_a_prefix_equals_attention_over_whole_rows(impl, monkeypatch):
  monkeypatch.setitem(A.BLOCKS, "cpu", 16)  # several blocks on these short rows
  rng = np.random.default_rng(2)
  b, t, p, nk, g, h = 4, 56, 24, 2, 2, 8
  _, _, seg = rows_with_prefix(rng, b, t, p)
  q, k, v = (jnp.asarray(rng.normal(size=(b, t, nk) + extra), jnp.float32)
             for extra in ((g, h), (h,), (h,)))
  k, v = (x.at[:, :p].set(x[0, :p]) for x in (k, v))  # the prefix's keys and values are shared
  w = jnp.asarray(rng.normal(size=(b, t - p, nk, g, h)), jnp.float32) * (seg[:, p:] > 0)[
      ..., None, None, None]

  def whole(q, k, v):
    return jnp.sum(A.attend(q, k, v, seg, impl)[:, p:] * w)

  def cut(q, k, v):
    out = A.attend_after_prefix(q[:, p:], k[:, p:], v[:, p:], seg[:, p:], k[0, :p], v[0, :p],
                                impl)
    return jnp.sum(out * w)
  np.testing.assert_allclose(jax.jit(cut)(q, k, v), jax.jit(whole)(q, k, v), atol=1e-5, rtol=0)
  grads = [jax.jit(jax.grad(f, argnums=(0, 1, 2)))(q, k, v) for f in (whole, cut)]
  for name, a, c in zip("qkv", *grads):
    # whole rows give each row's prefix its own gradient; the cut one sums them in row 0
    a = a.at[0, :p].set(a[:, :p].sum(0)).at[1:, :p].set(0) if name != "q" else a.at[:, :p].set(0)
    np.testing.assert_allclose(c, a, atol=1e-5, rtol=0, err_msg=f"d{name}")


def test_a_named_kernel_refuses_a_prefix_and_auto_takes_blockwise():
  with pytest.raises(ValueError, match="shared prefix"):
    A.prefix_impl("splash", jnp.float32, "tpu")
  assert A.prefix_impl("auto", jnp.bfloat16, "gpu") == "blockwise"
  assert A.prefix_impl("auto", jnp.float32, "tpu") == "blockwise"
  assert A.prefix_impl("dense", jnp.float32, "cpu") == "dense"


def test_model_with_a_shared_prefix_equals_the_whole_rows():
  params = model_lib.init_params(CFG, jax.random.key(0))
  rng = np.random.default_rng(3)
  tokens, pos, seg = rows_with_prefix(rng, 5, 48, 24)
  p = 16
  live = (seg[:, p:] > 0)[..., None]
  w = jnp.asarray(rng.normal(size=live.shape[:2] + (CFG.hidden_size,)), jnp.float32) * live / (
      live.sum() * CFG.hidden_size)  # a mean over the live entries: O(1) gradients

  def hidden(params, cut):
    model = model_lib.Qwen3(CFG)
    if cut:
      return model.apply({"params": params}, tokens[:, p:], pos[:, p:], seg[:, p:],
                         jnp.asarray(tokens[0, :p]), method=model_lib.Qwen3.hidden_and_aux)[0]
    return model.apply({"params": params}, tokens, pos, seg,
                       method=model_lib.Qwen3.hidden_and_aux)[0][:, p:]
  np.testing.assert_allclose(np.where(live, hidden(params, True), 0),
                             np.where(live, hidden(params, False), 0), atol=1e-4, rtol=0)
  grads = [jax.grad(lambda q, cut=cut: jnp.sum(hidden(q, cut) * w))(params)
           for cut in (False, True)]
  for a, b in zip(*(jax.tree.leaves(g) for g in grads)):
    np.testing.assert_allclose(b, a, atol=1e-4, rtol=0)


def test_a_mixture_of_experts_config_refuses_a_prefix():
  config = lookup_cpu.get_config("main")
  config.model.preset = "tiny_moe"
  config.batch.prefix_multiple = 64
  with pytest.raises(ValueError, match="mixture of experts"):
    components.model_config(config)


# ---------------------------------------------------------------- the train steps

def step_outputs(step, state_args, batches):
  """(metrics, params) after one step on each batch from the same state."""
  out = []
  for batch in batches:
    state, _ = ts.create_train_state(*state_args)
    state, metrics = step(state, batch)
    out.append((jax.device_get(metrics), jax.device_get(state.params)))
  return out


def assert_same_step(a, b, loss_key):
  np.testing.assert_allclose(b[0][loss_key], a[0][loss_key], atol=1e-5, rtol=0)
  # SGD(1): params after - params before = -gradient, so this compares the gradients
  for x, y in zip(jax.tree.leaves(a[1]), jax.tree.leaves(b[1])):
    np.testing.assert_allclose(y, x, atol=1e-6, rtol=0)


@pytest.fixture(scope="module")
def expert_examples(tmp_path_factory):
  """The main job's cold-start examples: the real Qwen3 template, tools and expert."""
  config = lookup_cpu.get_config("sft")
  examples = sft_examples(config, ChatFormat(qwen3_tokenizer()),
                          str(tmp_path_factory.mktemp("sft")))
  return config, examples


def test_sft_step_on_the_main_jobs_examples_is_unchanged_by_the_prefix(expert_examples):
  """Two micro-batches: each reads the whole prefix, the rows split between them."""
  config, examples = expert_examples
  pack = lambda multiple: packing.PackingConfig(  # noqa: E731
      row_lengths=tuple(config.batch.row_lengths), row_multiple=2, prefix_multiple=multiple)
  batches = [sft_step.make_batch(examples[:8], pack(m), 16)[0] for m in (0, 64)]
  # The system turn with the tool signatures: 193 tokens shared, 192 cut.
  assert batches[1]["prefix_tokens"].shape == (192,)
  assert batches[1]["tokens"].shape[1] == batches[0]["tokens"].shape[1] - 192
  cfg = get_preset("tiny_dense")
  mesh = sharding.make_mesh({"data": 2}, jax.devices()[:2])
  tx = optax.sgd(1.0)
  _, shardings = ts.create_train_state(cfg, tx, mesh, 0)
  outs = []
  for batch, shared in zip(batches, (False, True)):
    step_cfg = sft_step.SFTStepConfig(2, 128, shared_prefix=shared)
    step = sft_step.make_sft_step(cfg, step_cfg, tx, mesh, shardings)
    outs += step_outputs(step, (cfg, tx, mesh, 0), [batch])
  assert_same_step(*outs, "loss")


def test_rl_step_and_log_probs_are_unchanged_by_the_prefix():
  rng = np.random.default_rng(4)
  shared = rng.integers(1, 500, 30).tolist()
  records = []
  for n in (60, 45, 70, 52, 64, 38):
    ids = shared + rng.integers(1, 500, n - 30).tolist()
    mask = [0] * 34 + [1] * (n - 34)
    records.append({"token_ids": ids, "loss_mask": mask,
                    "rollout_logprobs": rng.normal(-1.0, 0.3, n).tolist()})
  arrays = packing.pack_trajectories(records, rng.normal(size=6),
                                     packing.PackingConfig(row_lengths=(80,), row_multiple=4)
                                     ).arrays()
  arrays["loss_mask"] = arrays["loss_mask"].astype(np.float32)
  batches = [arrays, packing.split_shared_prefix(arrays, 8)]
  assert batches[1]["prefix_tokens"].shape == (24,)
  for b in batches:
    b["loss_index"], b["loss_valid"] = packing.loss_positions(b["loss_mask"] > 0, 8)
    b["old_logprobs"] = b["rollout_logprobs"]
  mesh = sharding.make_mesh({"data": 2}, jax.devices()[:2])
  tx = optax.sgd(1.0)
  _, shardings = ts.create_train_state(CFG, tx, mesh, 0)
  loss_cfg = loss_lib.LossConfig()
  outs, logprobs = [], []
  for batch, shared_prefix in zip(batches, (False, True)):
    step_cfg = ts.StepConfig(micro_batches=2, logprob_chunk=16, loss_positions=True,
                             shared_prefix=shared_prefix)
    step = ts.make_train_step(CFG, loss_cfg, step_cfg, tx, mesh, shardings)
    outs += step_outputs(step, (CFG, tx, mesh, 0), [batch])
    state, _ = ts.create_train_state(CFG, tx, mesh, 0)
    logprobs.append(np.asarray(ts.make_logprob_fn(CFG, step_cfg, mesh, shardings.params)(
        state.params, batch)))
  assert_same_step(*outs, "loss")
  np.testing.assert_allclose(logprobs[1], logprobs[0][:, 24:], atol=1e-5, rtol=0)
