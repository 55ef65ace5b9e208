"""`moe_impl="expert_parallel"` (`carr_jax.model.moe._experts_expert_parallel`) against the
unsharded ragged path: the same outputs and gradients (parameters and inputs) at fp32, on CPU
meshes whose `expert` axis is 2 or 4, with and without replayed routes, and with every slot
sent to one shard's experts (nothing is dropped). "ragged" and "dense" on the same meshes,
their expert weights sharded as the parameters are (gathered inside `shard_map`, so their
gradient is reduce-scattered back), against the same reference.

  python -m pytest tests/carr_jax/test_moe_expert_parallel.py -q
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from carr_jax.model import moe
from carr_jax.model import qwen3 as M
from carr_jax.model import sharding as S
from carr_jax.model.config import get_preset

MESHES = [{"data": 2, "expert": 2, "tensor": 2}, {"fsdp": 2, "expert": 4}]


def _layer(impl):
  """tiny_moe (8 experts, top-2) with layer-0-shaped MoE weights scaled so that x ~ N(0, 1)
  gives router logits and outputs of order 1 (at init's 0.02 the outputs are ~1e-3, too small
  for a 1e-5 check to mean anything)."""
  cfg = get_preset("tiny_moe", vocab_size=512, moe_impl=impl)
  d, f = cfg.hidden_size, cfg.moe_intermediate_size
  params = M.init_params(cfg, jax.random.key(0))
  layer = jax.tree.map(lambda a: a[0], params["layers"]["moe"])  # init std 0.02
  scale = {"router": 1.0 / d**0.5, "gate_proj": 1.0 / d**0.5, "up_proj": 1.0 / d**0.5,
           "down_proj": 1.0 / f**0.5}
  return cfg, {k: v * (scale[k] / 0.02) for k, v in layer.items()}


def _inputs(cfg, b=8, t=6, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((b, t, cfg.hidden_size)).astype(np.float32)
  segments = (np.arange(t)[None] < rng.integers(2, t + 1, b)[:, None]).astype(np.int32)
  return jnp.asarray(x), jnp.asarray(segments)


def _distinct_routes(cfg, b, t, seed=1):
  """[b, t, k] random distinct experts per token (what a rollout engine replays)."""
  rng = np.random.default_rng(seed)
  picks = [rng.permutation(cfg.num_experts)[:cfg.num_experts_per_tok] for _ in range(b * t)]
  return jnp.asarray(np.stack(picks).reshape(b, t, -1), jnp.int32)


def _value_and_grads(cfg, layer, x, segments, routes):
  """The MoE layer's output, and grads w.r.t. weights and x of a random projection of it,
  averaged over tokens as a loss is (so the weight gradients are of order 1, not of order
  B*T, and fp32's 1e-5 is the right tolerance for them)."""
  rng = np.random.default_rng(2)
  probe = jnp.asarray(rng.standard_normal(x.shape) / (x.shape[0] * x.shape[1]), jnp.float32)

  def loss(layer, x):
    y, stats, _ = moe.MoE(cfg).apply({"params": layer}, x, segments, routes)
    aux = stats[0][0] * stats[1][0] / jnp.sum(segments) ** 2  # router stats reach it too
    return jnp.sum(probe * y) + aux, y
  (_, y), grads = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(layer, x)
  return y, grads


def _on_mesh(cfg, layer, x, segments, routes, axes):
  mesh = S.make_mesh(axes)
  specs = {"router": P("fsdp", None), "gate_proj": P("expert", "fsdp", "tensor"),
           "up_proj": P("expert", "fsdp", "tensor"), "down_proj": P("expert", "tensor", "fsdp")}
  layer = {k: jax.device_put(v, NamedSharding(mesh, specs[k])) for k, v in layer.items()}
  put_rows = lambda a: jax.device_put(a, S.batch_sharding(mesh, a.ndim))  # noqa: E731
  routes = None if routes is None else put_rows(routes)
  with jax.set_mesh(mesh):
    return jax.jit(lambda *a: _value_and_grads(cfg, *a, routes))(
        layer, put_rows(x), put_rows(segments))


def _assert_same(got, want):
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=0)


