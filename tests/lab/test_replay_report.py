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


def test_saved_files_merge_into_one_table(tmp_path, capsys):
  def saved(name, world, gain, k3):
    rows = {"start_heldout_accuracy": [0.7], "heldout_accuracy": [0.7 + gain],
            "heldout_gain": [gain], "rollout_k3": [k3], "rollout_gap": [k3],
            "is_zeroed": [0.0], "route_mismatch": [0.01]}
    path = tmp_path / name
    path.write_text(json.dumps({"world_seeds": [world], "seeds": [world], "replay": rows,
                                "noreplay": {**rows, "heldout_gain": [0.1]},
                                "gain_difference": [gain - 0.1]}))
    return str(path)
  a, b = saved("a.json", 0, 0.3, 1e-3), saved("b.json", 1, 0.1, 3e-3)
  assert replay_report.main(["--from", a, b]) == 0
  out = capsys.readouterr().out
  assert "runs: w0/s0, w1/s1" in out
  assert "held-out gain, replay - no replay (paired over runs): +0.100 +- 0.100" in out
  assert "0.002 +- 0.001 (0.001, 0.003)" in out  # rollout_k3 over both files
  with pytest.raises(SystemExit):  # the same run twice
    replay_report.main(["--from", a, a])
