"""Routing replay in the MoE layer (`carr_jax.model.moe.route`, `Qwen3.hidden_and_aux(routes=)`).

Replaying the experts the router itself picks reproduces the unreplayed forward and gradients
exactly; replaying other experts gives the output of a gate worked out here by hand (the
router's probabilities of the replayed experts, renormalised, times those experts' SwiGLU), on
both MoE paths; the router still gets gradients.

  python -m pytest tests/carr_jax/test_routing_replay.py -q
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from carr_jax.model import moe
from carr_jax.model import qwen3 as M
from carr_jax.model.config import get_preset


def _setup(impl):
  cfg = get_preset("tiny_moe", vocab_size=512, moe_impl=impl)
  params = M.init_params(cfg, jax.random.key(0))
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (2, 9)), jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(9), (2, 9))
  segments = jnp.ones((2, 9), jnp.int32)
  return cfg, params, (tokens, positions, segments)


def _hidden(cfg, params, batch, routes=None):
  return M.Qwen3(cfg).apply({"params": params}, *batch, routes=routes,
                            method=M.Qwen3.hidden_and_aux)


@pytest.mark.parametrize("impl", ["ragged", "dense"])
def test_replaying_the_routers_own_choice_changes_nothing(impl):
  cfg, params, batch = _setup(impl)
  own = M.Qwen3(cfg).apply({"params": params}, *batch, method=M.Qwen3.routes)
  assert own.shape == (cfg.num_layers, 2, 9, cfg.num_experts_per_tok) and own.dtype == jnp.int32
  (h0, a0), (h1, a1) = _hidden(cfg, params, batch), _hidden(cfg, params, batch, own)
  np.testing.assert_array_equal(np.asarray(h0), np.asarray(h1))
  np.testing.assert_array_equal(np.asarray(a0), np.asarray(a1))

  def loss(p, routes):
    return jnp.sum(_hidden(cfg, p, batch, routes)[0] ** 2)
  g0, g1 = jax.grad(loss)(params, None), jax.grad(loss)(params, own)
  for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _swiglu(x, p, e):
  """One expert's SwiGLU on x [D] with the layer's stacked weights, in NumPy float64."""
  gate, up = x @ p["gate_proj"][e], x @ p["up_proj"][e]
  return (gate / (1.0 + np.exp(-gate)) * up) @ p["down_proj"][e]


@pytest.mark.parametrize("impl", ["ragged", "dense"])
def test_replayed_experts_give_the_hand_computed_gate(impl):
  cfg, params, _ = _setup(impl)
  layer = jax.tree.map(lambda a: a[0], params["layers"]["moe"])  # layer 0's MoE weights
  rng = np.random.default_rng(1)
  x = rng.standard_normal((1, 6, cfg.hidden_size)).astype(np.float32)
  own = moe.MoE(cfg).apply({"params": layer}, x, jnp.ones((1, 6), jnp.int32))[2]
  replay = (np.asarray(own) + 1) % cfg.num_experts  # every token's experts shifted by one
  y, _, used = moe.MoE(cfg).apply({"params": layer}, x, jnp.ones((1, 6), jnp.int32),
                                  jnp.asarray(replay))
  np.testing.assert_array_equal(np.asarray(used), replay)
  p = {k: np.asarray(v, np.float64) for k, v in layer.items()}
  for t in range(6):
    logits = x[0, t].astype(np.float64) @ p["router"]
    probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    gate = probs[replay[0, t]] / probs[replay[0, t]].sum()  # norm_topk_prob
    want = sum(g * _swiglu(x[0, t].astype(np.float64), p, e) for g, e in zip(gate, replay[0, t]))
    np.testing.assert_allclose(np.asarray(y[0, t]), want, atol=1e-5, rtol=0)
  ref = moe.MoE(cfg).apply({"params": layer}, x, jnp.ones((1, 6), jnp.int32))[0]
  assert float(jnp.max(jnp.abs(ref - y))) > 1e-3  # other experts: another output


def test_the_router_learns_under_replay():
  cfg, params, batch = _setup("ragged")
  own = M.Qwen3(cfg).apply({"params": params}, *batch, method=M.Qwen3.routes)
  shifted = (own + 1) % cfg.num_experts
  grad = jax.grad(lambda p: jnp.sum(_hidden(cfg, p, batch, shifted)[0] ** 2))(params)
  assert float(jnp.max(jnp.abs(grad["layers"]["moe"]["router"]))) > 0.0


def test_routes_need_a_mixture_of_experts():
  cfg = get_preset("tiny_dense", vocab_size=512)
  params = M.init_params(cfg, jax.random.key(0))
  batch = (jnp.zeros((1, 3), jnp.int32), jnp.arange(3)[None], jnp.ones((1, 3), jnp.int32))
  with pytest.raises(ValueError, match="mixture-of-experts"):
    _hidden(cfg, params, batch, jnp.zeros((cfg.num_layers, 1, 3, 2), jnp.int32))
  with pytest.raises(ValueError, match="dense model has no routes"):
    M.Qwen3(cfg).apply({"params": params}, *batch, method=M.Qwen3.routes)
