"""Tests of carr_jax/rl/loss.py against an independent float64 NumPy transcription of Eq. 15.

The NumPy side below is written from the paper's formula, with its gradient with respect
to the token log-probs derived by hand (checked once against central finite differences).
Tolerances: 1e-5 for losses and gradients (fp32 JAX vs float64 NumPy).
Run: .venv/bin/python -m pytest tests/carr_jax/test_loss.py -q
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from carr_jax.rl import loss as L

TOL = 1e-5


# ---------------------------------------------------------------- NumPy reference (float64)
def np_eq15(logp, old, adv, mask, *, eps_low=0.2, eps_high=0.28, rollout=None, is_low=0.5,
            is_high=2.0, ref=None, kl_coef=0.0, kl="k3"):
  """Returns (loss, d loss / d logp) of the masked token-mean of Eq. 15 (minimized)."""
  logp, old, adv = (np.asarray(x, np.float64) for x in (logp, old, adv))
  m = np.asarray(mask, bool)
  n = m.sum()
  rho = np.exp(np.where(m, logp - old, 0.0))
  a = np.where(m, adv, 0.0)
  unclipped = rho * a
  clipped = np.clip(rho, 1 - eps_low, 1 + eps_high) * a
  # d/dlogp of -min(rho A, clip(rho) A): -rho A where the unclipped term is the min, else 0
  # (the clipped term is constant in rho wherever it is the strict min).
  per = -np.minimum(unclipped, clipped)
  dper = np.where(unclipped <= clipped, -rho * a, 0.0)
  if rollout is not None:
    w = np.exp(np.where(m, old - np.asarray(rollout, np.float64), 0.0))
    w = np.where((w >= is_low) & (w <= is_high), w, 0.0)
    per, dper = per * w, dper * w
  if kl_coef:
    d = np.where(m, np.asarray(ref, np.float64) - logp, 0.0)  # log pi_ref / pi
    if kl == "k1":
      per, dper = per + kl_coef * (-d), dper + kl_coef * 1.0
    else:  # k3 = e^d - 1 - d; d d / d logp = -1
      per, dper = per + kl_coef * (np.exp(d) - 1 - d), dper + kl_coef * (1 - np.exp(d))
  return np.sum(np.where(m, per, 0.0)) / n, np.where(m, dper, 0.0) / n


def test_numpy_reference_gradient_matches_finite_differences():
  rng = np.random.default_rng(0)
  x = _inputs(rng)
  kw = dict(rollout=x["rollout"], ref=x["ref"], kl_coef=0.1, kl="k3")
  _, g = np_eq15(x["logp"], x["old"], x["adv"], x["mask"], **kw)
  h = 1e-6
  for idx in [(0, 1), (1, 3), (2, 7), (0, 10)]:
    up, dn = x["logp"].copy(), x["logp"].copy()
    up[idx] += h
    dn[idx] -= h
    fd = (np_eq15(up, x["old"], x["adv"], x["mask"], **kw)[0]
          - np_eq15(dn, x["old"], x["adv"], x["mask"], **kw)[0]) / (2 * h)
    np.testing.assert_allclose(g[idx], fd, rtol=1e-6, atol=1e-9)


# ---------------------------------------------------------------- helpers
def _inputs(rng, b=3, t=17):
  mask = rng.uniform(size=(b, t)) < 0.7
  mask[:, 0] = False  # prompts exist; and at least one masked position per row
  mask[0, 1] = True
  adv = np.repeat(rng.normal(size=(b, 1)), t, axis=1)  # one advantage per row
  adv[:, t // 2:] *= -1.0  # packed rows hold several trajectories: mixed signs in a row
  old = -rng.uniform(0.05, 3.0, size=(b, t))
  logp = old + rng.normal(scale=0.4, size=(b, t))  # spreads rho over both clip regions
  rollout = old + rng.normal(scale=0.5, size=(b, t))
  ref = logp + rng.normal(scale=0.3, size=(b, t))
  ent = rng.uniform(0, 5, size=(b, t))
  return dict(logp=logp, old=old, adv=adv, mask=mask, rollout=rollout, ref=ref, ent=ent)


def _jax_loss_and_grad(x, cfg, *, rollout=False, ref=False):
  def f(logp):
    sums = L.token_loss_sums(
        logp, jnp.asarray(x["old"], jnp.float32), jnp.asarray(x["adv"], jnp.float32),
        jnp.asarray(x["mask"]), jnp.asarray(x["ent"], jnp.float32),
        rollout_logprobs=jnp.asarray(x["rollout"], jnp.float32) if rollout else None,
        ref_logprobs=jnp.asarray(x["ref"], jnp.float32) if ref else None, cfg=cfg)
    return sums.loss / sums.tokens, sums
  (loss, sums), grad = jax.jit(jax.value_and_grad(f, has_aux=True))(
      jnp.asarray(x["logp"], jnp.float32))
  return float(loss), np.asarray(grad), sums


def _np_rho(x):
  return np.exp(x["logp"] - x["old"])


# ---------------------------------------------------------------- one test per branch
def test_plain_clip_both_sides():
  x = _inputs(np.random.default_rng(1))
  loss, grad, sums = _jax_loss_and_grad(x, L.LossConfig())
  ref_loss, ref_grad = np_eq15(x["logp"], x["old"], x["adv"], x["mask"])
  np.testing.assert_allclose(loss, ref_loss, atol=TOL, rtol=0)
  np.testing.assert_allclose(grad, ref_grad, atol=TOL, rtol=0)
  m = L.finalize(sums)
  np.testing.assert_allclose(float(m.policy_loss), ref_loss, atol=TOL)
  assert float(m.is_weight_mean) == 1.0 and float(m.is_zeroed_frac) == 0.0


def test_clip_low_active():
  x = _inputs(np.random.default_rng(2))
  rho, a, mk = _np_rho(x), x["adv"], x["mask"]
  expect = mk & (a < 0) & (rho < 0.8)
  assert expect.sum() >= 3, "fixture must exercise the low clip"
  loss, grad, sums = _jax_loss_and_grad(x, L.LossConfig(eps_low=0.2, eps_high=0.28))
  ref_loss, ref_grad = np_eq15(x["logp"], x["old"], a, mk, eps_low=0.2, eps_high=0.28)
  np.testing.assert_allclose(loss, ref_loss, atol=TOL, rtol=0)
  np.testing.assert_allclose(grad, ref_grad, atol=TOL, rtol=0)
  assert float(sums.clip_low) == expect.sum()
  np.testing.assert_array_equal(grad[expect], 0.0)  # clipped tokens pass no gradient


def test_clip_high_active_and_asymmetric():
  x = _inputs(np.random.default_rng(3))
  rho, a, mk = _np_rho(x), x["adv"], x["mask"]
  # Tokens with 1.2 < rho <= 1.28 and A > 0 are clipped only under a symmetric 0.2 clip.
  expect = mk & (a > 0) & (rho > 1.28)
  assert expect.sum() >= 3
  loss, grad, sums = _jax_loss_and_grad(x, L.LossConfig(eps_low=0.2, eps_high=0.28))
  ref_loss, ref_grad = np_eq15(x["logp"], x["old"], a, mk, eps_low=0.2, eps_high=0.28)
  sym_loss, _ = np_eq15(x["logp"], x["old"], a, mk, eps_low=0.2, eps_high=0.2)
  assert abs(sym_loss - ref_loss) > 1e-4  # eps_high matters on this fixture
  np.testing.assert_allclose(loss, ref_loss, atol=TOL, rtol=0)
  np.testing.assert_allclose(grad, ref_grad, atol=TOL, rtol=0)
  assert float(sums.clip_high) == expect.sum()
  np.testing.assert_array_equal(grad[expect], 0.0)


def test_icepop_importance_weights():
  x = _inputs(np.random.default_rng(4))
  cfg = L.LossConfig(importance_sampling="icepop", is_low=0.5, is_high=2.0)
  loss, grad, sums = _jax_loss_and_grad(x, cfg, rollout=True)
  ref_loss, ref_grad = np_eq15(x["logp"], x["old"], x["adv"], x["mask"], rollout=x["rollout"])
  np.testing.assert_allclose(loss, ref_loss, atol=TOL, rtol=0)
  np.testing.assert_allclose(grad, ref_grad, atol=TOL, rtol=0)
  w = np.exp(x["old"] - x["rollout"])[x["mask"]]
  zeroed = (w < 0.5) | (w > 2.0)
  assert 0 < zeroed.sum() < w.size
  m = L.finalize(sums)
  np.testing.assert_allclose(float(m.is_zeroed_frac), zeroed.mean(), atol=1e-7)
  kept = np.where(zeroed, 0.0, w)
  np.testing.assert_allclose(float(m.is_weight_mean), kept.mean(), rtol=1e-6)
  np.testing.assert_allclose(float(m.is_weight_min), kept.min(), rtol=1e-6)
  np.testing.assert_allclose(float(m.is_weight_max), kept.max(), rtol=1e-6)


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_kl_penalty(estimator):
  x = _inputs(np.random.default_rng(5))
  cfg = L.LossConfig(kl_coef=0.05, kl_estimator=estimator)
  loss, grad, sums = _jax_loss_and_grad(x, cfg, ref=True)
  ref_loss, ref_grad = np_eq15(x["logp"], x["old"], x["adv"], x["mask"], ref=x["ref"],
                               kl_coef=0.05, kl=estimator)
  np.testing.assert_allclose(loss, ref_loss, atol=TOL, rtol=0)
  np.testing.assert_allclose(grad, ref_grad, atol=TOL, rtol=0)
  d = (x["ref"] - x["logp"])[x["mask"]]
  kl = -d if estimator == "k1" else np.exp(d) - 1 - d
  np.testing.assert_allclose(float(L.finalize(sums).kl_ref), kl.mean(), atol=TOL)


def test_approx_kl_and_entropy_metrics():
  x = _inputs(np.random.default_rng(6))
  _, _, sums = _jax_loss_and_grad(x, L.LossConfig())
  m = L.finalize(sums)
  lr = (x["logp"] - x["old"])[x["mask"]]
  np.testing.assert_allclose(float(m.approx_kl), np.mean(np.exp(lr) - 1 - lr), atol=TOL)
  np.testing.assert_allclose(float(m.entropy), x["ent"][x["mask"]].mean(), rtol=1e-6)
  assert float(m.tokens) == x["mask"].sum()


def test_missing_inputs_and_bad_config_raise():
  x = _inputs(np.random.default_rng(7))
  args = (x["logp"], x["old"], x["adv"], x["mask"], x["ent"])
  with pytest.raises(ValueError, match="rollout_logprobs"):
    L.token_loss_sums(*args, cfg=L.LossConfig(importance_sampling="icepop"))
  with pytest.raises(ValueError, match="ref_logprobs"):
    L.token_loss_sums(*args, cfg=L.LossConfig(kl_coef=0.1))
  with pytest.raises(ValueError, match="LossConfig.kl_estimator"):
    L.LossConfig(kl_estimator="k2")
  with pytest.raises(ValueError, match="LossConfig.importance_sampling"):
    L.LossConfig(importance_sampling="tis")


# ---------------------------------------------------------------- chunked log-probs
def _full_logprobs(hidden, unembed, targets, temperature):
  logits = jnp.einsum("btd,dv->btv", hidden, unembed) / temperature
  logp_all = jax.nn.log_softmax(logits, axis=-1)
  logp = jnp.take_along_axis(logp_all, targets[..., None], axis=-1)[..., 0]
  ent = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1)
  return logp, ent


@pytest.mark.parametrize("t,chunk", [(24, 8), (23, 8), (5, 16)])
def test_chunked_logprobs_match_full_logits_values_and_grads(t, chunk):
  rng = np.random.default_rng(8)
  b, d, v, temp = 2, 16, 97, 0.7
  hidden = jnp.asarray(rng.normal(size=(b, t, d)), jnp.float32)
  unembed = jnp.asarray(rng.normal(scale=0.5, size=(d, v)), jnp.float32)
  targets = jnp.asarray(rng.integers(0, v, size=(b, t)), jnp.int32)
  cot = jnp.asarray(rng.normal(size=(b, t)), jnp.float32)  # a generic downstream gradient

  def objective(fn):
    return lambda h, w: jnp.sum(fn(h, w)[0] * cot)

  chunked = lambda h, w: L.chunked_token_logprobs(h, w, targets, temp, chunk)
  full = lambda h, w: _full_logprobs(h, w, targets, temp)
  (lp_c, ent_c), (lp_f, ent_f) = jax.jit(chunked)(hidden, unembed), full(hidden, unembed)
  np.testing.assert_allclose(lp_c, lp_f, atol=TOL, rtol=0)
  np.testing.assert_allclose(ent_c, ent_f, atol=TOL, rtol=0)
  g_c = jax.jit(jax.grad(objective(chunked), argnums=(0, 1)))(hidden, unembed)
  g_f = jax.grad(objective(full), argnums=(0, 1))(hidden, unembed)
  for a, b_ in zip(g_c, g_f):
    np.testing.assert_allclose(a, b_, atol=TOL, rtol=0)


def test_masked_positions_get_exactly_zero_gradient():
  rng = np.random.default_rng(9)
  b, t, d, v = 2, 12, 8, 31
  x = _inputs(rng, b, t)
  # Garbage at masked positions must not leak into the loss or the gradient.
  for k in ("old", "adv", "rollout", "ref"):
    x[k] = np.where(x["mask"], x[k], np.nan)
  logits = jnp.asarray(rng.normal(size=(b, t, v)), jnp.float32)
  targets = jnp.asarray(rng.integers(0, v, size=(b, t)), jnp.int32)
  cfg = L.LossConfig(importance_sampling="icepop", kl_coef=0.1)

  def from_logits(z):
    logp = jnp.take_along_axis(jax.nn.log_softmax(z), targets[..., None], -1)[..., 0]
    sums = L.token_loss_sums(logp, x["old"], x["adv"], x["mask"], x["ent"],
                             rollout_logprobs=x["rollout"], ref_logprobs=x["ref"], cfg=cfg)
    return sums.loss / sums.tokens

  loss, g = jax.value_and_grad(from_logits)(logits)
  assert np.isfinite(float(loss))
  g = np.asarray(g)
  assert np.all(g[~x["mask"]] == 0.0)  # exactly zero, not just small
  assert np.all(np.abs(g[x["mask"]]).sum(-1) > 0)

  hidden = jnp.asarray(rng.normal(size=(b, t, d)), jnp.float32)
  unembed = jnp.asarray(rng.normal(size=(d, v)), jnp.float32)

  def from_hidden(h):
    logp, ent = L.chunked_token_logprobs(h, unembed, targets, 1.0, 5)
    sums = L.token_loss_sums(logp, x["old"], x["adv"], x["mask"], ent,
                             rollout_logprobs=x["rollout"], ref_logprobs=x["ref"], cfg=cfg)
    return sums.loss / sums.tokens

  gh = np.asarray(jax.grad(from_hidden)(hidden))
  assert np.all(gh[~x["mask"]] == 0.0)


# ---------------------------------------------------------------- sum, then divide once
def _batch(rng, b, t, d, v):
  mask = np.zeros((b, t), bool)
  for row, n in enumerate([2, 15, 0, 9, 1, 13][:b]):  # very unequal generated-token counts
    mask[row, t - n:] = True
  return dict(
      hidden=jnp.asarray(rng.normal(size=(b, t, d)), jnp.float32),
      targets=jnp.asarray(rng.integers(0, v, size=(b, t)), jnp.int32),
      old=jnp.asarray(-rng.uniform(1, 4, size=(b, t)), jnp.float32),
      adv=jnp.asarray(np.repeat(rng.normal(size=(b, 1)), t, 1), jnp.float32),
      rollout=jnp.asarray(-rng.uniform(1, 4, size=(b, t)), jnp.float32),
      mask=jnp.asarray(mask))


def _sums(w, batch, cfg):
  logp, ent = L.chunked_token_logprobs(batch["hidden"], w, batch["targets"], 1.0, 4)
  return L.token_loss_sums(logp, batch["old"], batch["adv"], batch["mask"], ent,
                           rollout_logprobs=batch["rollout"], cfg=cfg)


def test_micro_batches_sum_then_divide_equals_one_batch():
  rng = np.random.default_rng(10)
  b, t, d, v = 6, 16, 8, 29
  batch = _batch(rng, b, t, d, v)
  w = jnp.asarray(rng.normal(size=(d, v)), jnp.float32)
  cfg = L.LossConfig(importance_sampling="icepop", is_low=0.2, is_high=5.0)

  def mean_loss(w, bt):
    s = _sums(w, bt, cfg)
    return s.loss / s.tokens, s

  (full_loss, full_sums), full_grad = jax.value_and_grad(mean_loss, has_aux=True)(w, batch)

  sum_grad = jax.grad(lambda w, bt: _sums(w, bt, cfg).loss)
  acc, grad_acc, naive = None, jnp.zeros_like(w), []
  for rows in (slice(0, 2), slice(2, 4), slice(4, 6)):  # tokens: 17, 9, 14
    micro = {k: x[rows] for k, x in batch.items()}
    s = _sums(w, micro, cfg)
    grad_acc = grad_acc + sum_grad(w, micro)
    acc = s if acc is None else L.combine(acc, s)
    naive.append(float(s.loss / s.tokens))
  final = L.finalize(acc)
  np.testing.assert_allclose(float(final.loss), float(full_loss), atol=TOL, rtol=0)
  np.testing.assert_allclose(grad_acc / acc.tokens, full_grad, atol=TOL, rtol=0)
  for name, got, want in zip(L.LossMetrics._fields, final, L.finalize(full_sums)):
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0, err_msg=name)
  # The anti-pattern (mean of per-micro-batch means) gives a different loss on this batch.
  assert abs(np.mean(naive) - float(full_loss)) > 1e-3


def test_chunked_logprobs_never_hold_full_logits_in_forward_or_backward():
  # XLA's compiled buffer plan of forward + backward: temporaries must scale with one chunk
  # of logits, not with [T, V] (without jax.checkpoint the residuals alone are ~[T, V]).
  b, t, d, v, chunk = 1, 2048, 16, 8192, 256
  spec = lambda shape, dt=jnp.float32: jax.ShapeDtypeStruct(shape, dt)
  f = lambda h, w, y: jnp.sum(L.chunked_token_logprobs(h, w, y, 1.0, chunk)[0])
  compiled = jax.jit(jax.grad(f, argnums=(0, 1))).lower(
      spec((b, t, d)), spec((d, v)), spec((b, t), jnp.int32)).compile()
  temp = compiled.memory_analysis().temp_size_in_bytes
  chunk_logits, full_logits = b * chunk * v * 4, b * t * v * 4
  assert temp <= 3 * chunk_logits, (temp, chunk_logits)
  assert temp * 3 < full_logits


def test_chunked_logprobs_accumulate_bf16_inputs_in_fp32():
  # bf16 activations/weights: products are exact in fp32 and the logits are accumulated and
  # normalized in fp32, so the result matches the fp32 computation on the same bf16 values.
  rng = np.random.default_rng(12)
  b, t, d, v = 2, 16, 32, 257
  hidden = jnp.asarray(rng.normal(size=(b, t, d)), jnp.bfloat16)
  unembed = jnp.asarray(rng.normal(scale=0.3, size=(d, v)), jnp.bfloat16)
  targets = jnp.asarray(rng.integers(0, v, size=(b, t)), jnp.int32)
  logp, ent = L.chunked_token_logprobs(hidden, unembed, targets, 1.0, 8)
  assert logp.dtype == jnp.float32 and ent.dtype == jnp.float32
  want_lp, want_ent = _full_logprobs(hidden.astype(jnp.float32), unembed.astype(jnp.float32),
                                     targets, 1.0)
  np.testing.assert_allclose(logp, want_lp, atol=TOL, rtol=0)
  np.testing.assert_allclose(ent, want_ent, atol=TOL, rtol=0)


def test_the_gap_to_the_rollout_logprobs_is_reported_not_differentiated():
  """d = logp - rollout_logp on loss tokens only: mean |d|, mean k3 (e^d - 1 - d) and the
  share with |d| > ln 2, worked by hand; the loss and its gradient do not depend on it."""
  logp = jnp.array([[-1.0, -2.0, -0.5, -3.0]])
  rollout = jnp.array([[-1.0, -1.0, -0.5 - math.log(3.0), 9.0]])  # last: masked garbage
  mask = jnp.array([[1.0, 1.0, 1.0, 0.0]])
  adv, ent = jnp.ones((1, 4)), jnp.zeros((1, 4))
  m = L.finalize(L.token_loss_sums(logp, logp, adv, mask, ent, rollout_logprobs=rollout))
  d = np.array([0.0, -1.0, math.log(3.0)])
  np.testing.assert_allclose(m.rollout_gap, np.abs(d).mean(), atol=1e-5)
  np.testing.assert_allclose(m.rollout_k3, (np.exp(d) - 1 - d).mean(), atol=1e-5)
  np.testing.assert_allclose(m.rollout_gap_over_ln2_frac, 2 / 3, atol=1e-5)
  grad = lambda r: jax.grad(lambda x: L.token_loss_sums(  # noqa: E731
      x, jax.lax.stop_gradient(x), adv, mask, ent, rollout_logprobs=r).loss)(logp)
  np.testing.assert_array_equal(grad(rollout), grad(logp))  # the gap changes no gradient
  none = L.finalize(L.token_loss_sums(logp, logp, adv, mask, ent))
  assert float(none.rollout_gap) == float(none.rollout_k3) == 0.0
