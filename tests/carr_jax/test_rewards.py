"""Table tests of C-GRPO reward mixing and group advantages (carr_jax/rl/rewards.py).

Expected values are worked by hand from paper Eq. 13-14 and the release's branch.
Run: .venv/bin/python -m pytest tests/carr_jax/test_rewards.py -q
"""
import numpy as np
import pytest

from carr_jax.rl import rewards as rw

T, F = True, False
NAN = float("nan")

# (case, mode, outcome, rubric, valid, expected R); one group of G = 4, a = 0.3.
MIX_CASES = [
    ("all_wrong", "paper", [0, 0, 0, 0], [0.9, 0.5, 0.1, 0.0], [T] * 4, [0, 0, 0, 0]),
    ("all_wrong", "release", [0, 0, 0, 0], [0.9, 0.5, 0.1, 0.0], [T] * 4, [0, 0, 0, 0]),
    # The group max (0.8) comes from a WRONG rollout: 0.7 + 0.3 * 0.4 / 0.8.
    ("one_right", "paper", [1, 0, 0, 0], [0.4, 0.8, 0, 0.2], [T] * 4, [0.85, 0, 0, 0]),
    ("one_right", "release", [1, 0, 0, 0], [0.4, 0.8, 0, 0.2], [T] * 4, [0.82, 0, 0, 0]),
    ("one_right", "grpo", [1, 0, 0, 0], [0.4, 0.8, 0, 0.2], [T] * 4, [1, 0, 0, 0]),
    ("one_right", "rubric_all", [1, 0, 0, 0], [0.4, 0.8, 0, 0.2], [T] * 4,
     [0.85, 0.3, 0, 0.075]),
    ("max_rubric_0", "paper", [1, 1, 0, 0], [0, 0, 0, 0], [T] * 4, [0.7, 0.7, 0, 0]),
    ("max_rubric_0", "rubric_all", [1, 1, 0, 0], [0, 0, 0, 0], [T] * 4, [0.7, 0.7, 0, 0]),
    ("two_right", "paper", [1, 1, 0, 0], [0.5, 0.25, 0, 0], [T] * 4, [1.0, 0.85, 0, 0]),
    ("two_right", "release", [1, 1, 0, 0], [0.5, 0.25, 0, 0], [T] * 4, [0.85, 0.775, 0, 0]),
    # Invalid rollouts get 0 and their rubric (even NaN, or 1.0) does not set the max.
    ("invalid", "paper", [1, 1, 1, 0], [0.5, 1.0, NAN, 0], [T, F, F, T], [1.0, 0, 0, 0]),
    ("invalid", "release", [1, 1, 1, 0], [0.5, 1.0, NAN, 0], [T, F, F, T], [0.85, 0, 0, 0]),
    ("invalid", "rubric_all", [0, 1, NAN, 0], [0.5, 1.0, NAN, 0.25], [T, F, F, T],
     [0.3, 0, 0, 0.15]),
]


def mixed(outcome, rubric, valid, mode="paper", alpha=0.3):
  """The mixed rewards R [P, G] that the trainer's `compute_group_advantages` uses."""
  return rw.compute_group_advantages(outcome, rubric, valid,
                                     rw.RewardConfig(mode=mode, alpha=alpha)).rewards


@pytest.mark.parametrize("case,mode,outcome,rubric,valid,expected", MIX_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in MIX_CASES])
def test_mix_rewards_table(case, mode, outcome, rubric, valid, expected):
  got = mixed([outcome], [rubric], np.array([valid]), mode=mode, alpha=0.3)
  np.testing.assert_allclose(got, [expected], rtol=0, atol=1e-12)


def test_paper_with_alpha_zero_is_grpo():
  rng = np.random.default_rng(0)
  outcome = rng.integers(0, 2, size=(5, 8)).astype(float)
  rubric = rng.uniform(size=(5, 8))
  valid = rng.uniform(size=(5, 8)) > 0.2
  np.testing.assert_array_equal(
      mixed(outcome, rubric, valid, mode="paper", alpha=0.0),
      mixed(outcome, rubric, valid, mode="grpo"))


def test_groups_are_independent():
  # The Eq. 14 max is per group: group 2's large rubric must not rescale group 1.
  got = mixed([[1, 0], [1, 0]], [[0.2, 0.1], [0.4, 1.0]], np.ones((2, 2), bool))
  np.testing.assert_allclose(got, [[1.0, 0.0], [0.7 + 0.3 * 0.4, 0.0]], atol=1e-12)


# (scale_by_std, ddof, expected A) for R = [1, 0, 0, 0] (grpo, one right of four).
ADV_CASES = [
    (True, 1, np.array([0.75, -0.25, -0.25, -0.25]) / (0.5 + 1e-6)),
    (True, 0, np.array([0.75, -0.25, -0.25, -0.25]) / (np.sqrt(0.1875) + 1e-6)),
    (False, 1, [0.75, -0.25, -0.25, -0.25]),
]


@pytest.mark.parametrize("scale_by_std,ddof,expected", ADV_CASES)
def test_advantages_std_and_no_std(scale_by_std, ddof, expected):
  cfg = rw.RewardConfig(mode="grpo", scale_by_std=scale_by_std, std_ddof=ddof)
  out = rw.compute_group_advantages([[1, 0, 0, 0]], [[0, 0, 0, 0]], np.ones((1, 4), bool), cfg)
  np.testing.assert_allclose(out.advantages, [expected], rtol=1e-12)
  np.testing.assert_allclose(out.advantages.sum(), 0.0, atol=1e-12)


