"""The jitted C-GRPO train step: micro-batch accumulation, sharding, old log-probs, metrics."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from carr_jax.model import sharding
from carr_jax.model.config import get_preset
from carr_jax.rl import loss as loss_lib
from carr_jax.rl import optim
from carr_jax.rl import packing
from carr_jax.rl import train_step as ts

CFG = get_preset("tiny_dense", vocab_size=256)
# Plain SGD with lr 1 in the equivalence tests: params_after - params_before == -gradient,
# so comparing parameters compares gradients. (Adam's first step is sign(g) wherever |g| is
# near eps, which would turn fp32 round-off in tiny gradients into O(lr) differences.)
SGD = optax.sgd(1.0)


def make_batch(rows=8, seq=16, seed=0):
  """Unpacked rows (one sequence each) with prompt/generated/observation masks."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, CFG.vocab_size, (rows, seq)).astype(np.int32)
  lengths = rng.integers(6, seq + 1, rows)
  segs = (np.arange(seq)[None] < lengths[:, None]).astype(np.int32)
  pos = np.where(segs > 0, np.arange(seq)[None], 0).astype(np.int32)
  targets = np.where(segs > 0, np.roll(tokens, -1, axis=1), 0)
  # Generated tokens: a random subset after a 3-token prompt, never the last token of a row.
  gen = (rng.random((rows, seq)) < 0.6) & (np.arange(seq)[None] >= 3)
  gen &= np.arange(seq)[None] < (lengths[:, None] - 1)
  adv = np.repeat(rng.standard_normal((rows, 1)), seq, axis=1) * segs
  old = np.where(gen, -rng.random((rows, seq)) * 5.0, 0.0)
  return {"tokens": tokens, "positions": pos, "segment_ids": segs, "targets": targets,
          "loss_mask": gen.astype(np.float32), "advantages": adv.astype(np.float32),
          "old_logprobs": old.astype(np.float32),
          "rollout_logprobs": (old + 0.01 * rng.standard_normal(old.shape)).astype(np.float32)}


def run_steps(mesh_shape, micro_batches, batch, steps=1, loss_cfg=loss_lib.LossConfig(),
              tx=SGD, loss_positions=False, on_policy=False, skip_zero_gradient=False):
  mesh = sharding.make_mesh(mesh_shape, jax.devices()[:int(np.prod(list(mesh_shape.values())))])
  state, shardings = ts.create_train_state(CFG, tx, mesh, seed=0)
  step_cfg = ts.StepConfig(micro_batches=micro_batches, loss_positions=loss_positions,
                           on_policy=on_policy, skip_zero_gradient=skip_zero_gradient)
  step = ts.make_train_step(CFG, loss_cfg, step_cfg, tx, mesh, shardings)
  metrics = []
  for _ in range(steps):
    state, m = step(state, batch)
    metrics.append(jax.device_get(m))
  return jax.device_get(state), metrics


def assert_trees_close(a, b, atol):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0)


def test_micro_batches_equal_one_big_batch():
  batch = make_batch()
  counts = batch["loss_mask"].reshape(2, 4, -1).swapaxes(0, 1).sum(axis=(1, 2))
  assert len(set(counts.tolist())) > 1  # slices really hold unequal numbers of tokens
  one, m1 = run_steps({"data": 1}, 1, batch)
  four, m4 = run_steps({"data": 1}, 4, batch)
  np.testing.assert_allclose(m1[0]["loss"], m4[0]["loss"], atol=1e-5, rtol=0)
  np.testing.assert_allclose(m1[0]["grad_norm"], m4[0]["grad_norm"], atol=1e-5, rtol=0)
  assert m1[0]["tokens"] == m4[0]["tokens"] == batch["loss_mask"].sum()
  assert_trees_close(one.params, four.params, 1e-5)


def test_sharded_step_equals_single_device():
  batch = make_batch()
  # The real AdamW for 2 steps; eps 1e-3 keeps its update a smooth function of the gradient
  # (with eps 1e-8 an entry with |g| ~ 1e-8 moves by ~lr on fp32 round-off alone).
  tx = optim.make_optimizer(optim.OptimConfig(learning_rate=1e-3, eps=1e-3))
  single, m1 = run_steps({"data": 1}, 2, batch, steps=2, tx=tx)
  sharded, m8 = run_steps({"data": 2, "fsdp": 2, "tensor": 2}, 2, batch, steps=2, tx=tx)
  for a, b in zip(m1, m8):
    for key in ("loss", "grad_norm", "entropy", "clip_low_frac", "clip_high_frac"):
      np.testing.assert_allclose(a[key], b[key], atol=1e-5, rtol=0)
  assert_trees_close(single.opt_state, sharded.opt_state, 1e-5)  # Adam moments: gradients
  assert_trees_close(single.params, sharded.params, 1e-5)


