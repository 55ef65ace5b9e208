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


def test_packing_puts_each_trajectorys_routes_at_its_slots():
  """Slot j of a segment holds token x_j as input and the experts routed at position j; a
  trajectory without routes (or too few) is refused naming it; the JSON form packs alike."""
  from carr_jax.rl import packing
  from rollout import routes as routes_lib
  rng = np.random.default_rng(0)
  trajs = []
  for n in (5, 3):
    ids = rng.integers(0, 50, n).tolist()
    trajs.append({"token_ids": ids, "loss_mask": [0] + [1] * (n - 1),
                  "rollout_logprobs": [0.0] * n,
                  "routed_experts": rng.integers(0, 8, (n - 1, 2, 2)).astype(np.uint8)})
  trajs[1]["routed_experts"] = routes_lib.to_json(trajs[1]["routed_experts"])
  cfg = packing.PackingConfig(row_lengths=(8,), routes=(2, 2))
  packed = packing.pack_trajectories(trajs, [1.0, -1.0], cfg)
  assert packed.routes.shape == (1, 8, 2, 2) and "routes" in packed.arrays()
  np.testing.assert_array_equal(packed.routes[0, :4], trajs[0]["routed_experts"])
  np.testing.assert_array_equal(packed.routes[0, 4:6],
                                routes_lib.from_json(trajs[1]["routed_experts"]))
  assert not packed.routes[0, 6:].any()  # padding
  del trajs[0]["routed_experts"]
  with pytest.raises(ValueError, match=r"trajectory 0: routed_experts None"):
    packing.pack_trajectories(trajs, [1.0, -1.0], cfg)


def _replay_step(routes_of):
  """One SGD step of tiny_moe on a data x expert mesh (rows, and so routes, split over 4
  devices) with
  `routes_of(cfg, params, batch)` replayed (None: no replay) -> (params after, metrics)."""
  import optax

  from carr_jax.model import sharding
  from carr_jax.rl import loss as loss_lib
  from carr_jax.rl import train_step as ts
  cfg = get_preset("tiny_moe", vocab_size=256)
  rng = np.random.default_rng(1)
  tokens = rng.integers(0, cfg.vocab_size, (4, 12)).astype(np.int32)
  batch = {"tokens": tokens, "positions": np.broadcast_to(np.arange(12), (4, 12)).copy(),
           "segment_ids": np.ones((4, 12), np.int32), "targets": np.roll(tokens, -1, 1),
           "loss_mask": (np.arange(12)[None] >= 4).repeat(4, 0).astype(np.float32),
           "advantages": np.repeat(rng.standard_normal((4, 1)), 12, 1).astype(np.float32),
           "rollout_logprobs": np.zeros((4, 12), np.float32)}
  mesh = sharding.make_mesh({"data": 2, "fsdp": 1, "expert": 2, "tensor": 1},
                            jax.devices()[:4])
  tx = optax.sgd(1.0)
  state, shardings = ts.create_train_state(cfg, tx, mesh, seed=0)  # init on the mesh too
  routes = routes_of(cfg, jax.device_get(state.params), batch)
  step_cfg = ts.StepConfig(on_policy=True, routing_replay=routes is not None)
  if routes is not None:
    batch["routes"] = routes
  step = ts.make_train_step(cfg, loss_lib.LossConfig(), step_cfg, tx, mesh, shardings)
  state, metrics = step(state, batch)
  return jax.device_get(state.params), jax.device_get(metrics)


def _own_routes(cfg, params, batch):
  """[R, S, L, k]: the experts the router itself picks (what a same-precision engine chose)."""
  own = M.Qwen3(cfg).apply({"params": params}, batch["tokens"], batch["positions"],
                           batch["segment_ids"], method=M.Qwen3.routes)
  return np.moveaxis(np.asarray(own), 0, 2)


def test_the_sharded_train_step_replays_routes():
  """Replaying the router's own choice is the unreplayed step (loss and updated parameters,
  fp32: 1e-5) and no route differs; replaying other experts changes the update (the on-policy
  loss value is -mean(A) whatever the model, so the parameters tell) and every route differs
  (each set shifted by one expert: never the same set of 2 among 8)."""
  plain, m0 = _replay_step(lambda *_: None)
  replayed, m1 = _replay_step(_own_routes)
  np.testing.assert_allclose(m1["loss"], m0["loss"], atol=1e-5, rtol=0)
  for x, y in zip(jax.tree.leaves(replayed), jax.tree.leaves(plain)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-5, rtol=0)
  assert m0["replay_route_mismatch"] == m1["replay_route_mismatch"] == 0.0
  shifted, m2 = _replay_step(lambda c, p, b: (_own_routes(c, p, b) + 1) % c.num_experts)
  moved = max(float(np.abs(np.asarray(x) - np.asarray(y)).max())
              for x, y in zip(jax.tree.leaves(shifted), jax.tree.leaves(plain)))
  assert moved > 1e-4 and m2["replay_route_mismatch"] == 1.0