def test_advantages_match_independent_formula_on_random_groups():
  rng = np.random.default_rng(1)
  outcome = rng.integers(0, 2, size=(6, 8)).astype(float)
  rubric = rng.uniform(size=(6, 8))
  valid = rng.uniform(size=(6, 8)) > 0.1
  out = rw.compute_group_advantages(outcome, rubric, valid, rw.RewardConfig())
  for p in range(6):
    o = np.where(valid[p], outcome[p], 0.0)
    r = np.where(valid[p], rubric[p], 0.0)
    m = r.max()
    rew = 0.7 * o + 0.3 * o * (r / m if m > 0 else r)
    np.testing.assert_allclose(out.rewards[p], rew, atol=1e-12)
    if np.ptp(rew) <= 1e-6:
      np.testing.assert_array_equal(out.advantages[p], 0.0)
    else:
      sd = np.sqrt(((rew - rew.mean()) ** 2).sum() / 7)
      np.testing.assert_allclose(out.advantages[p], (rew - rew.mean()) / (sd + 1e-6), rtol=1e-10)


def test_degenerate_groups_reported_and_filtered():
  outcome = [[0, 0, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 1]]
  rubric = [[0.3, 0.1, 0, 0], [0.5, 0.5, 0.5, 0.5], [0.2, 0, 0, 0], [1.0, 0.5, 0.5, 0.5]]
  valid = np.ones((4, 4), bool)
  out = rw.compute_group_advantages(outcome, rubric, valid, rw.RewardConfig())
  # all wrong -> all 0; all right with equal rubric -> all 1.0; both carry no gradient.
  np.testing.assert_array_equal(out.zero_gradient, [T, T, F, F])
  np.testing.assert_array_equal(out.advantages[:2], 0.0)
  assert np.all(out.advantages[2:].std(axis=1) > 0)
  assert out.keep.all()
  m = out.metrics()
  assert m["zero_gradient_group_frac"] == 0.5 and m["kept_frac"] == 1.0

  filtered = rw.compute_group_advantages(outcome, rubric, valid,
                                         rw.RewardConfig(filter_zero_gradient=True))
  np.testing.assert_array_equal(filtered.keep, np.repeat([[F], [F], [T], [T]], 4, axis=1))
  np.testing.assert_array_equal(filtered.advantages, out.advantages)
  assert filtered.metrics()["kept_frac"] == 0.5


def test_all_invalid_group_is_zero():
  out = rw.compute_group_advantages([[1, 1, 1]], [[1, 1, 1]], np.zeros((1, 3), bool))
  np.testing.assert_array_equal(out.rewards, 0.0)
  np.testing.assert_array_equal(out.advantages, 0.0)
  assert out.metrics()["valid_frac"] == 0.0


@pytest.mark.parametrize("kwargs,match", [
    (dict(outcome=[[1, 0]], rubric=[[1.5, 0]], valid=[[T, T]]), r"rubric\[\(0, 0\)\]"),
    (dict(outcome=[[1, NAN]], rubric=[[0, 0]], valid=[[T, T]]), r"outcome\[\(0, 1\)\]"),
    (dict(outcome=[[1, 0]], rubric=[[0, 0, 0]], valid=[[T, T]]), r"rubric has shape"),
    (dict(outcome=[[1, 0]], rubric=[[0, 0]], valid=[[1, 1]]), r"valid must be a bool"),
    (dict(outcome=[1, 0], rubric=[0, 0], valid=[T, T]), r"valid has shape"),
])
def test_bad_input_names_the_field(kwargs, match):
  kwargs["valid"] = np.array(kwargs["valid"])
  with pytest.raises(ValueError, match=match):
    rw.compute_group_advantages(cfg=rw.RewardConfig(), **kwargs)


def test_bad_config_names_the_field():
  with pytest.raises(ValueError, match="RewardConfig.mode"):
    rw.RewardConfig(mode="outcome")
  with pytest.raises(ValueError, match="RewardConfig.alpha"):
    rw.RewardConfig(alpha=1.5)


def test_valid_mask_from_statuses():
  statuses = [["completed", "truncated", "ill_formed"], ["tool_limit", "failed", "completed"]]
  np.testing.assert_array_equal(rw.valid_mask(statuses), [[T, F, F], [F, F, T]])
  with pytest.raises(ValueError, match=r"status\[\(1, 0\)\] = 'done'"):
    rw.valid_mask([["completed"], ["done"]])


def test_group_of_one_without_std_scaling_has_zero_advantage():
  cfg = rw.RewardConfig(scale_by_std=False)
  out = rw.compute_group_advantages([[1.0], [0.0]], [[0.5], [1.0]], [[True], [True]], cfg)
  assert out.advantages.shape == (2, 1)
  np.testing.assert_array_equal(out.advantages, 0.0)
  with pytest.raises(ValueError, match="group size 1 is too small for std with ddof=1"):
    rw.compute_group_advantages([[1.0]], [[0.5]], [[True]], rw.RewardConfig())
  single = rw.group_advantages([[0.2]], scale_by_std=True, std_ddof=0)  # population std: ok
  np.testing.assert_array_equal(single, 0.0)