def test_leaving_zero_advantage_rows_out_with_the_full_divisor_changes_nothing():
  """skip_zero_gradient: rows 4-7 (advantage 0) left out, `loss_total` = the whole batch's
  loss tokens: the same loss and update as the whole batch; the subset's own token count as
  divisor (what leaving them out alone would do) is a different update."""
  batch = make_batch()
  batch["advantages"][4:] = 0.0
  part = {k: v[:4] for k, v in batch.items()}
  whole, m_whole = run_steps({"data": 2}, 2, batch)
  skipped, m_skip = run_steps({"data": 2}, 2, dict(part, loss_total=batch["loss_mask"].sum()),
                              skip_zero_gradient=True)
  np.testing.assert_allclose(m_skip[0]["loss"], m_whole[0]["loss"], atol=1e-5, rtol=0)
  np.testing.assert_allclose(m_skip[0]["grad_norm"], m_whole[0]["grad_norm"], atol=1e-5, rtol=0)
  assert_trees_close(skipped.params, whole.params, 1e-5)
  own, _ = run_steps({"data": 2}, 2, part)
  gap = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
            for a, b in zip(jax.tree.leaves(own.params), jax.tree.leaves(whole.params)))
  assert gap > 1e-3


def test_the_trainer_leaves_out_zero_gradient_groups_but_never_all():
  from carr_jax.jobs.rl_train import trained_groups
  usable = np.array([[True] * 2, [False] * 2, [True] * 2, [True] * 2])  # [P=4, G=2]
  zero = np.array([True, False, False, True])
  np.testing.assert_array_equal(trained_groups(usable, zero, skip=False), usable)
  np.testing.assert_array_equal(trained_groups(usable, zero, skip=True)[:, 0],
                                [False, False, True, False])
  every_zero = trained_groups(usable, np.ones(4, bool), skip=True)  # the optimizer still steps
  np.testing.assert_array_equal(every_zero[:, 0], [True, False, False, False])
  assert not trained_groups(np.zeros_like(usable), zero, skip=True).any()


def test_leaving_groups_out_is_refused_where_zero_advantage_tokens_have_a_gradient():
  from carr_jax.jobs import components
  from configs import base
  config = base.get_config()
  config.batch.skip_zero_gradient = True
  assert components.step_config(config).skip_zero_gradient
  config.loss.kl_coef = 0.01  # a KL term pulls every token, advantage 0 or not
  with pytest.raises(ValueError, match="skip_zero_gradient keeps the gradient only"):
    components.step_config(config)


def test_loss_matches_direct_computation_and_masked_tokens_get_no_gradient():
  """The step's loss equals Eq. 15 evaluated on the model's own log-probs of the batch."""
  batch = make_batch()
  mesh = sharding.make_mesh({"data": 1}, jax.devices()[:1])
  tx = SGD
  state, shardings = ts.create_train_state(CFG, tx, mesh, seed=0)
  logprob_fn = ts.make_logprob_fn(CFG, ts.StepConfig(), mesh, shardings.params)
  logp = np.asarray(logprob_fn(state.params, batch))
  mask = batch["loss_mask"] > 0
  ratio = np.exp(logp - batch["old_logprobs"])
  adv = batch["advantages"]
  term = -np.minimum(ratio * adv, np.clip(ratio, 0.8, 1.28) * adv)
  expected = term[mask].sum() / mask.sum()
  step = ts.make_train_step(CFG, loss_lib.LossConfig(), ts.StepConfig(), tx, mesh, shardings)
  _, metrics = step(state, batch)
  np.testing.assert_allclose(metrics["loss"], expected, atol=1e-5, rtol=0)

  # Changing tokens' advantages/old log-probs where the mask is 0 changes nothing.
  noisy = dict(batch, advantages=np.where(mask, adv, 1e3).astype(np.float32),
               old_logprobs=np.where(mask, batch["old_logprobs"], -50.0).astype(np.float32))
  state2, _ = ts.create_train_state(CFG, tx, mesh, seed=0)
  _, metrics2 = step(state2, noisy)
  np.testing.assert_allclose(metrics2["loss"], metrics["loss"], atol=0, rtol=0)
  np.testing.assert_allclose(metrics2["grad_norm"], metrics["grad_norm"], atol=0, rtol=0)


