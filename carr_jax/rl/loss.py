"""Token log-probs without full logits, and the C-GRPO clipped token-level loss (jnp, jittable).

Objective (paper Eq. 15), written as a loss to MINIMIZE over the whole global batch:

    loss = 1/N * sum_{b,t} m_bt * [ -w_bt * min(rho_bt * A_bt, clip(rho_bt, 1-eps_low,
                                                                   1+eps_high) * A_bt)
                                    + kl_coef * kl_bt ]
    rho_bt = exp(clamp(logp_bt - old_logp_bt, -c, c)),   N = sum_{b,t} m_bt

m = loss mask (1 only for tokens the policy generated), A = the trajectory's group advantage
broadcast over its tokens, N = number of generated tokens in the WHOLE global batch (all
micro-batches and devices), not per sequence or per micro-batch.

Deviations from / additions to Eq. 15, all off or neutral by default except the clamp:
  * The log-ratio is clamped to [-c, c] (c = 20) before exp so a stale or garbage old
    log-prob cannot overflow; inside the clamp this is exactly Eq. 15.
  * w = 1 unless `importance_sampling="icepop"`: truncated importance weight between the
    trainer's recomputed old log-probs and the rollout engine's log-probs,
    r = exp(clamp(old_logp - rollout_logp)), w = r if is_low <= r <= is_high else 0,
    stop-gradient (the release's setting: [0.5, 2.0]).
  * kl_bt is an estimator of KL(pi_theta || pi_ref) to a frozen reference policy:
    k1 = logp - ref_logp, k3 = exp(ref_logp - logp) - 1 - (ref_logp - logp) (log-ratio clamped
    the same way); not multiplied by w. kl_coef = 0 in the paper.
  * old, rollout and reference log-probs and advantages are constants (stop-gradient).

`token_loss_sums` returns SUMS (`LossSums`), never means: the train step adds them over
micro-batches (`combine`; under jit with global arrays the sum over devices is part of the
same program), then divides once (`finalize`). Gradients likewise: differentiate
`sums.loss` per micro-batch, add the gradients, divide by the total token count (or scale
each micro-batch's `sums.loss` by 1/N_global when N_global is known up front).

`chunked_token_logprobs` gives log pi(target) and the entropy per position from final hidden
states without materializing [B*T, V] logits: the sequence is cut into chunks, each chunk's
fp32 logits are built, reduced and dropped inside a `jax.checkpoint`ed scan step, so the
backward pass recomputes them chunk by chunk too.

Run the tests: .venv/bin/python -m pytest tests/carr_jax/test_loss.py -q
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from carr_jax.model.qwen3 import project

IS_MODES = ("none", "icepop")
KL_ESTIMATORS = ("k1", "k3")
OLD_LOGPROBS = ("trainer", "rollout")


def chunked_token_logprobs(hidden: jax.Array, unembed: jax.Array, targets: jax.Array,
                           temperature: float = 1.0,
                           chunk_size: int = 1024) -> tuple[jax.Array, jax.Array]:
  """log softmax((hidden @ unembed) / temperature)[targets] and entropy, chunked over T.

  Args:
    hidden: [B, T, D] final hidden states (any float dtype; logits are accumulated in fp32).
    unembed: [D, V] unembedding matrix.
    targets: [B, T] int token ids whose log-prob is wanted at each position.
    temperature: sampling temperature the log-probs must match (the engine's).
    chunk_size: positions per chunk; peak extra memory is about B * chunk_size * V * 4 bytes
      (times a small constant). T is padded up to a multiple of it.

  Returns:
    (logprobs [B, T] fp32, entropy [B, T] fp32). Entropy is a metric: it is not differentiated.
  """
  b, t, d = hidden.shape
  chunk = min(chunk_size, t)
  num_chunks = -(-t // chunk)
  pad = num_chunks * chunk - t
  # [C, B, c, ...]: scan over chunks of the sequence; the batch axis (and its sharding) stays.
  h = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(b, num_chunks, chunk, d)
  h = h.transpose(1, 0, 2, 3)  # [C, B, c, D]
  y = jnp.pad(targets, ((0, 0), (0, pad))).reshape(b, num_chunks, chunk).transpose(1, 0, 2)

  @jax.checkpoint  # the backward pass rebuilds this chunk's logits instead of storing them
  def one_chunk(h_c, y_c):  # [B, c, D], [B, c]
    logits = project(h_c, unembed, preferred_element_type=jnp.float32)  # bcd,dv->bcv
    logits = logits / temperature  # [B, c, V] fp32
    lse = jax.nn.logsumexp(logits, axis=-1)  # [B, c]
    target_logit = jnp.take_along_axis(logits, y_c[..., None], axis=-1)[..., 0]
    probs = jnp.exp(logits - lse[..., None])
    entropy = lse - jnp.sum(probs * logits, axis=-1)
    return target_logit - lse, jax.lax.stop_gradient(entropy)

  def step(carry, xs):
    return carry, one_chunk(*xs)

  _, (logp, ent) = jax.lax.scan(step, None, (h, y))  # [C, B, c] each
  logp = logp.transpose(1, 0, 2).reshape(b, num_chunks * chunk)[:, :t]
  ent = ent.transpose(1, 0, 2).reshape(b, num_chunks * chunk)[:, :t]
  return logp, ent


@dataclasses.dataclass(frozen=True)
class LossConfig:
  eps_low: float = 0.2  # ratio clipped below at 1 - eps_low (paper: 0.2)
  eps_high: float = 0.28  # ratio clipped above at 1 + eps_high (paper: 0.28)
  log_ratio_clamp: float = 20.0  # |log-ratio| bound before exp (overflow guard only)
  importance_sampling: str = "none"  # "none" | "icepop": truncated importance weights of
  # trainer vs engine log-probs (the release and every RL config in configs/: icepop)
  is_low: float = 0.5  # icepop keeps weights in [is_low, is_high], zeroes the rest
  is_high: float = 2.0
  kl_coef: float = 0.0  # weight of the KL(pi || pi_ref) penalty (paper: 0)
  kl_estimator: str = "k3"  # "k1" | "k3"
  # the ratio's denominator: "trainer" (the policy's own log-probs before the step's one
  # update, taken from the step's forward: the ratio is 1) | "rollout" (the engine's)
  old_logprobs: str = "trainer"

  def __post_init__(self):
    if self.old_logprobs not in OLD_LOGPROBS:
      raise ValueError(f"LossConfig.old_logprobs must be one of {OLD_LOGPROBS}, "
                       f"got {self.old_logprobs!r}")
    if self.old_logprobs == "rollout" and self.importance_sampling != "none":
      raise ValueError("LossConfig.importance_sampling compares trainer and rollout log-probs; "
                       "it needs old_logprobs='trainer'")
    if self.importance_sampling not in IS_MODES:
      raise ValueError(f"LossConfig.importance_sampling must be one of {IS_MODES}, "
                       f"got {self.importance_sampling!r}")
    if self.kl_estimator not in KL_ESTIMATORS:
      raise ValueError(f"LossConfig.kl_estimator must be one of {KL_ESTIMATORS}, "
                       f"got {self.kl_estimator!r}")
    if not (0 <= self.eps_low < 1 and self.eps_high >= 0):
      raise ValueError(f"LossConfig.eps_low must be in [0, 1) and eps_high >= 0, got "
                       f"{self.eps_low}, {self.eps_high}")
    if not 0 <= self.is_low <= 1 <= self.is_high:
      raise ValueError(f"LossConfig.is_low <= 1 <= is_high required, got {self.is_low}, "
                       f"{self.is_high}")


class LossSums(NamedTuple):
  """Additive statistics of one (micro-)batch: fp32 scalars, counts int32 (exact)."""
  loss: jax.Array  # sum of per-token losses (the quantity to differentiate)
  tokens: jax.Array  # number of loss tokens (generated tokens)
  policy_loss: jax.Array  # sum of -w * min(...) (loss without the KL term)
  kl_ref: jax.Array  # sum of the KL-to-reference estimator (0 without ref_logprobs)
  clip_low: jax.Array  # tokens with A < 0 and rho < 1 - eps_low (no gradient)
  clip_high: jax.Array  # tokens with A > 0 and rho > 1 + eps_high (no gradient)
  approx_kl: jax.Array  # sum of k3 estimate of KL(pi_old || pi_theta)
  entropy: jax.Array  # sum of per-token entropy
  is_weight: jax.Array  # sum of importance weights w (1 per token without IS)
  is_zeroed: jax.Array  # tokens whose importance weight was truncated to 0
  is_weight_min: jax.Array  # min of w over loss tokens (+inf when there are none)
  is_weight_max: jax.Array  # max of w over loss tokens (-inf when there are none)
  # the trainer's log-probs (before the update) against the engine's, d = logp - rollout_logp
  # (0 without rollout_logprobs): sum |d|, sum of Schulman's k3 of KL(pi_rollout || pi_theta)
  # (e^d - 1 - d, the tokens sampled from the engine), tokens with |d| > ln 2
  rollout_gap: jax.Array
  rollout_k3: jax.Array
  rollout_gap_over_ln2: jax.Array


class LossMetrics(NamedTuple):
  """Finalized means over all loss tokens of the global batch (0 when there are none)."""
  loss: jax.Array
  policy_loss: jax.Array
  kl_ref: jax.Array
  clip_low_frac: jax.Array
  clip_high_frac: jax.Array
  approx_kl: jax.Array
  entropy: jax.Array
  is_weight_mean: jax.Array
  is_weight_min: jax.Array
  is_weight_max: jax.Array
  is_zeroed_frac: jax.Array
  rollout_gap: jax.Array  # mean |logp - rollout_logp| over loss tokens
  rollout_k3: jax.Array  # mean k3 estimate of KL(pi_rollout || pi_theta)
  rollout_gap_over_ln2_frac: jax.Array  # share of loss tokens with |logp - rollout_logp| > ln 2
  tokens: jax.Array


def token_loss_sums(logprobs: jax.Array, old_logprobs: jax.Array, advantages: jax.Array,
                    loss_mask: jax.Array, entropy: jax.Array, *,
                    rollout_logprobs: jax.Array | None = None,
                    ref_logprobs: jax.Array | None = None,
                    cfg: LossConfig = LossConfig()) -> LossSums:
  """Sums of the Eq. 15 token loss and its metrics; every array is [B, T], aligned per token.

  Args:
    logprobs: log pi_theta of each target token (differentiated).
    old_logprobs: log pi_old of the same tokens: the trainer's recomputation with the
      weights that generated the rollouts, or the engine's log-probs when not recomputed.
    advantages: the trajectory's advantage on each of its tokens.
    loss_mask: 1 where the target token was generated by the policy.
    entropy: per-token policy entropy (metric only).
    rollout_logprobs: the engine's log-probs (needed by importance_sampling="icepop").
    ref_logprobs: log pi_ref of a frozen reference policy (needed when kl_coef != 0;
      when given with kl_coef == 0 the KL is still reported).
    cfg: clip, importance-sampling and KL settings.

  All inputs but `logprobs` are constants. Their values at masked positions are ignored
  (they may be garbage, even NaN): the gradient at a masked position is exactly 0.
  """
  if cfg.importance_sampling == "icepop" and rollout_logprobs is None:
    raise ValueError("rollout_logprobs is required with LossConfig.importance_sampling='icepop'")
  if cfg.kl_coef != 0.0 and ref_logprobs is None:
    raise ValueError(f"ref_logprobs is required with LossConfig.kl_coef={cfg.kl_coef}")
  mask = loss_mask.astype(bool)  # [B, T]
  # Zero every input at masked positions so garbage there cannot reach the loss or gradient.
  const = lambda x: jax.lax.stop_gradient(jnp.where(mask, x.astype(jnp.float32), 0.0))
  logp = jnp.where(mask, logprobs.astype(jnp.float32), 0.0)
  old, adv, ent = const(old_logprobs), const(advantages), const(entropy)

  c = cfg.log_ratio_clamp
  log_ratio = jnp.clip(logp - old, -c, c)  # [B, T]
  ratio = jnp.exp(log_ratio)  # rho
  clipped_ratio = jnp.clip(ratio, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high)
  policy_term = -jnp.minimum(ratio * adv, clipped_ratio * adv)

  if cfg.importance_sampling == "icepop":
    is_ratio = jnp.exp(jnp.clip(old - const(rollout_logprobs), -c, c))
    keep = (is_ratio >= cfg.is_low) & (is_ratio <= cfg.is_high)
    weight = jnp.where(keep, is_ratio, 0.0)
  else:
    keep = jnp.ones_like(mask)
    weight = jnp.ones_like(logp)
  policy_term = policy_term * weight

  kl = jnp.zeros_like(logp)
  if ref_logprobs is not None:
    ref_log_ratio = jnp.clip(const(ref_logprobs) - logp, -c, c)  # log(pi_ref / pi)
    if cfg.kl_estimator == "k1":
      kl = -ref_log_ratio
    else:
      kl = jnp.exp(ref_log_ratio) - 1.0 - ref_log_ratio
  per_token = policy_term + cfg.kl_coef * kl if cfg.kl_coef != 0.0 else policy_term
  gap = jnp.zeros_like(logp)  # the trainer's log-probs against the engine's, not differentiated
  if rollout_logprobs is not None:
    gap = jnp.clip(jax.lax.stop_gradient(logp) - const(rollout_logprobs), -c, c)

  masked_sum = lambda x: jnp.sum(jnp.where(mask, x, 0.0))
  count = lambda x: jnp.sum(mask & x, dtype=jnp.int32)
  return LossSums(
      loss=masked_sum(per_token),
      tokens=jnp.sum(mask, dtype=jnp.int32),
      policy_loss=masked_sum(policy_term),
      kl_ref=masked_sum(kl),
      clip_low=count((adv < 0) & (ratio < 1.0 - cfg.eps_low)),
      clip_high=count((adv > 0) & (ratio > 1.0 + cfg.eps_high)),
      approx_kl=jax.lax.stop_gradient(masked_sum(ratio - 1.0 - log_ratio)),
      entropy=masked_sum(ent),
      is_weight=masked_sum(weight),
      is_zeroed=count(~keep),
      is_weight_min=jnp.min(jnp.where(mask, weight, jnp.inf)),
      is_weight_max=jnp.max(jnp.where(mask, weight, -jnp.inf)),
      rollout_gap=masked_sum(jnp.abs(gap)),
      rollout_k3=masked_sum(jnp.exp(gap) - 1.0 - gap),
      rollout_gap_over_ln2=count(jnp.abs(gap) > jnp.log(2.0)),
  )


_MIN_FIELDS = ("is_weight_min",)
_MAX_FIELDS = ("is_weight_max",)


def combine(a: LossSums, b: LossSums) -> LossSums:
  """Accumulates two micro-batches' sums (min/max fields take the min/max)."""
  out = {}
  for name in LossSums._fields:
    x, y = getattr(a, name), getattr(b, name)
    out[name] = (jnp.minimum(x, y) if name in _MIN_FIELDS else
                 jnp.maximum(x, y) if name in _MAX_FIELDS else x + y)
  return LossSums(**out)


def finalize(sums: LossSums) -> LossMetrics:
  """Divides the global sums once by the global token count."""
  has = sums.tokens > 0
  n = jnp.maximum(sums.tokens, 1).astype(jnp.float32)
  mean = lambda x: jnp.where(has, x / n, 0.0)
  return LossMetrics(
      loss=mean(sums.loss), policy_loss=mean(sums.policy_loss), kl_ref=mean(sums.kl_ref),
      clip_low_frac=mean(sums.clip_low), clip_high_frac=mean(sums.clip_high),
      approx_kl=mean(sums.approx_kl), entropy=mean(sums.entropy),
      is_weight_mean=mean(sums.is_weight),
      is_weight_min=jnp.where(has, sums.is_weight_min, 0.0),
      is_weight_max=jnp.where(has, sums.is_weight_max, 0.0),
      is_zeroed_frac=mean(sums.is_zeroed), rollout_gap=mean(sums.rollout_gap),
      rollout_k3=mean(sums.rollout_k3),
      rollout_gap_over_ln2_frac=mean(sums.rollout_gap_over_ln2), tokens=sums.tokens)
