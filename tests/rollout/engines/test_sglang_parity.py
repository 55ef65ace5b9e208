"""A real SGLang CPU server against our own model: same greedy tokens as the in-process JAX
engine, log-probs equal to our forward pass, and the same after one C-GRPO optimizer step
pushed with `save_hf` + `/update_weights_from_disk`.

Tolerance 1e-4 on log-probs (fp32 on both sides, different kernels: torch's native attention
vs XLA; observed ~5e-6).
"""
import asyncio

import jax
import numpy as np
import pytest

from carr_jax.model import hf_io
from carr_jax.model import qwen3 as M
from carr_jax.model import sharding
from carr_jax.model.engine import JaxEngine
from carr_jax.rl import loss as loss_lib
from carr_jax.rl import optim
from carr_jax.rl import train_step as ts
from rollout.engines.sglang import SGLangEngine
from tests.rollout.engines.test_sglang_engine import PROMPT
from tests.rollout.engines.test_sglang_server import GREEDY


def our_logprobs(params, cfg, prompt, output):
  ids = np.asarray([prompt + output], np.int32)
  logits = M.forward_logits(params, cfg, ids, np.arange(ids.shape[1])[None], np.ones_like(ids))
  logp = np.asarray(jax.nn.log_softmax(logits[0]))
  start = len(prompt) - 1
  return np.array([logp[start + i, t] for i, t in enumerate(output)])


def one_train_step(params, cfg, prompt, output):
  """One AdamW step of Eq. 15 raising the log-prob of `output` (advantage +1)."""
  mesh = sharding.make_mesh({"data": 1}, jax.devices()[:1])
  tx = optim.make_optimizer(optim.OptimConfig(learning_rate=1e-3, weight_decay=0.0,
                                              grad_clip_norm=0.0))
  state, shardings = ts.create_train_state(cfg, tx, mesh, seed=0, params=params)
  ids = np.asarray(prompt + output, np.int32)
  n = len(ids) - 1
  mask = (np.arange(n) >= len(prompt) - 1).astype(np.float32)[None]
  batch = {"tokens": ids[None, :n], "targets": ids[None, 1:], "positions": np.arange(n)[None],
           "segment_ids": np.ones((1, n), np.int32), "loss_mask": mask,
           "advantages": np.ones((1, n), np.float32)}
  logp = ts.make_logprob_fn(cfg, ts.StepConfig(), mesh, shardings.params)(state.params, batch)
  batch["old_logprobs"] = batch["rollout_logprobs"] = np.asarray(logp)
  step = ts.make_train_step(cfg, loss_lib.LossConfig(), ts.StepConfig(), tx, mesh, shardings)
  state, _ = step(state, batch)
  return jax.device_get(state.params)


@pytest.mark.sglang
@pytest.mark.slow
def test_sglang_equals_our_engine_and_follows_a_train_step(sglang_server, tiny_qwen3_dirs,
                                                           tmp_path):
  model_a = tiny_qwen3_dirs[0]
  cfg, params = hf_io.load_hf(str(model_a))

  async def go():
    server = SGLangEngine(sglang_server.url)
    local = JaxEngine(params, cfg, max_batch=1)
    try:
      await server.wait_until_ready(timeout=60)
      theirs, ours = await server.generate(PROMPT, GREEDY), await local.generate(PROMPT, GREEDY)
      new_params = one_train_step(params, cfg, PROMPT, theirs.output_ids)
      hf_io.save_hf(new_params, cfg, str(tmp_path / "step1"), tokenizer_dir=str(model_a))
      await server.update_weights_from_disk(str(tmp_path / "step1"), "step1")
      after = await server.generate(PROMPT, GREEDY)
      version = await server.served_weight_version(sglang_server.url)
      await server.update_weights_from_disk(str(model_a), "restored")  # leave A served
      return theirs, ours, new_params, after, version
    finally:
      await server.close()
      await local.close()

  theirs, ours, new_params, after, version = asyncio.run(go())
  assert theirs.output_ids == ours.output_ids and len(ours.output_ids) == GREEDY.max_new_tokens
  np.testing.assert_allclose(theirs.logprobs, our_logprobs(params, cfg, PROMPT,
                                                           theirs.output_ids), atol=1e-4, rtol=0)
  np.testing.assert_allclose(ours.logprobs, theirs.logprobs, atol=1e-4, rtol=0)
  assert version == after.weight_version == "step1"
  new_lp = our_logprobs(new_params, cfg, PROMPT, after.output_ids)
  np.testing.assert_allclose(after.logprobs, new_lp, atol=1e-4, rtol=0)
  # The step really moved the policy towards the rewarded tokens.
  old_path_now = our_logprobs(new_params, cfg, PROMPT, theirs.output_ids)
  assert old_path_now.sum() > np.sum(theirs.logprobs) + 1e-3
