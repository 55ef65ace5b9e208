"""C-GRPO reward mixing and group-relative advantages (host side, NumPy, pure).

Objective (paper Eq. 13-14). For the G rollouts of one question, with outcome reward
R_o in {0, 1} and citation-aware rubric reward R_r in [0, 1]:

    R_i = (1 - a) * R_o_i + a * R_o_i * R_r_i / max_j R_r_j        (a = 0.3)

where the division is skipped (R_r_i used as is) when max_j R_r_j == 0. Rollouts that are
not `valid` (ill-formed, truncated, over the tool-call limit, failed) get R_i = 0. Then

    A_i = (R_i - mean_j R_j) / (std_j R_j + eps)                    (per group)

Modes (`RewardConfig.mode`):
  "paper"      Eq. 13-14 as above (default).
  "release"    what the authors' release trains with (`--normalize-rubric-reward
               --rubric-only-positive`): the positive branch uses the RAW rubric reward,
               R_i = 0 if R_o_i == 0 else (1 - a) * R_o_i + a * R_r_i.
  "grpo"       outcome only, R_i = R_o_i (the paper's a = 0 baseline; `alpha` is ignored).
  "rubric_all" the paper's ablation "rubric reward for all rollouts" (Table 5): the rubric
               term is added whether or not the answer is right,
               R_i = (1 - a) * R_o_i + a * R_r_i / max_j R_r_j (same max-0 rule), which is the
               release's branch with neither only-positive nor only-negative set.

Choices the paper leaves open, fixed here:
  * The group max of Eq. 14 is taken over all rollouts of the group after the rubric reward
    of invalid rollouts is set to 0 (the release's reward server returns all zeros for an
    unfinished task, so its max sees 0 for them too).
  * std is the sample std (ddof=1, as the release's torch.std) by default, eps = 1e-6;
    `scale_by_std=False` gives the Dr.GRPO-style A_i = R_i - mean_j R_j.
  * A group whose rewards are all equal (max - min <= `equal_tol`) has zero advantages and
    no gradient signal; its fraction is reported, and `filter_zero_gradient=True` marks its
    rollouts as not kept (DAPO-style dynamic filtering: they then drop out of the
    token-count normalizer of the loss, which changes the objective; off by default).

Inputs are [P, G] arrays (P prompts, G rollouts each). Values at invalid positions are
ignored and may be NaN (a failed judge call); valid positions must be finite and in [0, 1].

Usage:
    valid = valid_mask(statuses)  # [P, G] trajectory statuses -> True for "completed"
    out = compute_group_advantages(outcome, rubric, valid, RewardConfig(mode="paper"))
    out.advantages  # [P, G], out.metrics()  # dict of floats for logging
"""
from __future__ import annotations

import dataclasses

import numpy as np

from carr_common.vocab import STATUSES

REWARD_MODES = ("paper", "release", "grpo", "rubric_all")


@dataclasses.dataclass(frozen=True)
class RewardConfig:
  mode: str = "paper"  # "paper" | "release" | "grpo" | "rubric_all" (the module docstring)
  alpha: float = 0.3  # weight of the rubric term (paper: 0.3 best of {0, 0.1, 0.3, 0.5})
  scale_by_std: bool = True  # divide centred rewards by the group std
  std_ddof: int = 1  # 1 = sample std (the release); 0 = population std
  eps: float = 1e-6  # added to the std before dividing
  equal_tol: float = 1e-6  # a group is "zero-gradient" when max - min <= equal_tol
  filter_zero_gradient: bool = False  # drop zero-gradient groups from the batch
  shortcut_threshold: float = 0.5  # a metric, not a reward: right answers with a rubric
  # reward below this count as shortcuts (rollout/shortcut_rate)

  def __post_init__(self):
    if self.mode not in REWARD_MODES:
      raise ValueError(f"RewardConfig.mode must be one of {REWARD_MODES}, got {self.mode!r}")
    if not 0.0 <= self.alpha <= 1.0:
      raise ValueError(f"RewardConfig.alpha must be in [0, 1], got {self.alpha}")
    if self.std_ddof not in (0, 1):
      raise ValueError(f"RewardConfig.std_ddof must be 0 or 1, got {self.std_ddof}")


@dataclasses.dataclass(frozen=True)
class GroupAdvantages:
  rewards: np.ndarray  # [P, G] mixed reward R_i (0 for invalid rollouts)
  advantages: np.ndarray  # [P, G] group-relative advantage (0 in zero-gradient groups)
  keep: np.ndarray  # [P, G] bool; False only for filtered zero-gradient groups
  zero_gradient: np.ndarray  # [P] bool; the group's rewards are all equal
  outcome: np.ndarray  # [P, G] outcome reward used (0 where invalid)
  rubric: np.ndarray  # [P, G] raw rubric reward used (0 where invalid)
  valid: np.ndarray  # [P, G] bool

  def metrics(self) -> dict[str, float]:
    """Batch statistics for logging (keys are relative; the caller adds a prefix)."""
    return {
        "reward_mean": float(self.rewards.mean()),
        "outcome_mean": float(self.outcome.mean()),
        "rubric_mean": float(self.rubric.mean()),
        "valid_frac": float(self.valid.mean()),
        "zero_gradient_group_frac": float(self.zero_gradient.mean()),
        "kept_frac": float(self.keep.mean()),
        "advantage_abs_mean": float(np.abs(self.advantages).mean()),
    }


