"""The real train step pushes the policy the right way, by the right amount (slow suite).

What this file proves, end to end through `make_train_step` (jit, shardings, micro-batch scan,
`chunked_token_logprobs`, `token_loss_sums`, the optimizer):

1. Sign. With the real AdamW (`make_optimizer`) and on-policy old log-probs, one step raises
   the log-prob of every generated token of the trajectory with advantage +1 and lowers that
   of every generated token of the trajectory with advantage -1 (same prompt, packed in one
   row). Tokens outside the loss mask are not pushed: a trajectory whose loss mask is 0
   everywhere gives gradient 0 whatever its advantage, and garbage (even NaN) advantages and
   old/rollout log-probs at masked slots leave the update bit-for-bit unchanged.
2. Size. The step's gradient equals the gradient of Eq. 15 (carr_jax/rl/loss.py) normalized by
   N = the number of loss tokens of the WHOLE batch, computed independently: a float64 NumPy
   transcription of the tiny Qwen3 forward (checked against `forward_logits`), a float64
   log-softmax and Eq. 15, differentiated by central finite differences along one random
   direction per parameter leaf. The batch has unequal loss-token counts per row, per device
   and per micro-batch, padding slots and rows, several segments per row, and ratios on both
   sides of the clip range, so dividing by the slot count, averaging per row, per trajectory
   or per micro-batch would each be off by far more than the tolerance (asserted: the test
   can fail).

Run: .venv/bin/python -m pytest -q tests/carr_jax/test_learning_signal.py -m slow
"""
import jax
import numpy as np
import optax
import pytest

from carr_jax.model import qwen3 as model_lib
from carr_jax.model import sharding
from carr_jax.model.config import get_preset
from carr_jax.rl import loss as loss_lib
from carr_jax.rl import optim
from carr_jax.rl import packing
from carr_jax.rl import train_step as ts

CFG = get_preset("tiny_dense", vocab_size=256)
EPS_LOW, EPS_HIGH = loss_lib.LossConfig().eps_low, loss_lib.LossConfig().eps_high


# ---------------------------------------------------------------- float64 NumPy reference
def _rms(x, scale, eps):
  return scale * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


def _rope(x, positions, theta):  # x [B, T, N, H], positions [B, T]
  h = x.shape[-1]
  inv_freq = 1.0 / theta ** (np.arange(0, h, 2, dtype=np.float64) / h)  # [H/2]
  freqs = positions.astype(np.float64)[..., None] * inv_freq  # [B, T, H/2]
  emb = np.concatenate([freqs, freqs], axis=-1)[:, :, None, :]  # [B, T, 1, H]
  x1, x2 = np.split(x, 2, axis=-1)
  return x * np.cos(emb) + np.concatenate([-x2, x1], axis=-1) * np.sin(emb)


