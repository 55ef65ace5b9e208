"""rollout/routes.py: routed experts stored compactly, SGLang's encoding read, bad routes named.

  python -m pytest tests/rollout/test_routes.py -q
"""
import base64

import numpy as np
import pytest

from rollout import routes


def test_the_dtype_is_the_smallest_that_holds_every_expert():
  assert routes.route_dtype(128) == np.uint8 and routes.route_dtype(256) == np.uint8
  assert routes.route_dtype(257) == np.uint16 and routes.route_dtype(65536) == np.uint16
  with pytest.raises(ValueError, match="num_experts"):
    routes.route_dtype(65537)
  ids = np.array([[[0, 255]], [[17, 3]]])  # [2 positions, 1 layer, k = 2]
  small = routes.compact(ids, 256)
  assert small.dtype == np.uint8 and small.tolist() == ids.tolist()
  with pytest.raises(ValueError, match=r"in \[0, 200\)"):
    routes.compact(ids, 200)


def test_sglang_base64_int32_decodes_to_positions_layers_k():
  ids = np.arange(2 * 3 * 4, dtype="<i4").reshape(2, 3, 4)  # 2 positions, 3 layers, top-4
  b64 = base64.b64encode(ids.tobytes()).decode()
  assert routes.decode_sglang(b64, layers=3, k=4).tolist() == ids.tolist()
  with pytest.raises(ValueError, match=r"not a whole number of \[5, 4\]"):
    routes.decode_sglang(b64, layers=5, k=4)  # 96 bytes are not n x 5 x 4 int32


def test_json_round_trip_keeps_dtype_and_values():
  for n in (100, 1000):
    ids = routes.compact(np.random.default_rng(0).integers(0, n, (5, 2, 3)), n)
    back = routes.from_json(routes.to_json(ids))
    assert back.dtype == ids.dtype and np.array_equal(back, ids)
  with pytest.raises(ValueError, match="uint8 or uint16"):
    routes.from_json({"dtype": "<f4", "shape": [1], "b64": "AAAAAA=="})


def test_check_names_missing_misshaped_and_out_of_range_routes():
  record = {"token_ids": [1, 2, 3, 4]}  # 3 positions the trainer computes
  assert routes.check(record, layers=2, k=2, num_experts=8) == "no routed_experts"
  good = np.zeros((3, 2, 2), np.uint8)
  assert routes.check({**record, routes.KEY: good}, 2, 2, 8) is None
  assert routes.check({**record, routes.KEY: routes.to_json(good)}, 2, 2, 8) is None
  assert routes.check({**record, routes.KEY: good[:2]}, 2, 2, 8) == (
      "routed_experts shape (2, 2, 2), want (3, 2, 2)")
  bad = good.copy()
  bad[1, 0, 1] = 8
  assert routes.check({**record, routes.KEY: bad}, 2, 2, 8) == (
      "routed_experts ids in [0, 8], outside [0, 8)")
  assert routes.check({**record, routes.KEY: good.astype(np.float32)}, 2, 2, 8) == (
      "routed_experts dtype float32 is not an integer type")
  assert routes.check({**record, routes.KEY: {"dtype": "u1", "shape": [3, 2, 2], "b64": "!"}},
                      2, 2, 8).startswith("routed_experts unreadable")
