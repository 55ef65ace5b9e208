"""The fused kernels of `carr_jax.model.fused_attention` and how `model.attention` picks one.

Splash runs here in Pallas interpret mode (the same kernel, on the CPU): it equals dense
within fp32 1e-5, values and gradients, on packed and padded rows, alone and sharded under a
mesh. cuDNN cannot run without a GPU: its mask is checked against dense's, and choosing it off
a GPU must be a clear error.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from carr_jax.model import attention as A
from carr_jax.model import fused_attention as F
from carr_jax.model import sharding as S
from tests.carr_jax.test_attention import _inputs

splash = jax.jit(lambda q, k, v, seg: F.splash(q, k, v, seg, interpret=True))


def _assert_matches_dense(attn, q, k, v, seg, w):
  """attn(q, k, v, seg) equals dense on real tokens, and so do the gradients of sum(out * w)."""
  valid = np.asarray(seg > 0)[:, :, None, None, None]
  got, want = attn(q, k, v, seg), A.dense(q, k, v, seg)
  np.testing.assert_allclose(np.where(valid, got, 0), np.where(valid, want, 0), atol=1e-5,
                             rtol=0)
  objective = lambda fn: lambda q, k, v: jnp.sum(fn(q, k, v, seg) * w)  # noqa: E731
  got_grads = jax.grad(objective(attn), argnums=(0, 1, 2))(q, k, v)
  want_grads = jax.grad(objective(A.dense), argnums=(0, 1, 2))(q, k, v)
  for name, a, b in zip("qkv", got_grads, want_grads):
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=0, err_msg=f"d{name}")


@pytest.mark.parametrize("shape", [(2, 200, 2, 2, 32), (1, 256, 1, 4, 128)])
def test_splash_equals_dense_in_interpret_mode(shape):
  """Packed row + padding, a row of one segment, GQA; 200 tokens pads to one 256 block."""
  _assert_matches_dense(splash, *_inputs(*shape))


def test_splash_rows_of_padding_stay_finite():
  q, k, v, _, _ = _inputs(2, 128, 1, 2, 32)
  seg = jnp.zeros((2, 128), jnp.int32).at[0, :50].set(1)  # row 1 is all padding
  out, grads = jax.value_and_grad(lambda q: jnp.sum(splash(q, k, v, seg)))(q)
  assert np.isfinite(np.asarray(out)) and np.all(np.isfinite(np.asarray(grads)))


@pytest.mark.parametrize("kv_heads,groups,q_spec", [
    (2, 2, P(("data", "fsdp", "expert"), None, "tensor", None, None)),  # kv heads split
    (1, 4, P(("data", "fsdp", "expert"), None, None, "tensor", None)),  # query groups split
])
def test_splash_under_a_mesh_keeps_heads_sharded(kv_heads, groups, q_spec):
  """data 2 x fsdp 2 x tensor 2: rows over the batch axes, heads over `tensor`; equals dense."""
  mesh = S.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  q, k, v, seg, w = _inputs(4, 128, kv_heads, groups, 32)
  with jax.set_mesh(mesh):
    out = splash(q, k, v, seg)
    _assert_matches_dense(splash, q, k, v, seg, w)
  assert out.sharding.is_equivalent_to(NamedSharding(mesh, q_spec), out.ndim)


def test_tensor_axis_must_divide_the_heads():
  mesh = S.make_mesh({"data": 1, "fsdp": 1, "tensor": 8})
  q, k, v, seg, _ = _inputs(1, 128, 2, 2, 32)
  with jax.set_mesh(mesh), pytest.raises(ValueError, match="tensor axis"):
    splash(q, k, v, seg)


def test_cudnn_mask_is_dense_mask_plus_padding_to_padding():
  """Real tokens see exactly what dense lets them see; padding sees padding only (finite)."""
  seg = jnp.asarray([[1, 1, 2, 2, 2, 0, 0], [3, 3, 3, 3, 3, 3, 0]], jnp.int32)
  cols = jnp.arange(7)
  got = np.asarray(F.cudnn_mask(seg))[:, 0]  # [B, T, S]
  real = np.asarray(seg > 0)
  np.testing.assert_array_equal(got[real], np.asarray(A.mask(seg, seg, cols, cols))[:, 0, 0][real])
  pad = ~real
  assert np.all(got.sum(-1) >= 1)  # every row attends to something (itself)
  assert not np.any(got[pad][:, None] & real[np.nonzero(pad)[0]][:, None])


@pytest.mark.parametrize("platform,want", [("tpu", "splash"), ("gpu", "cudnn"),
                                           ("cpu", "blockwise")])
def test_auto_picks_by_platform(platform, want):
  assert A.resolve("auto", platform) == want
  assert A.resolve("dense", platform) == "dense"


@pytest.mark.parametrize("dtype,want", [(jnp.float32, "blockwise"), (jnp.bfloat16, "cudnn"),
                                        (jnp.float16, "cudnn")])
def test_auto_on_gpu_picks_cudnn_only_for_the_dtypes_it_takes(dtype, want):
  """cuDNN's fused attention has no fp32 kernel: fp32 on a GPU is blockwise (a CPU config run
  on a GPU once failed inside jax's cuDNN wrapper: "Unsupported dtype for inputs")."""
  assert A.resolve("auto", "gpu", dtype) == want
  assert A.resolve("auto", "tpu", dtype) == "splash"


def test_cudnn_on_fp32_is_a_clear_error():
  with pytest.raises(ValueError, match="takes bfloat16 or float16 inputs, got float32"):
    A.resolve("cudnn", "gpu", jnp.float32)


def test_fp32_attention_traces_for_a_gpu_mesh():
  """The model's attention call, traced for a GPU it does not have, in fp32: blockwise."""
  gpu = jax.sharding.AbstractDevice(device_kind="NVIDIA H200", num_cores=None, platform="gpu")
  mesh = jax.sharding.AbstractMesh((1,), ("tensor",), abstract_device=gpu)
  q = jax.ShapeDtypeStruct((1, 8, 2, 2, 4), jnp.float32)  # [B, T, K, G, H]
  kv = jax.ShapeDtypeStruct((1, 8, 2, 4), jnp.float32)  # [B, T, K, H]
  seg = jax.ShapeDtypeStruct((1, 8), jnp.int32)
  with jax.sharding.use_abstract_mesh(mesh):
    out = jax.eval_shape(A.attend, q, kv, kv, seg)
  assert out.shape == q.shape and out.dtype == jnp.float32


def test_platform_comes_from_the_mesh_being_traced_for():
  """No mesh: the default backend; a mesh: its devices' platform, even if not present here."""
  assert A.trace_platform() == jax.default_backend() == "cpu"
  tpu = jax.sharding.AbstractDevice(device_kind="TPU v5", num_cores=1, platform="tpu")
  mesh = jax.sharding.AbstractMesh((1,), ("tensor",), abstract_device=tpu)
  with jax.sharding.use_abstract_mesh(mesh):
    assert A.trace_platform() == "tpu" and A.resolve("auto") == "splash"
  with jax.set_mesh(S.make_mesh({"data": 8})):
    assert A.resolve("auto") == "blockwise"


@pytest.mark.parametrize("impl,platform", [("cudnn", "GPU"), ("splash", "TPU")])
def test_a_kernel_off_its_platform_is_a_clear_error(impl, platform):
  q, k, v, seg, _ = _inputs(1, 16, 1, 2, 8)
  with pytest.raises(ValueError, match=f"model.attention='{impl}' runs only on {platform}, "
                                       "but this step is compiled for 'cpu'"):
    A.attend(q, k, v, seg, impl)
