"""Tests of trajectory packing (carr_jax/rl/packing.py): placement, alignment, buckets.

Run: .venv/bin/python -m pytest tests/carr_jax/test_packing.py -q
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from carr_jax.rl import loss as L
from carr_jax.rl import packing as pk


def _record(rng, n, vocab=50, name=None):
  ids = rng.integers(1, vocab, size=n)
  mask = (rng.uniform(size=n) < 0.6).astype(int)
  mask[:1] = 0
  lps = np.where(mask == 1, -rng.uniform(0.01, 5, size=n), 0.0)
  rec = {"token_ids": ids.tolist(), "loss_mask": mask.tolist(), "rollout_logprobs": lps.tolist()}
  if name is not None:
    rec.update(prompt_id=name, sample_index=0)
  return rec


def _records(seed=0, n=23, lo=1, hi=40):
  rng = np.random.default_rng(seed)
  return [_record(rng, int(k)) for k in rng.integers(lo, hi, size=n)], rng.normal(size=n)


def test_every_token_lands_exactly_once_with_shifted_targets():
  recs, adv = _records()
  b = pk.pack_trajectories(recs, adv, pk.PackingConfig(row_lengths=(16, 64), row_multiple=4))
  assert b.shape[0] % 4 == 0
  assert (b.segment_ids > 0).sum() == sum(max(len(r["token_ids"]) - 1, 0) for r in recs)
  for i, r in enumerate(recs):
    ids, mask, lps = (np.asarray(r[k]) for k in ("token_ids", "loss_mask", "rollout_logprobs"))
    where = b.trajectory_index == i
    if len(ids) < 2:
      assert not where.any()
      continue
    rows = np.nonzero(where.any(axis=1))[0]
    assert len(rows) == 1  # one contiguous segment in one row
    cols = np.nonzero(where[rows[0]])[0]
    np.testing.assert_array_equal(cols, np.arange(cols[0], cols[0] + len(ids) - 1))
    sl = (rows[0], cols)
    np.testing.assert_array_equal(b.tokens[sl], ids[:-1])
    np.testing.assert_array_equal(b.targets[sl], ids[1:])
    np.testing.assert_array_equal(b.loss_mask[sl], mask[1:] == 1)
    np.testing.assert_allclose(b.rollout_logprobs[sl], lps[1:], rtol=1e-7)
    np.testing.assert_allclose(b.advantages[sl], adv[i], rtol=1e-7)
    np.testing.assert_array_equal(b.positions[sl], np.arange(len(ids) - 1))
    assert len(set(b.segment_ids[sl].tolist())) == 1
  assert int(b.loss_mask.sum()) == sum(sum(r["loss_mask"]) for r in recs)


def test_segments_and_positions():
  recs, adv = _records(seed=1)
  b = pk.pack_trajectories(recs, adv, pk.PackingConfig(row_lengths=(48,)))
  for r in range(b.shape[0]):
    seg, pos = b.segment_ids[r], b.positions[r]
    real = seg > 0
    n = real.sum()
    assert real[:n].all() and not real[n:].any()  # segments first, padding at the end
    assert (np.diff(seg[:n]) >= 0).all() and (np.diff(seg[:n]) <= 1).all()
    assert seg[0] == 1 or n == 0
    starts = np.r_[True, np.diff(seg[:n]) == 1]
    np.testing.assert_array_equal(pos[:n][starts], 0)  # restart at each new segment
    np.testing.assert_array_equal(np.diff(pos[:n])[~starts[1:]], 1)
    assert (pos[n:] == 0).all() and (b.trajectory_index[r, n:] == -1).all()
    assert not b.loss_mask[r, n:].any() and (b.advantages[r, n:] == 0).all()


def test_no_prediction_across_segment_boundaries():
  # Two trajectories in one row: the slot before the boundary predicts the first
  # trajectory's LAST token, never the second trajectory's first token.
  recs = [{"token_ids": [10, 11, 12], "loss_mask": [0, 1, 1], "rollout_logprobs": [0, -.1, -.2]},
          {"token_ids": [20, 21, 22, 23], "loss_mask": [0, 0, 1, 1],
           "rollout_logprobs": [0, 0, -.3, -.4]}]
  b = pk.pack_trajectories(recs, [1.0, -1.0], pk.PackingConfig(row_lengths=(8,)))
  assert b.shape == (1, 8)
  # FFD places the longer one first in the row, but slots follow input order.
  np.testing.assert_array_equal(b.tokens[0], [10, 11, 20, 21, 22, 0, 0, 0])
  np.testing.assert_array_equal(b.targets[0], [11, 12, 21, 22, 23, 0, 0, 0])
  np.testing.assert_array_equal(b.loss_mask[0], [1, 1, 0, 1, 1, 0, 0, 0])
  np.testing.assert_allclose(b.rollout_logprobs[0], [-.1, -.2, 0, -.3, -.4, 0, 0, 0])
  np.testing.assert_array_equal(b.segment_ids[0], [1, 1, 2, 2, 2, 0, 0, 0])
  np.testing.assert_array_equal(b.positions[0], [0, 1, 0, 1, 2, 0, 0, 0])
  np.testing.assert_array_equal(b.advantages[0], [1, 1, -1, -1, -1, 0, 0, 0])


def test_alignment_with_chunked_logprobs_matches_unpacked_bigram_model():
  # A bigram "model" (hidden state = embedding of the input token): the packed log-prob at
  # each generated slot must equal log p(x_{j+1} | x_j) computed on the unpacked trajectory.
  rng = np.random.default_rng(3)
  vocab, d = 50, 8
  emb = rng.normal(size=(vocab, d)).astype(np.float32)
  w = rng.normal(size=(d, vocab)).astype(np.float32)
  recs, adv = _records(seed=3, n=9, lo=2, hi=20)
  b = pk.pack_trajectories(recs, adv, pk.PackingConfig(row_lengths=(24, 48)))
  logp, _ = L.chunked_token_logprobs(jnp.asarray(emb[b.tokens]), jnp.asarray(w),
                                     jnp.asarray(b.targets), 1.0, 16)
  logp = np.asarray(logp)
  table = np.asarray(jax.nn.log_softmax(emb @ w, axis=-1))  # [V, V]: log p(next | prev)
  for i, r in enumerate(recs):
    ids, mask = np.asarray(r["token_ids"]), np.asarray(r["loss_mask"])
    want = table[ids[:-1], ids[1:]][mask[1:] == 1]
    got = logp[(b.trajectory_index == i) & b.loss_mask]
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_deterministic():
  recs, adv = _records(seed=4)
  cfg = pk.PackingConfig(row_lengths=(16, 32, 64), row_multiple=2)
  a = pk.pack_trajectories(recs, adv, cfg)
  b = pk.pack_trajectories([dict(r) for r in recs], list(adv), cfg)
  for k, x in a.arrays().items():
    np.testing.assert_array_equal(x, b.arrays()[k], err_msg=k)
  np.testing.assert_array_equal(a.trajectory_index, b.trajectory_index)


def _lengths_to_records(slot_lengths):
  rng = np.random.default_rng(0)
  return [_record(rng, n + 1) for n in slot_lengths]


@pytest.mark.parametrize("slots,row_lengths,multiple,want_shape", [
    # 4 x 10 slots: 16-rows need 4 rows (64 slots), 32-rows need 2 (64): tie -> shorter.
    ([10, 10, 10, 10], (16, 32), 1, (4, 16)),
    # 3 x 20 slots: 32-rows hold one each (3 x 32 = 96 slots), one 64-row holds all (64).
    ([20, 20, 20], (16, 32, 64), 1, (1, 64)),
    # Same items, rows must be a multiple of 4: 4 x 32 = 128 < 4 x 64 = 256.
    ([20, 20, 20], (16, 32, 64), 4, (4, 32)),
    # Many short items: the shortest bucket packs them densely.
    ([3] * 10, (8, 64), 1, (5, 8)),
    # Empty batch: one multiple of padding rows of the shortest bucket.
    ([], (8, 64), 2, (2, 8)),
])
def test_bucket_selection(slots, row_lengths, multiple, want_shape):
  cfg = pk.PackingConfig(row_lengths=row_lengths, row_multiple=multiple)
  b = pk.pack_trajectories(_lengths_to_records(slots), np.zeros(len(slots)), cfg)
  assert b.shape == want_shape
  np.testing.assert_allclose(b.efficiency, sum(slots) / (want_shape[0] * want_shape[1]))


def test_first_fit_decreasing_hand_case():
  # capacity 10: 7 -> row 0, 5 -> row 1, 3 -> row 0, 3 -> row 1, 2 -> row 1.
  np.testing.assert_array_equal(pk.first_fit_decreasing([3, 7, 2, 5, 3], 10), [0, 0, 1, 1, 1])


def test_overflow_error_and_truncate():
  recs = _lengths_to_records([5, 30])
  with pytest.raises(ValueError, match=r"trajectory 1: 31 tokens need 30 slots"):
    pk.pack_trajectories(recs, [0.5, 1.0],
                         pk.PackingConfig(row_lengths=(8, 16), overflow="error"))
  b = pk.pack_trajectories(recs, [0.5, 1.0],
                           pk.PackingConfig(row_lengths=(8, 16), overflow="truncate"))
  assert b.num_truncated == 1 and b.shape[1] == 16
  where = b.trajectory_index == 1
  ids = np.asarray(recs[1]["token_ids"])
  np.testing.assert_array_equal(b.tokens[where], ids[:16])  # the head is kept
  np.testing.assert_array_equal(b.targets[where], ids[1:17])
  np.testing.assert_array_equal(b.loss_mask[where], np.asarray(recs[1]["loss_mask"][1:17]) == 1)


@pytest.mark.parametrize("lengths,rows", [((5, 30, 1, 12), (8, 16)), ((3, 9, 20), (64,))])
def test_loss_token_count_is_the_packed_loss_mask_sum(lengths, rows):
  """With and without truncation (the first case cuts the 30-token trajectory to 16 slots)."""
  recs = [_record(np.random.default_rng(n), n) for n in lengths]
  cfg = pk.PackingConfig(row_lengths=rows, overflow="truncate")
  packed = pk.pack_trajectories(recs, np.ones(len(recs)), cfg)
  assert pk.loss_token_count(recs, cfg) == int(packed.loss_mask.sum()) > 0
  if max(lengths) - 1 > max(rows):
    assert packed.num_truncated == 1
    assert pk.loss_token_count(recs, cfg) < sum(sum(r["loss_mask"][1:]) for r in recs)


@pytest.mark.parametrize("mutate,match", [
    (lambda r: r.pop("loss_mask"), r"trajectory 0 \(p0/0\): missing field 'loss_mask'"),
    (lambda r: r["rollout_logprobs"].pop(), r"rollout_logprobs has length"),
    (lambda r: r["loss_mask"].__setitem__(0, 1), r"loss_mask\[0\] is 1"),
    (lambda r: r["loss_mask"].__setitem__(2, 2), r"loss_mask must hold only 0/1"),
    (lambda r: r["token_ids"].__setitem__(1, 999), r"token_ids out of range \[0, 100\)"),
])
def test_bad_records_name_the_field(mutate, match):
  rec = _record(np.random.default_rng(5), 6, name="p0")
  mutate(rec)
  with pytest.raises(ValueError, match=match):
    pk.pack_trajectories([rec], [0.0], pk.PackingConfig(row_lengths=(8,), vocab_size=100))


def test_bad_advantages_and_config():
  recs = _lengths_to_records([3])
  with pytest.raises(ValueError, match="advantages has 2 entries for 1 records"):
    pk.pack_trajectories(recs, [0.0, 1.0], pk.PackingConfig(row_lengths=(8,)))
  with pytest.raises(ValueError, match=r"advantages\[0\] is not finite"):
    pk.pack_trajectories(recs, [np.nan], pk.PackingConfig(row_lengths=(8,)))
  with pytest.raises(ValueError, match="PackingConfig.overflow"):
    pk.PackingConfig(overflow="drop")


def test_coarse_row_counts_bound_padding_and_distinct_shapes():
  counts = [pk.coarse_count(n) for n in range(1, 513)]
  assert all(m >= n and m <= 1.25 * n for n, m in zip(range(1, 513), counts))
  assert counts == sorted(counts)
  assert len(set(counts)) <= 4 * 10  # O(log n) distinct values up to 512


def test_loss_positions_bucket_and_order():
  mask = np.zeros((3, 300), bool)
  mask[0, [4, 9, 299]] = True
  mask[1, 10:110] = True
  index, valid = pk.loss_positions(mask, multiple=32)
  assert index.shape == valid.shape == (3, 128)  # 100 rounded up to a multiple of 32
  assert index[0, :3].tolist() == [4, 9, 299] and valid[0].sum() == 3
  assert index[1, :100].tolist() == list(range(10, 110)) and valid[2].sum() == 0
  assert (index[valid == 0] == 0).all()
  # 9 multiples (binary 1001) round up to 10 (1010): at most 3 significant bits; capped at S.
  mask = np.zeros((1, 400), bool)
  mask[0, :9 * 32] = True
  assert pk.loss_positions(mask, multiple=32)[0].shape == (1, 320)
  assert pk.loss_positions(np.zeros((2, 16), bool), multiple=64)[0].shape == (2, 16)
  with pytest.raises(ValueError, match="multiple must be >= 1"):
    pk.loss_positions(mask, multiple=0)

