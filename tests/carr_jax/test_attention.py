"""Blockwise attention equals the dense reference: values and gradients, packed and padded rows,
rows that are not a multiple of the block, GQA, inside the model and under a sharded mesh."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from carr_jax.model import attention as A
from carr_jax.model import qwen3 as M
from carr_jax.model import sharding as S
from carr_jax.model.config import get_preset


def _inputs(b, t, k, g, h, seed=0):
  rng = np.random.default_rng(seed)
  q = jnp.asarray(rng.standard_normal((b, t, k, g, h)), jnp.float32)
  kv = [jnp.asarray(rng.standard_normal((b, t, k, h)), jnp.float32) for _ in range(2)]
  seg = np.zeros((b, t), np.int32)
  seg[0, : t // 3] = 1  # row 0: two packed segments, then padding
  seg[0, t // 3: t - 5] = 2
  if b > 1:
    seg[1:] = 3  # other rows: one full segment
  w = rng.standard_normal((b, t, k, g, h)) * (seg > 0)[:, :, None, None, None]
  return q, kv[0], kv[1], jnp.asarray(seg), jnp.asarray(w, jnp.float32)


@pytest.mark.parametrize("shape,block", [((2, 37, 2, 2, 8), 16), ((1, 64, 1, 4, 16), 16),
                                         ((2, 100, 2, 1, 8), 32), ((1, 20, 2, 2, 8), 512),
                                         ((1, 40, 2, 2, 8), 32)])  # 2 blocks of 24
def test_blockwise_equals_dense_values_and_gradients(shape, block, monkeypatch):
  monkeypatch.setitem(A.BLOCKS, "cpu", block)
  q, k, v, seg, w = _inputs(*shape)
  valid = np.asarray(seg > 0)[:, :, None, None, None]
  dense, blocked = A.attend(q, k, v, seg, "dense"), jax.jit(A.blockwise)(q, k, v, seg)
  np.testing.assert_allclose(np.where(valid, blocked, 0), np.where(valid, dense, 0),
                             atol=1e-5, rtol=0)

  def objective(impl):
    return lambda q, k, v: jnp.sum(A.attend(q, k, v, seg, impl) * w)  # padding rows weigh 0
  want = jax.grad(objective("dense"), argnums=(0, 1, 2))(q, k, v)
  got = jax.jit(jax.grad(objective("blockwise"), argnums=(0, 1, 2)))(q, k, v)
  for name, a, b in zip("qkv", got, want):
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=0, err_msg=f"d{name}")


def test_block_size_covers_a_row_with_the_fewest_equal_blocks():
  """At most `most`; as few blocks as `most` allows; padding under 8 columns per block."""
  for most in (192, 512):
    for t in [1, 7, 40, 448, 512, 513, 640, 1000, 4096, 65_536]:
      blk = A.block_size(t, most)
      blocks = -(-t // blk)
      assert blk <= most and blocks == -(-t // most), (t, most)
      assert blocks * blk - t < 8 * blocks, (t, most, blk)
  assert A.block_size(640, 512) == 320 and A.block_size(448, 512) == 448
  assert A.block_size(448, 192) == 152 and A.block_size(1000, 192) == 168


def test_the_cpu_takes_smaller_blocks_than_accelerators():
  assert A.max_block("cpu") == 192 and A.max_block() == 192  # these tests trace for the CPU
  assert A.max_block("gpu") == A.max_block("tpu") == A.DEFAULT_BLOCK == 512


def test_blockwise_rows_of_padding_stay_finite(monkeypatch):
  monkeypatch.setitem(A.BLOCKS, "cpu", 8)
  q, k, v, _, _ = _inputs(2, 24, 1, 2, 8)
  seg = jnp.zeros((2, 24), jnp.int32).at[0, :10].set(1)  # row 1 is all padding
  out, grads = jax.value_and_grad(lambda q: jnp.sum(A.blockwise(q, k, v, seg)))(q)
  assert np.isfinite(np.asarray(out)) and np.all(np.isfinite(np.asarray(grads)))


def test_unknown_attention_is_an_error():
  with pytest.raises(ValueError, match="model.attention"):
    A.resolve("flash")
  assert A.resolve("auto") == "blockwise"


def _packed_batch(cfg, t=40):
  rng = np.random.default_rng(1)
  tokens = rng.integers(0, cfg.vocab_size, (4, t)).astype(np.int32)
  segs = np.zeros((4, t), np.int32)
  pos = np.zeros((4, t), np.int32)
  for r, cuts in enumerate([(11, 30), (25, 25), (5, 39), (t, t)]):
    segs[r, :cuts[0]], segs[r, cuts[0]:cuts[1]] = 1, 2
    pos[r, :cuts[0]], pos[r, cuts[0]:cuts[1]] = np.arange(cuts[0]), np.arange(cuts[1] - cuts[0])
  return tokens, pos, segs


@pytest.mark.parametrize("name", ["tiny_dense", "tiny_moe"])
def test_model_blockwise_equals_dense_under_a_sharded_mesh(name, monkeypatch):
  """Whole model, sharded over data x fsdp x tensor (heads over `tensor`): logits and the
  gradient of a masked loss agree with the dense single-device reference (fp32 1e-4)."""
  monkeypatch.setitem(A.BLOCKS, "cpu", 16)
  dense = get_preset(name, vocab_size=512, attention="dense")
  params = M.init_params(dense, jax.random.key(0))
  tokens, pos, segs = _packed_batch(dense)

  def loss(cfg):
    def fn(p, tokens, pos, segs):
      logits = M.forward_logits(p, cfg, tokens, pos, segs)
      return jnp.sum(jax.nn.log_softmax(logits)[..., 3] * (segs > 0)), logits
    return jax.value_and_grad(fn, has_aux=True)

  (_, want_logits), want_grad = loss(dense)(params, tokens, pos, segs)
  mesh = S.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  sharded = jax.device_put(params, S.param_shardings(params, mesh))
  batch = jax.device_put((tokens, pos, segs), S.batch_sharding(mesh))
  with jax.set_mesh(mesh):
    (_, logits), grad = jax.jit(loss(dense.replace(attention="blockwise")))(sharded, *batch)
  valid = segs[..., None] > 0
  np.testing.assert_allclose(np.where(valid, logits, 0), np.where(valid, want_logits, 0),
                             atol=1e-4, rtol=0)
  for a, b in zip(jax.tree.leaves(grad), jax.tree.leaves(want_grad)):
    np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)