def test_on_policy_first_step_has_unit_ratio_and_no_clipping():
  """With old log-probs recomputed by the trainer, ratio == 1: approx KL 0, nothing clipped."""
  batch = make_batch()
  mesh = sharding.make_mesh({"data": 2}, jax.devices()[:2])
  tx = SGD
  state, shardings = ts.create_train_state(CFG, tx, mesh, seed=0)
  logprob_fn = ts.make_logprob_fn(CFG, ts.StepConfig(), mesh, shardings.params)
  batch["old_logprobs"] = np.asarray(logprob_fn(state.params, batch))
  step = ts.make_train_step(CFG, loss_lib.LossConfig(), ts.StepConfig(micro_batches=2), tx,
                            mesh, shardings)
  state, m = step(state, batch)
  assert abs(float(m["approx_kl"])) < 1e-6
  assert float(m["clip_low_frac"]) == float(m["clip_high_frac"]) == 0.0
  assert int(state.step) == 1 and float(m["grad_norm"]) > 0


@pytest.mark.parametrize("loss_positions", [False, True])
def test_on_policy_step_equals_the_step_fed_a_recomputation(loss_positions):
  """`StepConfig.on_policy` (the batch has no old log-probs; the step's own forward gives
  them, gradient stopped) = the step fed a separate recomputation before the update
  (`make_logprob_fn`): the same loss, metrics and gradient, icepop weights included."""
  batch = make_batch()
  if loss_positions:
    batch["loss_index"], batch["loss_valid"] = packing.loss_positions(batch["loss_mask"] > 0, 4)
  mesh = sharding.make_mesh({"data": 2}, jax.devices()[:2])
  state, shardings = ts.create_train_state(CFG, SGD, mesh, seed=0)
  logprob_fn = ts.make_logprob_fn(CFG, ts.StepConfig(loss_positions=loss_positions), mesh,
                                  shardings.params)
  fed = dict(batch, old_logprobs=np.asarray(logprob_fn(state.params, batch)))
  own = {k: v for k, v in batch.items() if k != "old_logprobs"}
  icepop = loss_lib.LossConfig(importance_sampling="icepop", is_low=0.9, is_high=1.1)
  assert "old_logprobs" not in ts.step_batch_keys(icepop, ts.StepConfig(on_policy=True))
  runs = [run_steps({"data": 2}, 2, b, loss_cfg=icepop, loss_positions=loss_positions,
                    on_policy=on) for b, on in ((fed, False), (own, True))]
  (state_fed, [m_fed]), (state_own, [m_own]) = runs
  assert float(m_own["is_zeroed_frac"]) > 0  # the icepop bounds bite on some tokens
  for key in ("loss", "policy_loss", "entropy", "is_weight_mean", "is_zeroed_frac"):
    np.testing.assert_allclose(m_own[key], m_fed[key], rtol=1e-5, atol=1e-7, err_msg=key)
  assert float(m_own["approx_kl"]) == 0.0 and float(m_own["clip_low_frac"]) == 0.0
  assert_trees_close(state_own.params, state_fed.params, atol=1e-5)  # SGD: the gradients


def test_kl_penalty_needs_reference_logprobs():
  batch = make_batch()
  with pytest.raises(KeyError, match="ref_logprobs"):
    run_steps({"data": 1}, 1, batch, loss_cfg=loss_lib.LossConfig(kl_coef=0.1))
  batch["ref_logprobs"] = batch["old_logprobs"]
  _, m = run_steps({"data": 1}, 1, batch, loss_cfg=loss_lib.LossConfig(kl_coef=0.1))
  assert np.isfinite(m[0]["loss"]) and m[0]["kl_ref"] != 0.0


def test_warmup_and_clipping_optimizer():
  opt = optim.OptimConfig(learning_rate=1.0, warmup_steps=4, grad_clip_norm=0.5)
  tx = optim.make_optimizer(opt)
  params = {"w": jnp.ones(3), "norm": {"scale": jnp.ones(3)}}
  state = tx.init(params)
  grads = {"w": jnp.full(3, 10.0), "norm": {"scale": jnp.full(3, 10.0)}}
  updates, _ = tx.update(grads, state, params)
  # Step 0 of a linear warmup has learning rate 0: no update at all.
  assert float(jnp.abs(updates["w"]).max()) == 0.0