def valid_mask(statuses) -> np.ndarray:
  """[P, G] bool from trajectory statuses: True only for "completed" rollouts."""
  st = np.asarray(statuses, dtype=object)
  unknown = ~np.isin(st, STATUSES)
  if unknown.any():
    idx = tuple(int(i) for i in np.argwhere(unknown)[0])
    raise ValueError(f"status[{idx}] = {st[idx]!r} is not one of {STATUSES}")
  return st == "completed"


def _checked(name: str, values, valid: np.ndarray) -> np.ndarray:
  """Float64 copy of `values` with invalid positions zeroed; raises naming bad entries."""
  x = np.asarray(values, dtype=np.float64)
  if x.shape != valid.shape:
    raise ValueError(f"{name} has shape {x.shape}, expected {valid.shape} (same as valid)")
  bad = valid & ~(np.isfinite(x) & (x >= 0.0) & (x <= 1.0))
  if bad.any():
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    raise ValueError(f"{name}[{idx}] = {x[idx]!r} is not a finite value in [0, 1] for a valid "
                     f"rollout ({int(bad.sum())} bad entries)")
  return np.where(valid, x, 0.0)


def _normalized_rubric(rubric: np.ndarray) -> np.ndarray:
  """Eq. 14: R_r / max_j R_r over each group (axis -1); R_r as is when the max is 0."""
  group_max = rubric.max(axis=-1, keepdims=True)  # [P, 1]
  return np.where(group_max > 0, rubric / np.where(group_max > 0, group_max, 1.0), rubric)


def _mix(outcome, rubric, valid, cfg: RewardConfig) -> np.ndarray:
  """Mixed reward R [P, G] of each rollout (see the module docstring for the modes)."""
  a = cfg.alpha
  if cfg.mode == "paper":
    r = (1 - a) * outcome + a * outcome * _normalized_rubric(rubric)
  elif cfg.mode == "release":
    r = np.where(outcome > 0, (1 - a) * outcome + a * rubric, 0.0)
  elif cfg.mode == "grpo":
    r = outcome
  else:  # rubric_all
    r = (1 - a) * outcome + a * _normalized_rubric(rubric)
  return np.where(valid, r, 0.0)


def _as_valid(valid, shape) -> np.ndarray:
  v = np.asarray(valid)
  if v.dtype != np.bool_:
    raise ValueError(f"valid must be a bool array, got dtype {v.dtype}")
  if v.ndim != 2 or v.shape != tuple(shape):
    raise ValueError(f"valid has shape {v.shape}; expected [P, G] = {tuple(shape)}")
  return v


def group_advantages(rewards, scale_by_std: bool = True, std_ddof: int = 1,
                     eps: float = 1e-6) -> np.ndarray:
  """A = (R - mean) / (std + eps) over the last axis, or R - mean without std scaling.

  Only the std needs more than `std_ddof` samples per group; without it a group of one is
  fine (its advantage is 0).
  """
  r = np.asarray(rewards, dtype=np.float64)  # [P, G]
  centred = r - r.mean(axis=-1, keepdims=True)
  if not scale_by_std:
    return centred
  if r.shape[-1] - std_ddof < 1:
    raise ValueError(f"group size {r.shape[-1]} is too small for std with ddof={std_ddof}")
  return centred / (r.std(axis=-1, ddof=std_ddof, keepdims=True) + eps)


def compute_group_advantages(outcome, rubric, valid,
                             cfg: RewardConfig = RewardConfig()) -> GroupAdvantages:
  """Rewards, advantages and group statistics for [P, G] outcome/rubric/valid arrays."""
  valid = _as_valid(valid, np.shape(outcome))
  outcome = _checked("outcome", outcome, valid)
  rubric = _checked("rubric", rubric, valid)
  rewards = _mix(outcome, rubric, valid, cfg)
  zero_gradient = (rewards.max(axis=-1) - rewards.min(axis=-1)) <= cfg.equal_tol  # [P]
  adv = group_advantages(rewards, cfg.scale_by_std, cfg.std_ddof, cfg.eps)
  # Equal-within-tolerance groups carry no signal; exact zeros keep them from adding noise.
  adv = np.where(zero_gradient[:, None], 0.0, adv)
  keep = np.ones_like(valid)
  if cfg.filter_zero_gradient:
    keep = np.broadcast_to(~zero_gradient[:, None], valid.shape).copy()
  return GroupAdvantages(rewards=rewards, advantages=adv, keep=keep, zero_gradient=zero_gradient,
                         outcome=outcome, rubric=rubric, valid=valid)