@pytest.mark.parametrize("axes", MESHES)
@pytest.mark.parametrize("replay", ["none", "distinct", "one_shard"])
def test_expert_parallel_equals_the_unsharded_ragged_path(axes, replay):
  cfg, layer = _layer("expert_parallel")
  x, segments = _inputs(cfg)
  b, t = segments.shape
  routes = {"none": None, "distinct": _distinct_routes(cfg, b, t),
            # every slot to experts 0 and 1: all on the first expert shard (the worst case)
            "one_shard": jnp.broadcast_to(jnp.arange(2, dtype=jnp.int32), (b, t, 2))}[replay]
  want = _value_and_grads(cfg.replace(moe_impl="ragged"), layer, x, segments, routes)
  got = _on_mesh(cfg, layer, x, segments, routes, axes)
  assert float(jnp.max(jnp.abs(want[1][1]))) > 1e-2  # the input gradient is not trivially 0
  _assert_same(got, want)


@pytest.mark.parametrize("axes", MESHES)
@pytest.mark.parametrize("impl", ["ragged", "dense"])
def test_gathering_experts_on_a_mesh_equals_the_unsharded_ragged_path(axes, impl):
  cfg, layer = _layer(impl)
  x, segments = _inputs(cfg)
  want = _value_and_grads(cfg.replace(moe_impl="ragged"), layer, x, segments, None)
  _assert_same(_on_mesh(cfg, layer, x, segments, None, axes), want)


@pytest.mark.parametrize("impl", ["ragged", "expert_parallel"])
def test_the_expert_weights_gradient_is_reduce_scattered(impl):
  """No all-reduce of a gathered expert weight: its gradient leaves `shard_map` as a
  reduce-scatter over the axes that shard it, summed whole over `data` only. Per-device shapes
  in XLA:CPU's compiled program: [E, D, F] = [8, 64, 32] is [4, 32, 32] on a device (E over
  `expert`, D over `fsdp`); "expert_parallel" gathers D only ([4, 64, 32])."""
  cfg, layer = _layer(impl)
  x, segments = _inputs(cfg)
  mesh = S.make_mesh({"data": 2, "fsdp": 2, "expert": 2})
  put_rows = lambda a: jax.device_put(a, S.batch_sharding(mesh, a.ndim))  # noqa: E731
  with jax.set_mesh(mesh):
    hlo = jax.jit(lambda *a: _value_and_grads(cfg, *a, None)).lower(
        layer, put_rows(x), put_rows(segments)).compile().as_text()
  all_reduces = [line for line in hlo.splitlines() if " all-reduce(" in line]
  assert " reduce-scatter(" in hlo
  gathered = ("[8,64,32]", "[8,32,64]", "[4,64,32]", "[4,32,64]")
  assert not [line for line in all_reduces if any(shape in line for shape in gathered)]
  assert [line for line in all_reduces if "f32[4,32,32]" in line]  # the sum over `data`


def test_expert_parallel_without_a_mesh_is_the_ragged_path():
  cfg, layer = _layer("expert_parallel")
  x, segments = _inputs(cfg, b=2)
  want = _value_and_grads(cfg.replace(moe_impl="ragged"), layer, x, segments, None)
  _assert_same(_value_and_grads(cfg, layer, x, segments, None), want)


@pytest.mark.slow  # the whole model's step on a mesh: the layer tests above run by default
def test_the_model_with_expert_parallel_moe_on_a_mesh_equals_one_device():
  """The whole forward and parameter gradients, parameters placed by sharding.PARAM_RULES."""
  cfg = get_preset("tiny_moe", vocab_size=512, moe_impl="expert_parallel")
  params = M.init_params(cfg, jax.random.key(0))
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (8, 12)), jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(12), (8, 12))
  segments = jnp.ones((8, 12), jnp.int32)

  def loss(p, tokens, positions, segments):
    logits = M.forward_logits(p, cfg, tokens, positions, segments)
    return jnp.mean(jax.nn.log_softmax(logits)[..., 0])
  want = jax.value_and_grad(loss)(params, tokens, positions, segments)
  mesh = S.make_mesh({"data": 2, "expert": 4})
  sharded = jax.device_put(params, S.param_shardings(params, mesh))
  batch = jax.device_put((tokens, positions, segments), S.batch_sharding(mesh))
  with jax.set_mesh(mesh):
    got = jax.jit(jax.value_and_grad(loss))(sharded, *batch)
  _assert_same(got, want)


def test_an_unknown_moe_impl_is_an_error():
  cfg, layer = _layer("ragged")
  x, segments = _inputs(cfg, b=1)
  with pytest.raises(ValueError, match="moe_impl must be one of"):
    moe.MoE(cfg.replace(moe_impl="all_to_all")).apply({"params": layer}, x, segments)
