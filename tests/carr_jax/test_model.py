"""Model behaviour that needs no HF reference: packing, sharding, remat, MoE paths, presets.

Parity with transformers lives in tests/carr_jax/test_hf_parity.py.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AbstractMesh

from carr_jax.model import qwen3 as M
from carr_jax.model import sharding as S
from carr_jax.model.config import get_preset


def _random_norms(params, seed=1):
  """Norm scales away from 1 so norm-order bugs cannot hide."""
  rng = np.random.default_rng(seed)

  def one(path, leaf):
    if "norm" in S.path_str(path):
      return leaf + 0.3 * jnp.asarray(rng.standard_normal(leaf.shape), leaf.dtype)
    return leaf
  return jax.tree_util.tree_map_with_path(one, params)


def _setup(name, **kw):
  cfg = get_preset(name, vocab_size=512, **kw)
  params = _random_norms(M.init_params(cfg, jax.random.key(0)))
  return cfg, params


@pytest.mark.parametrize("name", ["tiny_dense", "tiny_moe"])
def test_packed_row_equals_separate_sequences(name):
  cfg, params = _setup(name)
  rng = np.random.default_rng(0)
  lengths = [7, 12, 5]
  seqs = [rng.integers(0, cfg.vocab_size, n) for n in lengths]
  row_len = 28  # 24 real tokens + 4 padding
  tokens = np.zeros((1, row_len), np.int32)
  segs = np.zeros((1, row_len), np.int32)
  pos = np.zeros((1, row_len), np.int32)
  start = 0
  for i, s in enumerate(seqs):
    tokens[0, start:start + len(s)] = s
    segs[0, start:start + len(s)] = i + 1
    pos[0, start:start + len(s)] = np.arange(len(s))
    start += len(s)
  packed = np.asarray(M.forward_logits(params, cfg, tokens, pos, segs))
  start = 0
  for s in seqs:
    n = len(s)
    alone = np.asarray(M.forward_logits(
        params, cfg, s[None].astype(np.int32), np.arange(n)[None], np.ones((1, n), np.int32)))
    np.testing.assert_allclose(packed[0, start:start + n], alone[0], atol=1e-5, rtol=0)
    start += n


def _batch(cfg, b=8, t=16, seed=0):
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, cfg.vocab_size, (b, t)).astype(np.int32)
  lengths = rng.integers(3, t + 1, b)
  segs = (np.arange(t)[None] < lengths[:, None]).astype(np.int32)
  pos = np.where(segs > 0, np.arange(t)[None], 0).astype(np.int32)
  return tokens, pos, segs


@pytest.mark.parametrize("name", ["tiny_dense", "tiny_moe"])
def test_sharded_forward_equals_single_device(name):
  cfg, params = _setup(name)
  tokens, pos, segs = _batch(cfg)
  expected = np.asarray(M.forward_logits(params, cfg, tokens, pos, segs))
  mesh = S.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  shardings = S.param_shardings(params, mesh)
  sharded_params = jax.device_put(params, shardings)
  batch = jax.device_put((tokens, pos, segs), S.batch_sharding(mesh))
  with jax.set_mesh(mesh):
    fn = jax.jit(lambda p, b: M.forward_logits(p, cfg, *b))
    got = fn(sharded_params, batch)
  # Rows really were split over the data axes (4 shards of 2 rows), not replicated.
  assert {shard.data.shape[:2] for shard in got.addressable_shards} == {(2, 16)}
  np.testing.assert_allclose(np.asarray(got), expected, atol=1e-5, rtol=0)


def _loss(cfg, params, batch):
  logits = M.forward_logits(params, cfg, *batch)
  return jnp.mean(jax.nn.log_softmax(logits)[..., 0] * (batch[2] > 0))


def test_remat_same_value_and_gradient():
  cfg, params = _setup("tiny_dense")
  batch = _batch(cfg, b=2)
  v0, g0 = jax.value_and_grad(lambda p: _loss(cfg, p, batch))(params)
  cfg_remat = cfg.replace(remat="full")
  v1, g1 = jax.value_and_grad(lambda p: _loss(cfg_remat, p, batch))(params)
  np.testing.assert_allclose(v0, v1, atol=1e-6, rtol=0)
  for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
    np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)


def test_moe_ragged_and_dense_paths_agree_with_gradients():
  cfg, params = _setup("tiny_moe")
  batch = _batch(cfg, b=2)
  v0, g0 = jax.value_and_grad(lambda p: _loss(cfg, p, batch))(params)
  dense = cfg.replace(moe_impl="dense")
  v1, g1 = jax.value_and_grad(lambda p: _loss(dense, p, batch))(params)
  np.testing.assert_allclose(v0, v1, atol=1e-6, rtol=0)
  for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def test_bf16_compute_keeps_fp32_logits_and_params():
  cfg, params = _setup("tiny_dense", compute_dtype="bfloat16")
  tokens, pos, segs = _batch(cfg, b=2)
  logits = M.forward_logits(params, cfg, tokens, pos, segs)
  assert logits.dtype == jnp.float32
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(params))
  exact = M.forward_logits(params, cfg.replace(compute_dtype="float32"), tokens, pos, segs)
  # bf16 has an 8-bit mantissa: agreement to ~1e-2 relative, not to fp32 precision.
  assert float(jnp.max(jnp.abs(logits - exact))) < 0.05 * float(jnp.max(jnp.abs(exact)))


@pytest.mark.parametrize("name,expected", [
    ("qwen3_4b_thinking_2507", 4.02e9), ("qwen3_30b_a3b_thinking_2507", 30.53e9)])
def test_real_presets_shapes_and_sharding_rules(name, expected):
  abstract = M.abstract_params(get_preset(name))
  count = sum(math.prod(x.shape) for x in jax.tree.leaves(abstract))
  assert abs(count - expected) / expected < 0.005, count
  mesh = AbstractMesh((1, 16, 1, 4), S.AXES)  # 64 devices: fsdp 16 x tensor 4
  specs = S.param_specs(abstract, mesh)  # raises on a missing rule or indivisible dim
  flat = jax.tree.leaves(specs, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
  assert len(flat) == len(jax.tree.leaves(abstract))
  # No big parameter is silently replicated: every one is split over fsdp.
  big = [s for s, x in zip(flat, jax.tree.leaves(abstract)) if math.prod(x.shape) > 1e6]
  assert big and all("fsdp" in str(s) for s in big)


def test_unmatched_parameter_and_indivisible_dim_are_errors():
  with pytest.raises(KeyError, match="layers/attn/new_thing"):
    S.spec_for("layers/attn/new_thing")
  abstract = M.abstract_params(get_preset("tiny_dense"))  # kv heads 2
  with pytest.raises(ValueError, match="k_proj"):
    S.param_specs(abstract, AbstractMesh((1, 1, 1, 4), S.AXES))


def test_make_mesh_infers_one_free_axis_and_rejects_bad_shapes():
  mesh = S.make_mesh({"data": -1, "tensor": 2})
  assert dict(mesh.shape) == {"data": 4, "fsdp": 1, "expert": 1, "tensor": 2}
  with pytest.raises(ValueError, match="at most one"):
    S.make_mesh({"data": -1, "fsdp": -1})
  with pytest.raises(ValueError, match="unknown axes"):
    S.make_mesh({"model": 2})
  with pytest.raises(ValueError, match="need 6 devices"):
    S.make_mesh({"data": 3, "tensor": 2})
