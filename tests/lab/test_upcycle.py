"""lab/upcycle.py: a dense checkpoint becomes a mixture of experts that starts as the dense
policy (identical experts), or near it (perturbed experts), in the layout the trainer reads."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from carr_jax.model import qwen3
from carr_jax.model.config import get_preset
from carr_jax.runs import checkpointing as ckpt_lib
from lab import upcycle

MOE = get_preset("tiny_moe", vocab_size=1024)  # 8 experts, 2 per token, norm_topk_prob


def _inputs():
  tokens = jax.random.randint(jax.random.key(1), (2, 24), 0, 1000)
  positions = jnp.broadcast_to(jnp.arange(24), tokens.shape)
  segments = jnp.ones_like(tokens).at[1, 20:].set(0)
  return tokens, positions, segments


def _logits(params, cfg):
  return np.asarray(qwen3.forward_logits(params, cfg, *_inputs()))


def test_identical_experts_reproduce_the_dense_model():
  dense_cfg = upcycle.dense_twin(MOE)
  dense = qwen3.init_params(dense_cfg, jax.random.key(0))
  moe = upcycle.upcycle(dense, MOE, jax.random.key(2), router_std=0.02, expert_noise=0.0)
  routes = qwen3.Qwen3(MOE).apply({"params": moe}, *_inputs(), method=qwen3.Qwen3.routes)
  assert len(np.unique(np.asarray(routes))) > 2  # the router spreads tokens over experts
  np.testing.assert_allclose(_logits(moe, MOE), _logits(dense, dense_cfg), atol=1e-4, rtol=0)


def test_expert_noise_makes_experts_differ():
  dense_cfg = upcycle.dense_twin(MOE)
  dense = qwen3.init_params(dense_cfg, jax.random.key(0))
  moe = upcycle.upcycle(dense, MOE, jax.random.key(2), router_std=0.02, expert_noise=0.05)
  gate = np.asarray(moe["layers"]["moe"]["gate_proj"])  # [L, E, D, F]
  assert np.abs(gate[:, 0] - gate[:, 1]).max() > 1e-3
  relative = gate / np.asarray(dense["layers"]["mlp"]["gate_proj"])[:, None] - 1.0
  assert 0.03 < relative.std() < 0.07
  assert np.abs(_logits(moe, MOE) - _logits(dense, dense_cfg)).max() > 1e-3


def test_refuses_experts_of_another_width():
  dense = qwen3.init_params(upcycle.dense_twin(MOE).replace(intermediate_size=64),
                            jax.random.key(0))
  with pytest.raises(ValueError, match="width 64"):
    upcycle.upcycle(dense, MOE, jax.random.key(2), router_std=0.02, expert_noise=0.0)


def test_checkpoint_round_trip(tmp_path):
  dense_cfg = upcycle.dense_twin(MOE)
  dense = qwen3.init_params(dense_cfg, jax.random.key(0))
  with ckpt_lib.TrainCheckpointer(str(tmp_path / "dense"), save_every=1, keep=1,
                                  async_save=False) as ckpt:
    ckpt.save(7, {"params": dense}, data={}, meta={}, force=True)
  upcycle.run(str(tmp_path / "dense"), str(tmp_path / "moe"), MOE, 0.02, 0.0, seed=3)
  abstract = qwen3.abstract_params(MOE)
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  restored = ckpt_lib.restore_params(str(tmp_path / "moe"), ckpt_lib.with_shardings(
      abstract, jax.tree.map(lambda _: device, abstract)))
  np.testing.assert_allclose(_logits(restored, MOE), _logits(dense, dense_cfg), atol=1e-4,
                             rtol=0)