def np_logits(p, cfg, tokens, positions, segment_ids):
  """float64 logits [B, T, V] of the dense Qwen3 (tied embeddings), written from the model's
  definition (carr_jax/model/qwen3.py docstrings, HF Qwen3): p is a float64 copy of the params."""
  eps, n, k, hd = cfg.rms_norm_eps, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
  b, t = tokens.shape
  emb = p["embed"]["embedding"]  # [V, D]
  x = emb[tokens]  # [B, T, D]
  causal = np.tril(np.ones((t, t), bool))
  allowed = (causal[None] & (segment_ids[:, :, None] == segment_ids[:, None, :])
             & (segment_ids > 0)[:, :, None])  # [B, T(query), S(key)]
  lay = p["layers"]
  for layer in range(cfg.num_layers):
    at = {name: w[layer] for name, w in lay["attn"].items()}
    h = _rms(x, lay["input_norm"]["scale"][layer], eps)
    q = np.einsum("btd,dnh->btnh", h, at["q_proj"])  # [B, T, N, H]
    key = np.einsum("btd,dkh->btkh", h, at["k_proj"])  # [B, T, K, H]
    val = np.einsum("btd,dkh->btkh", h, at["v_proj"])  # [B, T, K, H]
    q = _rope(_rms(q, at["q_norm"], eps), positions, cfg.rope_theta)
    key = _rope(_rms(key, at["k_norm"], eps), positions, cfg.rope_theta)
    q = q.reshape(b, t, k, n // k, hd)  # query head n reads kv head n // (N // K)
    scores = np.einsum("btkgh,bskh->bkgts", q, key) / np.sqrt(hd)  # [B, K, G, T, S]
    scores = np.where(allowed[:, None, None], scores, -1e30)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = np.einsum("bkgts,bskh->btkgh", probs, val).reshape(b, t, n, hd)
    x = x + np.einsum("btnh,nhd->btd", out, at["o_proj"])
    h = _rms(x, lay["post_attn_norm"]["scale"][layer], eps)
    mlp = {name: w[layer] for name, w in lay["mlp"].items()}
    gate = h @ mlp["gate_proj"]  # [B, T, F]
    x = x + ((gate / (1.0 + np.exp(-gate))) * (h @ mlp["up_proj"])) @ mlp["down_proj"]
  return _rms(x, p["final_norm"]["scale"], eps) @ emb.T  # [B, T, V]


def np_target_logprobs(logits, targets):
  """float64 log-softmax of logits [B, T, V] at targets [B, T] -> [B, T]."""
  logits = np.asarray(logits, np.float64)
  top = logits.max(-1, keepdims=True)
  lse = top[..., 0] + np.log(np.exp(logits - top).sum(-1))
  return np.take_along_axis(logits, targets[..., None], axis=-1)[..., 0] - lse


def np_token_terms(logp, batch):
  """Eq. 15 per-token policy term -min(rho A, clip(rho) A) [R, S] float64, 0 off the mask."""
  mask = batch["loss_mask"] > 0
  old = np.where(mask, batch["old_logprobs"].astype(np.float64), 0.0)
  adv = np.where(mask, batch["advantages"].astype(np.float64), 0.0)
  rho = np.exp(np.where(mask, logp - old, 0.0))
  term = -np.minimum(rho * adv, np.clip(rho, 1 - EPS_LOW, 1 + EPS_HIGH) * adv)
  return np.where(mask, term, 0.0)


def normalizations(batch, micro_batches, devices):
  """Per-slot weights [R, S] turning the token terms into a scalar objective, by name.

  "token_sum" is Eq. 15 (the one the step must use); the others are the mistakes the test
  must be able to tell apart from it.
  """
  mask = (batch["loss_mask"] > 0).astype(np.float64)  # [R, S]
  rows = mask.shape[0]
  out = {"token_sum": mask / mask.sum(), "all_slots": mask / mask.size}
  out["row_mean"] = mask / np.maximum(mask.sum(1, keepdims=True), 1) / rows
  seg = batch["segment_ids"] * (rows + 1) + np.arange(rows)[:, None]  # trajectory key per slot
  keys = np.unique(seg[mask > 0])
  counts = {key: mask[seg == key].sum() for key in keys}
  out["trajectory_mean"] = np.where(
      mask > 0, 1.0 / np.vectorize(lambda s: counts.get(s, 1.0))(seg) / len(keys), 0.0)
  for name, groups, group_of_row in (
      ("micro_batch_mean", micro_batches, np.arange(rows) % micro_batches),  # ts.micro_split
      ("device_mean", devices, np.arange(rows) // (rows // devices))):  # rows in device blocks
    per_group = np.array([mask[group_of_row == g].sum() for g in range(groups)])
    out[name] = mask / per_group[group_of_row][:, None] / groups
  return out


# ---------------------------------------------------------------- helpers
def as_f64(tree):
  return jax.tree.map(lambda x: np.asarray(x, np.float64), jax.device_get(tree))


def step_arrays(packed: packing.PackedBatch) -> dict:
  """The train step's batch from a packed batch: float32 loss mask, on-policy placeholders."""
  b = packed.arrays()
  b["loss_mask"] = b["loss_mask"].astype(np.float32)
  b["old_logprobs"] = b["rollout_logprobs"].copy()
  return b


def trajectory(prompt, completion):
  """A record: loss mask 1 on the completion (generated) tokens only, 0 on the prompt."""
  ids = list(prompt) + list(completion)
  mask = [0] * len(prompt) + [1] * len(completion)
  return {"token_ids": ids, "loss_mask": mask, "rollout_logprobs": [0.0] * len(ids)}


# ---------------------------------------------------------------- 1. sign of the update
@pytest.mark.slow  # 20-35 s on 2 shared cores: compiling the step, 4 steps
def test_one_step_raises_positive_lowers_negative_and_ignores_masked_tokens():
  rng = np.random.default_rng(0)
  prompt = rng.integers(0, CFG.vocab_size, 9)  # shared by A and B: one GRPO group
  traj_a = trajectory(prompt, rng.integers(0, CFG.vocab_size, 8))  # 17 tokens -> 16 slots
  traj_b = trajectory(prompt, rng.integers(0, CFG.vocab_size, 8))
  pack_cfg = packing.PackingConfig(row_lengths=(32,), row_multiple=2)
  packed = packing.pack_trajectories([traj_a, traj_b], [1.0, -1.0], pack_cfg)
  batch = step_arrays(packed)  # [R=2, S=32]: row 0 = A | B, row 1 = padding
  assert batch["tokens"].shape == (2, 32) and (packed.trajectory_index[1] == -1).all()
  is_a = (packed.trajectory_index == 0) & (batch["loss_mask"] > 0)  # [2, 32]: 8 slots each
  is_b = (packed.trajectory_index == 1) & (batch["loss_mask"] > 0)
  assert is_a.sum() == is_b.sum() == 8

  mesh = sharding.make_mesh({"data": 2}, jax.devices()[:2])
  # The real optimizer; its first step moves every weight by about lr (Adam: g / |g|).
  tx = optim.make_optimizer(optim.OptimConfig(learning_rate=1e-4))
  loss_cfg, step_cfg = loss_lib.LossConfig(), ts.StepConfig()
  state0, shardings = ts.create_train_state(CFG, tx, mesh, seed=0)  # never donated itself
  step = ts.make_train_step(CFG, loss_cfg, step_cfg, tx, mesh, shardings)
  logprob_fn = ts.make_logprob_fn(CFG, step_cfg, mesh, shardings.params)
  # On-policy: old = rollout = the current policy's log-probs (the trainer's recomputation).
  on_policy = np.asarray(logprob_fn(state0.params, batch))  # [2, 32]
  batch["old_logprobs"] = np.where(batch["loss_mask"] > 0, on_policy, 0.0).astype(np.float32)
  batch["rollout_logprobs"] = batch["old_logprobs"].copy()

  def run(b):
    """One real step from (a copy of) state0: (params before, params after, metrics)."""
    st = jax.tree.map(lambda x: x.copy(), state0)  # same shardings; the step donates it
    before = jax.device_get(st.params)
    st, m = step(st, b)
    return before, jax.device_get(st.params), jax.device_get(m)

  forward = jax.jit(lambda p: model_lib.forward_logits(
      p, CFG, batch["tokens"], batch["positions"], batch["segment_ids"]))  # [2, 32, V] fp32

  def logprobs(params):  # float64 log-softmax of the model's full logits, [2, 32]
    return np_target_logprobs(np.asarray(forward(params)), batch["targets"])

  before, after, m = run(batch)
  assert abs(float(m["approx_kl"])) < 1e-6  # ratio 1: nothing clipped, pure policy gradient
  assert float(m["clip_low_frac"]) == float(m["clip_high_frac"]) == 0.0
  assert int(m["tokens"]) == 16 and float(m["grad_norm"]) > 0
  delta = logprobs(after) - logprobs(before)  # [2, 32]
  print(f"\nA delta logp: mean {delta[is_a].mean():.3e} min {delta[is_a].min():.3e}; "
        f"B delta logp: mean {delta[is_b].mean():.3e} max {delta[is_b].max():.3e}")
  assert (delta[is_a] > 0).all(), delta[is_a]  # every generated token of A became likelier
  assert (delta[is_b] < 0).all(), delta[is_b]  # every generated token of B less likely
  # Not a rounding artefact: fp32 log-probs are good to ~1e-6.
  assert delta[is_a].mean() > 1e-3 and delta[is_b].mean() < -1e-3

  # Masked tokens are not pushed. A keeps advantage +1 but its loss mask is 0 everywhere;
  # B (mask as before) has advantage 0: the only non-zero advantage sits on masked slots.
  masked = dict(batch, loss_mask=np.where(is_a, 0.0, batch["loss_mask"]).astype(np.float32),
                advantages=np.where(packed.trajectory_index == 0, 1.0, 0.0).astype(np.float32))
  zero_adv = dict(masked, advantages=np.zeros_like(batch["advantages"]))
  before_m, after_m, m_m = run(masked)
  _, after_z, m_z = run(zero_adv)
  assert float(m_m["grad_norm"]) == float(m_z["grad_norm"]) == 0.0
  assert int(m_m["tokens"]) == int(m_z["tokens"]) == 8
  # With a zero gradient AdamW only applies weight decay, as in the zero-advantage run.
  for x, y in zip(jax.tree.leaves(after_m), jax.tree.leaves(after_z)):
    np.testing.assert_array_equal(x, y)
  moved = optax.tree.norm(jax.tree.map(np.subtract, after_m, before_m))
  decay = 1e-4 * 0.1 * optax.tree.norm(jax.tree.map(  # lr * wd * |decayed params|
      lambda p, keep: p * keep, before_m, optim._decay_mask(before_m)))
  np.testing.assert_allclose(moved, decay, rtol=1e-3)

  # Garbage (NaN, huge) advantages / old / rollout log-probs at masked slots change nothing.
  off = batch["loss_mask"] == 0
  noise = rng.standard_normal(off.shape) * 1e3
  garbage = dict(batch, advantages=np.where(off, noise, batch["advantages"]),
                 old_logprobs=np.where(off, np.nan, batch["old_logprobs"]),
                 rollout_logprobs=np.where(off, -noise, batch["rollout_logprobs"]))
  garbage = {k: v.astype(batch[k].dtype) for k, v in garbage.items()}
  _, after_g, m_g = run(garbage)
  for x, y in zip(jax.tree.leaves(after_g), jax.tree.leaves(after)):
    np.testing.assert_array_equal(x, y)
  for key in ("loss", "grad_norm", "update_norm", "entropy", "tokens"):
    assert m_g[key] == m[key], key


# ---------------------------------------------------------------- 2. gradient vs float64
@pytest.mark.slow  # 15-30 s on 2 shared cores: compiling the step, 56 NumPy forwards
def test_step_gradient_matches_float64_finite_differences_of_token_sum_objective():
  rng = np.random.default_rng(1)
  trajs, advantages = [], []
  # token counts -> slots 12, 8, 19, 6, 10, 15: FFD in rows of 24 gives rows [19], [15, 8],
  # [12, 10], [6] (row 3 mostly padding); loss masks: 3-token prompt, then generated tokens
  # with tool-observation gaps (mask 0), so loss-token counts differ per row and slice.
  for length in (13, 9, 20, 7, 11, 16):
    mask = (rng.random(length) < 0.7).astype(int)
    mask[:3] = 0
    trajs.append({"token_ids": rng.integers(0, CFG.vocab_size, length).tolist(),
                  "loss_mask": mask.tolist(), "rollout_logprobs": [0.0] * length})
    advantages.append(float(rng.choice([-1.5, -0.5, 0.7, 1.2])))
  pack_cfg = packing.PackingConfig(row_lengths=(24,), row_multiple=4)
  batch = step_arrays(packing.pack_trajectories(trajs, advantages, pack_cfg))  # [4, 24]
  mask = batch["loss_mask"] > 0
  rows, slots = mask.shape
  micro_batches, devices = 2, 2
  assert (rows, slots) == (4, 24) and (batch["segment_ids"] == 0).any()
  assert (batch["segment_ids"].max(1) > 1).any()  # several trajectories share a row

  mesh = sharding.make_mesh({"data": devices}, jax.devices()[:devices])
  # SGD with lr 2^20: params_before - params_after == 2^20 * gradient, and the power of two
  # makes the division exact; the update dwarfs the weights, so rounding p - update costs
  # ~6e-8 of the gradient itself (not of the weight).
  lr = 2.0 ** 20
  tx = optax.sgd(lr)
  state, shardings = ts.create_train_state(CFG, tx, mesh, seed=0)
  p32 = jax.device_get(state.params)
  p64 = as_f64(p32)

  # The reference model agrees with the library's forward (fp32 logits, exact-fp32 matmuls).
  args = (batch["tokens"], batch["positions"], batch["segment_ids"])
  logits32 = np.asarray(model_lib.forward_logits(p32, CFG, *args))  # [4, 24, 256]
  logits64 = np_logits(p64, CFG, *args)
  valid = batch["segment_ids"] > 0
  np.testing.assert_allclose(logits32[valid], logits64[valid], atol=2e-5, rtol=0)
  logp0 = np_target_logprobs(logits64, batch["targets"])  # [4, 24]

  # Off-policy old log-probs: log rho = logp - old drawn from values >= 0.1 away from the clip
  # edges log(0.8) = -0.223 and log(1.28) = +0.247, so tokens sit on both sides of the clip
  # range (A > 0 with rho > 1.28 and A < 0 with rho < 0.8: clipped, no gradient; the
  # opposite corners: unclipped) and no finite-difference step crosses a kink.
  log_rho = rng.choice([-0.6, -0.35, -0.1, 0.0, 0.1, 0.4, 0.6], size=mask.shape)
  batch["old_logprobs"] = np.where(mask, logp0 - log_rho, 0.0).astype(np.float32)
  batch["rollout_logprobs"] = batch["old_logprobs"].copy()
  adv = batch["advantages"]
  rho = np.exp(logp0 - batch["old_logprobs"])
  clipped = mask & (((adv > 0) & (rho > 1 + EPS_HIGH)) | ((adv < 0) & (rho < 1 - EPS_LOW)))
  assert 0 < clipped.sum() < mask.sum() and (mask & (adv < 0) & (rho < 1 - EPS_LOW)).any()

  step_cfg = ts.StepConfig(micro_batches=micro_batches, logprob_chunk=16)  # 2 chunks, padded
  step = ts.make_train_step(CFG, loss_lib.LossConfig(), step_cfg, tx, mesh, shardings)
  state, metrics = step(state, batch)
  metrics = jax.device_get(metrics)
  grad = jax.tree.map(lambda b, a: (np.float64(b) - np.float64(a)) / lr, p32,
                      jax.device_get(state.params))
  assert int(metrics["tokens"]) == mask.sum()
  assert float(metrics["clip_low_frac"]) > 0 and float(metrics["clip_high_frac"]) > 0
  np.testing.assert_allclose(optax.tree.norm(grad), metrics["grad_norm"], rtol=1e-6)

  # The normalizations differ: per-row, per-slice and per-device loss-token counts.
  assert len(set(mask.sum(1).tolist())) > 1
  assert len({mask[m::micro_batches].sum() for m in range(micro_batches)}) == micro_batches
  # Device d works on row block d of the global batch (micro_split keeps rows in place).
  assert len({mask[d * rows // devices:(d + 1) * rows // devices].sum()
              for d in range(devices)}) == devices
  weights = normalizations(batch, micro_batches, devices)

  def objectives(params64):
    """Every normalization's objective at float64 params (one forward)."""
    logp = np_target_logprobs(np_logits(params64, CFG, *args), batch["targets"])
    terms = np_token_terms(logp, batch)
    return {name: float(np.sum(terms * w)) for name, w in weights.items()}

  np.testing.assert_allclose(objectives(p64)["token_sum"], metrics["loss"], atol=1e-6)

  # Directions: one random unit vector per parameter leaf (so every leaf's gradient is
  # checked, the tied embedding through both of its uses), and the step's own gradient.
  leaves, treedef = jax.tree.flatten(p64)
  directions, names = [], []
  for i, leaf in enumerate(leaves):
    v = [np.zeros_like(x) for x in leaves]
    v[i] = rng.standard_normal(leaf.shape)
    v[i] /= np.linalg.norm(v[i])
    directions.append(v)
    names.append(jax.tree_util.keystr(jax.tree_util.tree_flatten_with_path(p64)[0][i][0]))
  g_leaves = jax.tree.leaves(grad)
  g_norm = np.sqrt(sum(np.sum(g * g) for g in g_leaves))
  directions.append([g / g_norm for g in g_leaves])
  names.append("step gradient")

  def fd(v, h):  # central difference along v, every normalization at once
    shift = lambda s: jax.tree.unflatten(treedef, [x + s * d for x, d in zip(leaves, v)])
    up, down = objectives(shift(h)), objectives(shift(-h))
    return {k: (up[k] - down[k]) / (2 * h) for k in up}

  # Central differences at h and h/2, Richardson-extrapolated: the h^2 error term cancels.
  h = 1e-4
  step_dd = np.array([sum(np.sum(g * d) for g, d in zip(g_leaves, v)) for v in directions])
  full, half = [fd(v, h) for v in directions], [fd(v, h / 2) for v in directions]
  ref = {k: np.array([(4 * b[k] - a[k]) / 3 for a, b in zip(full, half)]) for k in weights}
  fd_change = np.array([abs(a["token_sum"] - b["token_sum"]) for a, b in zip(full, half)])

  # Tolerance, per direction v (unit norm): |<g_step - g_ref, v>| <= |g_step - g_ref| on v's
  # support (Cauchy-Schwarz), so it is bounded by the relative error of the fp32 gradient
  # times |g_leaf|, the norm of the step's gradient on that leaf (|g| for the last direction).
  # The fp32 step: unit roundoff u = 6e-8; its longest reductions (logsumexp over V = 256,
  # MLP F = 128, attention over <= 24 keys, 4 x 24 slots into each weight gradient) give
  # ~sqrt(K) u ~ 1e-6 typical and K u ~ 1.5e-5 worst case. tol = 1e-5 |g_leaf| (measured:
  # <= 2.1e-7). The float64 reference is far more accurate: Richardson-extrapolated central
  # differences (error below their h -> h/2 change, checked < tol / 10; rounding
  # ~1e-16 / h ~ 1e-12).
  rtol = 1e-5
  scale = np.array([np.linalg.norm(g) for g in g_leaves] + [g_norm])  # |g_leaf| per direction
  assert (fd_change < 0.1 * rtol * scale).all(), fd_change / scale
  err = np.abs(step_dd - ref["token_sum"]) / scale
  for name, s, r, e in zip(names, step_dd, ref["token_sum"], err):
    print(f"{name:38s} step {s:+.8e} ref {r:+.8e} |err|/|g_leaf| {e:.1e}")
  assert (err <= rtol).all(), [(n, e) for n, e in zip(names, err) if e > rtol]

  # Self-check: every wrong normalization misses the step's gradient by >> the tolerance.
  for name in weights:
    if name != "token_sum":
      miss = np.max(np.abs(step_dd - ref[name]) / scale)
      print(f"normalization {name}: max |err|/|g_leaf| {miss:.2e}")
      assert miss > 100 * rtol, name