def test_warmup_stable_decay_schedule():
  """Linear warmup to the peak, constant, then linear to 0 over decay_steps, 0 after."""
  lr = optim.learning_rate(optim.OptimConfig(learning_rate=2.0, warmup_steps=4, decay_from=10,
                                       decay_steps=4))
  got = [float(lr(i)) for i in (0, 2, 4, 9, 10, 11, 13, 14, 20)]
  np.testing.assert_allclose(got, [0.0, 1.0, 2.0, 2.0, 2.0, 1.5, 0.5, 0.0, 0.0], atol=1e-6)
  assert optim.learning_rate(optim.OptimConfig(learning_rate=2.0)) == 2.0
  with pytest.raises(ValueError, match="inside the warmup"):
    optim.learning_rate(optim.OptimConfig(warmup_steps=4, decay_from=2, decay_steps=4))


def test_packed_and_unpacked_batches_give_the_same_step():
  """Trajectories packed several to a row == one per row (loss, metrics and update)."""
  rng = np.random.default_rng(3)
  trajs, advantages = [], []
  for length in (9, 14, 6, 11, 13, 7, 10, 12):
    mask = (rng.random(length) < 0.6).astype(int)
    mask[0] = 0
    trajs.append({"token_ids": rng.integers(0, CFG.vocab_size, length).tolist(),
                  "loss_mask": mask.tolist(),
                  "rollout_logprobs": np.where(mask, -rng.random(length) * 3, 0.0).tolist()})
    advantages.append(float(rng.standard_normal()))

  def finish(b):
    b["loss_mask"] = b["loss_mask"].astype(np.float32)
    b["old_logprobs"] = b["rollout_logprobs"]
    return b
  packed = finish(packing.pack_trajectories(
      trajs, advantages, packing.PackingConfig(row_lengths=(48,), row_multiple=2)).arrays())
  rows = [packing.pack_trajectories([t], [a], packing.PackingConfig(row_lengths=(16,))).arrays()
          for t, a in zip(trajs, advantages)]  # one trajectory per row
  unpacked = finish({k: np.concatenate([r[k] for r in rows]) for k in rows[0]})
  assert (packed["segment_ids"].max(axis=1) > 1).any()  # several segments share a row
  assert unpacked["segment_ids"].max() == 1
  state_p, m_p = run_steps({"data": 2}, 1, packed)
  state_u, m_u = run_steps({"data": 2}, 1, unpacked)
  for key in ("loss", "tokens", "entropy", "clip_low_frac", "clip_high_frac", "grad_norm"):
    np.testing.assert_allclose(m_p[0][key], m_u[0][key], atol=1e-5, rtol=0)
  assert_trees_close(state_p.params, state_u.params, 1e-5)


def test_logits_only_at_loss_positions_change_nothing():
  """Gathering the loss slots ([R, K] index) == logits at every slot: log-probs there, the
  loss, every metric and the update, sharded over 2x2x2 with micro-batches and the KL term."""
  batch = make_batch(seq=40)
  batch["ref_logprobs"] = batch["rollout_logprobs"] - 0.1
  batch["loss_index"], batch["loss_valid"] = packing.loss_positions(batch["loss_mask"] > 0, 8)
  assert batch["loss_index"].shape[1] < 40  # really fewer slots than the rows
  mesh = sharding.make_mesh({"data": 2}, jax.devices()[:2])
  state, shardings = ts.create_train_state(CFG, SGD, mesh, seed=0)
  full = ts.make_logprob_fn(CFG, ts.StepConfig(), mesh, shardings.params)(state.params, batch)
  gathered = ts.make_logprob_fn(CFG, ts.StepConfig(loss_positions=True), mesh,
                                shardings.params)(state.params, batch)
  mask = batch["loss_mask"] > 0
  np.testing.assert_allclose(np.asarray(gathered)[mask], np.asarray(full)[mask], atol=1e-5,
                             rtol=0)
  assert (np.asarray(gathered)[~mask] == 0).all()
  loss_cfg = loss_lib.LossConfig(kl_coef=0.1)
  mesh_shape = {"data": 2, "fsdp": 2, "tensor": 2}
  ref, m_ref = run_steps(mesh_shape, 2, batch, loss_cfg=loss_cfg)
  got, m_got = run_steps(mesh_shape, 2, batch, loss_cfg=loss_cfg, loss_positions=True)
  assert set(m_ref[0]) == set(m_got[0])
  for key in m_ref[0]:
    np.testing.assert_allclose(m_got[0][key], m_ref[0][key], atol=1e-5, rtol=0, err_msg=key)
  assert_trees_close(got.params, ref.params, 1e-5)

