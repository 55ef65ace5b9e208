"""lab/replay_report.py: step means from each run's TensorBoard, gains from summary.json, the
paired gain difference, and the table printed again from the file it wrote."""
import json
import os

import pytest

from carr_jax.runs import metrics
from lab import replay_report


def _run(out, name, k3_values, mismatch):
  with metrics.MetricsWriter(os.path.join(out, name, "tb")) as writer:
    for step, k3 in enumerate(k3_values, 1):
      writer.scalars(step, {"train/rollout_k3": k3, "train/rollout_gap": 2 * k3,
                            "train/is_zeroed_frac": 0.1, "train/replay_route_mismatch": mismatch})


def test_collect_and_print(tmp_path, capsys):
  out = str(tmp_path)
  summary = {"world_seeds": [0, 1], "seeds": [0, 1],
             "replay": {"start_heldout_accuracy": [0.7, 0.8], "heldout_accuracy": [0.9, 0.9],
                        "heldout_gain": [0.2, 0.1]},
             "noreplay": {"start_heldout_accuracy": [0.7, 0.8], "heldout_accuracy": [0.8, 1.0],
                          "heldout_gain": [0.1, 0.2]}}
  with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f)
  _run(out, "replay_w0_seed0", [0.001, 0.003], 0.02)
  _run(out, "replay_w1_seed1", [0.002], 0.04)
  _run(out, "noreplay_w0_seed0", [0.1, 0.3], 0.0)
  _run(out, "noreplay_w1_seed1", [0.2], 0.0)
  assert replay_report.main([out]) == 0
  result = json.load(open(os.path.join(out, "replay.json")))
  assert result["replay"]["rollout_k3"] == pytest.approx([0.002, 0.002])
  assert result["noreplay"]["rollout_gap"] == pytest.approx([0.4, 0.4])
  assert result["replay"]["route_mismatch"] == pytest.approx([0.02, 0.04])
  assert result["gain_difference"] == pytest.approx([0.1, -0.1])
  first = capsys.readouterr().out
  assert "+0.000 +- 0.100" in first
  assert replay_report.main(["--from", os.path.join(out, "replay.json")]) == 0
  assert capsys.readouterr().out == first