def test_the_engine_returns_the_routes_it_sampled_with():
  """The in-process engine with `record_routes` returns, from `routes_from` on, the experts of
  every position the trainer computes (prompt, then each output token but the last): the
  same choice the model's own forward makes on the whole sequence (at least 99% of the
  (position, layer) routes: prefill, decode and the full forward round differently)."""
  import asyncio

  from carr_jax.model.engine import JaxEngine
  from rollout.engines.base import SamplingParams
  cfg, params, _ = _setup("ragged")
  prompt = list(range(3, 14))
  sampling = SamplingParams(temperature=1.0, max_new_tokens=6, stop_token_ids=())

  async def run(routes_from):
    engine = JaxEngine(params, cfg, max_batch=2, record_routes=True)
    try:
      return await engine.generate(prompt, sampling, rid="r", routes_from=routes_from)
    finally:
      await engine.close()
  whole, tail = asyncio.run(run(0)), asyncio.run(run(4))
  seq = prompt + whole.output_ids[:-1]
  assert whole.routed_experts.shape == (len(seq), cfg.num_layers, cfg.num_experts_per_tok)
  np.testing.assert_array_equal(tail.routed_experts, whole.routed_experts[4:])
  ids = jnp.asarray([seq], jnp.int32)
  own = M.Qwen3(cfg).apply({"params": params}, ids, jnp.arange(len(seq))[None],
                           jnp.ones_like(ids), method=M.Qwen3.routes)  # [L, 1, T, k]
  own = np.sort(np.moveaxis(np.asarray(own)[:, 0], 0, 1), axis=-1)  # [T, L, k], as sets
  same = (np.sort(whole.routed_experts, axis=-1) == own).all(axis=-1)
  assert same.mean() >= 0.99, same.mean()
  with pytest.raises(ValueError, match="record_routes"):
    JaxEngine(params, get_preset("tiny_dense", vocab_size=512), record_routes=True)

  async def unrecorded():
    engine = JaxEngine(params, cfg, max_batch=2)
    try:
      return await engine.generate(prompt, sampling, rid="r", routes_from=0)
    finally:
      await engine.close()
  with pytest.raises(ValueError, match=r"routes_from=0 needs record_routes=True and a position "
                     r"in \[0, 11\]"):
    asyncio.run(unrecorded())


def test_a_multi_turn_episode_holds_the_routes_of_every_position_the_trainer_computes():
  """The agent asks each turn for the positions it has not seen (routes_from), so after two
  turns and a tool output between them the record's routes cover positions 0 .. L-2 exactly
  (rollout.routes.check passes), stored as uint8; the packer reads them back."""
  import asyncio

  from carr_jax.model.engine import JaxEngine
  from carr_jax.rl import packing
  from rollout import agent
  from rollout import routes as routes_lib
  from rollout.engines.base import SamplingParams
  from rollout.trajectory import Trajectory
  cfg, params, _ = _setup("ragged")
  sampling = SamplingParams(temperature=1.0, max_new_tokens=4, stop_token_ids=())

  async def episode():
    engine = JaxEngine(params, cfg, max_batch=2, record_routes=True)
    traj = Trajectory.start("q", 0, list(range(3, 12)), [])
    try:
      for turn in range(2):
        result = await agent._generate(engine, traj, sampling, f"q/0/{turn}")
        assert result is not None, traj.error
        traj.add_generated(result.output_ids, result.logprobs, result.weight_version)
        if turn == 0:
          traj.add_observation([20, 21, 22])  # a tool output between the turns
    finally:
      await engine.close()
    traj.finish("completed")
    return traj.to_record()
  record = asyncio.run(episode())
  assert routes_lib.check(record, cfg.num_layers, cfg.num_experts_per_tok,
                          cfg.num_experts) is None
  assert record["routed_experts"]["dtype"] == "|u1"
  packed = packing.pack_trajectories([record], [1.0], packing.PackingConfig(
      row_lengths=(64,), routes=(cfg.num_layers, cfg.num_experts_per_tok)))
  n = len(record["token_ids"]) - 1
  np.testing.assert_array_equal(packed.routes[0, :n], routes_lib.from_json(
      record["routed_experts"]))
