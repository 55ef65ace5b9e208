"""lab.shortcuts: the comparison's summary.json, table and plot from real run files.

The run directories are written with the trainer's own writers (`metrics.MetricsWriter` for
TensorBoard scalars, `heldout.save` for held-out evaluations), so the report reads exactly
what `carr_jax.train` leaves behind; the expected numbers are worked out here by hand.

  python -m pytest tests/carr_jax/test_shortcut_report.py -q
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from lab import shortcut_report as report_cli
from carr_jax.evaluation import heldout
from lab import shortcuts as shortcut_report
from carr_jax.runs import metrics


def _run(workdir, tool_calls, accuracy, shortcut):
  """A finished run: per-step scalars, evaluations at step 0 and at the last step."""
  with metrics.MetricsWriter(os.path.join(workdir, "tb"), process_index=0) as w:
    for step, calls in enumerate(tool_calls, 1):
      w.scalars(step, {"judge/outcome_reward_mean": 0.5, "judge/rubric_reward_mean": 0.25,
                       "rollout/tool_calls": calls, "judge/shortcut_rate": 0.5})
  for step, acc, rate in ((0, 0.5, 0.5), (len(tool_calls), accuracy, shortcut)):
    heldout.save(workdir, step, np.array([acc]), 2,
                 {"eval/accuracy": acc, "eval/shortcut_admitting_rate": rate,
                  "eval/cited_pages": 1.0 - rate})


def test_summary_table_and_plot(tmp_path):
  steps = 20  # first / last 10% = 2 steps each
  for seed in (0, 1, 2):
    _run(str(tmp_path / f"grpo_seed{seed}"), [1.0] * 2 + [0.5] * 16 + [0.0] * 2, 0.9, 0.8)
    _run(str(tmp_path / f"cgrpo_seed{seed}"), [0.5] * 2 + [0.7] * 16 + [1.0 + seed] * 2,
         0.9 + 0.01 * seed, 0.1)
  summary = shortcut_report.write_report(str(tmp_path), wall_s=12.5)
  assert summary["seeds"] == [0, 1, 2] and summary["wall_time_s"] == 12.5
  grpo, cgrpo = summary["grpo"], summary["cgrpo"]
  assert grpo["tool_calls_first"] == [1.0] * 3 and grpo["tool_calls_last"] == [0.0] * 3
  assert cgrpo["tool_calls_first"] == [0.5] * 3
  assert cgrpo["tool_calls_last"] == [1.0, 2.0, 3.0]
  assert cgrpo["heldout_accuracy"] == pytest.approx([0.9, 0.91, 0.92])
  assert grpo["shortcut_rate"] == [0.8] * 3 and cgrpo["shortcut_rate"] == [0.1] * 3
  assert cgrpo["cited_pages"] == pytest.approx([0.9] * 3)
  assert grpo["start_heldout_accuracy"] == [0.5] * 3
  assert len(cgrpo["runs"][0]["steps"]["tool_calls"]) == steps
  on_disk = json.loads((tmp_path / "summary.json").read_text())
  assert on_disk["cgrpo"]["tool_calls_last"] == [1.0, 2.0, 3.0]
  table = (tmp_path / "table.md").read_text()
  assert "| tool_calls_last | 0.000 +- 0.000 (0.000, 0.000, 0.000) | 2.000 +- 0.577" in table
  assert (tmp_path / "shortcuts.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_one_seed_states_no_spread(tmp_path):
  """With one seed there is no standard error: the table gives the value, not "+- nan"."""
  _run(str(tmp_path / "grpo_seed2"), [1.0, 1.0], 0.75, 0.5)
  _run(str(tmp_path / "cgrpo_seed2"), [1.0, 2.0], 0.875, 0.25)
  shortcut_report.write_report(str(tmp_path), wall_s=1.0)
  table = (tmp_path / "table.md").read_text()
  assert "| heldout_accuracy | 0.750 (0.750) | 0.875 (0.875) |" in table
  assert "+- nan" not in table


def test_agreement_without_cited_answers_is_not_zero(tmp_path):
  """A policy that cites nothing has no agreement share (the trainer logs 0 with
  answers_citing_received 0): nan for that run, and the mean over the other seeds says so."""
  for seed, (cited, agrees) in enumerate(((4.0, 1.0), (0.0, 0.0), (2.0, 0.5))):
    for m in ("grpo", "cgrpo"):
      workdir = str(tmp_path / f"{m}_seed{seed}")
      _run(workdir, [1.0, 1.0], 0.5, 0.5)
      heldout.save(workdir, 3, np.array([0.5]), 2,
                   {"eval/accuracy": 0.5, "eval/shortcut_admitting_rate": 0.5,
                    "eval/cited_pages": 1.0, "eval/answers_citing_received": cited,
                    "eval/answer_agrees_with_cited": agrees})
  summary = shortcut_report.write_report(str(tmp_path))
  agreement = summary["grpo"]["answer_agrees_with_cited"]
  assert agreement[0] == 1.0 and np.isnan(agreement[1]) and agreement[2] == 0.5
  assert "| answer_agrees_with_cited | 0.750 +- 0.250 over 2 of 3 seeds (1.000, nan, 0.500)" in (
      tmp_path / "table.md").read_text()


def test_unpaired_seeds_are_refused(tmp_path):
  _run(str(tmp_path / "grpo_seed0"), [1.0], 0.5, 0.5)
  _run(str(tmp_path / "cgrpo_seed1"), [1.0], 0.5, 0.5)
  with pytest.raises(ValueError, match=r"same \(world, seed\) pairs"):
    shortcut_report.summarize(str(tmp_path))
  assert report_cli.main([str(tmp_path)]) == 2


def test_edge_mean():
  assert shortcut_report.edge_mean([1.0, 2.0, 3.0], last=False) == 1.0
  assert shortcut_report.edge_mean([1.0, 2.0, 3.0], last=True) == 3.0
  assert shortcut_report.edge_mean(list(range(30)), last=True) == 28.0  # 27, 28, 29
  assert np.isnan(shortcut_report.edge_mean([], last=True))


def test_a_method_set_with_the_ablations(tmp_path):
  """The chain comparison's four methods: one column each, full_chain_rate read from eval."""
  methods = ("grpo", "cgrpo", "noconn", "rubric")
  for k, m in enumerate(methods):
    for seed in (0, 1):
      workdir = str(tmp_path / f"{m}_seed{seed}")
      _run(workdir, [1.0, 1.0], 0.8, 0.2)
      heldout.save(workdir, 3, np.array([0.8]), 2,
                   {"eval/accuracy": 0.8, "eval/shortcut_admitting_rate": 0.2,
                    "eval/cited_pages": 2.0, "eval/full_chain_rate": 0.25 * k + 0.1 * seed})
  summary = shortcut_report.write_report(str(tmp_path), methods=methods)
  assert summary["methods"] == list(methods)
  assert summary["rubric"]["full_chain_rate"] == pytest.approx([0.75, 0.85])
  assert np.isnan(summary["grpo"]["start_full_chain_rate"]).all()  # step 0 did not record it
  header = (tmp_path / "table.md").read_text().splitlines()[0]
  assert header == ("| metric (runs: w0/s0, w0/s1) | GRPO | C-GRPO | C-GRPO, no connectivity | "
                    "C-GRPO, a = 1.0 |")
  with pytest.raises(ValueError, match=r"same \(world, seed\) pairs"):
    shortcut_report.summarize(str(tmp_path), methods=("grpo", "alpha01"))
  with pytest.raises(ValueError, match="methods must be"):
    shortcut_report.summarize(str(tmp_path), methods=("grpo", "ppo"))
  assert report_cli.main([str(tmp_path), "--methods", "grpo,cgrpo,noconn,rubric"]) == 0


def test_unconnected_shares_of_the_first_steps_and_of_each_evaluation(tmp_path):
  """`unconnected_first`: the mean of `judge/unconnected_rate` over the first 10% of steps
  (here 2 of 20); `unconnected_rate` and its start from the evaluations; nan when a run never
  logged them."""
  for m in ("grpo", "cgrpo"):
    workdir = str(tmp_path / f"{m}_seed0")
    _run(workdir, [1.0] * 20, 0.8, 0.2)
    if m == "cgrpo":
      with metrics.MetricsWriter(os.path.join(workdir, "tb"), process_index=0) as w:
        for step in range(1, 21):
          w.scalars(step, {"judge/unconnected_rate": 0.5 if step == 1 else 0.25 / step})
      for step, rate in ((0, 0.375), (20, 0.0625)):
        heldout.save(workdir, step, np.array([0.8]), 2,
                     {"eval/accuracy": 0.8, "eval/shortcut_admitting_rate": 0.2,
                      "eval/cited_pages": 1.0, "eval/unconnected_rate": rate})
  summary = shortcut_report.summarize(str(tmp_path))
  assert summary["cgrpo"]["unconnected_first"] == pytest.approx([(0.5 + 0.125) / 2])
  assert summary["cgrpo"]["start_unconnected_rate"] == [0.375]
  assert summary["cgrpo"]["unconnected_rate"] == [0.0625]
  assert all(np.isnan(summary["grpo"][k][0]) for k in
             ("unconnected_first", "start_unconnected_rate", "unconnected_rate"))


def test_paired_end_difference_against_the_first_method(tmp_path):
  """vs_first: each method's last held-out accuracy minus the first method's, same seed,
  paired over the questions (worked by hand: differences [0.5, 0, 0, 0] -> 0.125 +- 0.125)."""
  for m, last in (("cgrpo", [0.5, 1.0, 1.0, 0.0]), ("overlap", [1.0, 1.0, 1.0, 0.0])):
    workdir = str(tmp_path / f"{m}_seed0")
    _run(workdir, [1.0, 1.0], 0.5, 0.5)
    heldout.save(workdir, 3, np.array(last), 4,
                 {"eval/accuracy": float(np.mean(last)), "eval/shortcut_admitting_rate": 0.0,
                  "eval/cited_pages": 1.0})
  summary = shortcut_report.write_report(str(tmp_path), methods=("cgrpo", "overlap"))
  assert summary["cgrpo"]["vs_first"] == [0.0] and summary["cgrpo"]["vs_first_se"] == [0.0]
  assert summary["overlap"]["vs_first"] == pytest.approx([0.125])
  assert summary["overlap"]["vs_first_se"] == pytest.approx([0.125])
  header = (tmp_path / "table.md").read_text().splitlines()[0]
  assert header == "| metric (runs: w0/s0) | C-GRPO | C-GRPO, k = 1 |"


def _evaluated(workdir, last, shortcut, follow=None):
  """A run whose last evaluation has per-question accuracies `last` and gold flags
  `shortcut`; `follow`: the page-swap probe's follow.json at the end."""
  _run(workdir, [1.0, 1.0], 0.5, 0.5)
  heldout.save(workdir, 3, np.array(last), 4,
               {"eval/accuracy": float(np.mean(last)), "eval/shortcut_admitting_rate": 0.0,
                "eval/cited_pages": 1.0, "eval/tool_calls_open": 0.75}, {"shortcut": shortcut})
  if follow is not None:
    os.makedirs(os.path.join(workdir, "page_swap"))
    with open(os.path.join(workdir, "page_swap", shortcut_report.FOLLOW_FILE), "w") as f:
      json.dump(follow, f)


def test_worlds_evidence_only_lead_page_swap_and_from(tmp_path, capsys):
  """Runs over (world, seed) pairs; the evidence-only lead paired over the evidence-only
  questions only (worked by hand); the page-swap follow rates read from the probe's file;
  `--from` prints the same table from summary.json."""
  flags = [True, True, False, False]  # questions 2 and 3 are evidence-only
  for world, seed in ((0, 0), (1, 1)):
    _evaluated(str(tmp_path / f"grpo_w{world}_seed{seed}"), [1.0, 1.0, 0.0, 0.5], flags,
               {"follow_plain": 0.25, "follow_evidence_only": 1.0})
    _evaluated(str(tmp_path / f"cgrpo_w{world}_seed{seed}"), [1.0, 0.5, 1.0, 0.5 + world / 2],
               flags, {"follow_plain": 0.75 + world / 8, "follow_evidence_only": 1.0})
  summary = shortcut_report.write_report(str(tmp_path))
  assert summary["world_seeds"] == [0, 1] and summary["seeds"] == [0, 1]
  cgrpo = summary["cgrpo"]
  # evidence-only differences: world 0 [1, 0] -> 0.5 +- 0.5; world 1 [1, 0.5] -> 0.75 +- 0.25
  assert cgrpo["evidence_only_vs_first"] == pytest.approx([0.5, 0.75])
  assert cgrpo["evidence_only_vs_first_se"] == pytest.approx([0.5, 0.25])
  # over all four questions, world 0: [0, -0.5, 1, 0] -> 0.125
  assert cgrpo["vs_first"][0] == pytest.approx(0.125)
  assert cgrpo["page_swap_follow_plain"] == pytest.approx([0.75, 0.875])
  assert np.isnan(cgrpo["start_page_swap_follow_plain"]).all()  # no probe at the start
  assert cgrpo["open_calls"] == [0.75, 0.75]
  table = (tmp_path / "table.md").read_text()
  assert table.splitlines()[0].startswith("| metric (runs: w0/s0, w1/s1) |")
  assert "| shortcut_rate (rubric readout) |" in table
  capsys.readouterr()
  assert report_cli.main(["--from", str(tmp_path / "summary.json"),
                          "--plot", str(tmp_path / "again.png")]) == 0
  assert capsys.readouterr().out == table
  assert (tmp_path / "again.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert report_cli.main([]) == 2  # neither runs nor --from


def test_merged_summaries_equal_the_joint_one(tmp_path, capsys):
  """Each world summarized in its own directory, then merged by `--from A B --save`: the same
  summary as the two worlds' runs summarized together (lists in the order given); a shared
  (world, seed) pair, other methods or other metrics are refused."""
  flags = [True, False]
  for world in (0, 1):
    for root in (tmp_path / "joint", tmp_path / f"w{world}"):
      _evaluated(str(root / f"grpo_w{world}_seed{world}"), [1.0, 0.0], flags,
                 {"follow_plain": 0.5, "follow_evidence_only": 0.5})
      _evaluated(str(root / f"cgrpo_w{world}_seed{world}"), [1.0, 0.5 + world / 2], flags,
                 {"follow_plain": 1.0, "follow_evidence_only": 0.25 * world})
  joint = shortcut_report.write_report(str(tmp_path / "joint"), 9.0)  # = 4 + 5 below
  parts = [str(tmp_path / f"w{w}" / "summary.json") for w in (0, 1)]
  for w, part in enumerate(parts):
    shortcut_report.write_report(os.path.dirname(part), 4.0 + w)
  capsys.readouterr()
  merged = tmp_path / "merged.json"
  assert report_cli.main(["--from", parts[0], parts[1], "--save", str(merged)]) == 0
  assert capsys.readouterr().out == (tmp_path / "joint" / "table.md").read_text()
  with open(merged) as f:
    got = json.load(f)
  assert got["cgrpo"]["evidence_only_vs_first"] == [0.5, 1.0]
  assert json.dumps(got, sort_keys=True) == json.dumps(json.loads(json.dumps(joint)),
                                                       sort_keys=True)
  with pytest.raises(ValueError, match="more than one part"):
    shortcut_report.merge([got, shortcut_report.read_summary(parts[1])])
  other = dict(got, methods=["cgrpo"])
  with pytest.raises(ValueError, match="same methods"):
    shortcut_report.merge([got, other])
  first = shortcut_report.read_summary(parts[0])
  del first["cgrpo"]["open_calls"]  # a part written before a metric existed
  with pytest.raises(ValueError, match="other metrics"):
    shortcut_report.merge([first, shortcut_report.read_summary(parts[1])])
  assert report_cli.main(["--from", parts[0], parts[0]]) == 2


def test_an_evaluation_without_flags_has_no_evidence_only_split():
  with pytest.raises(ValueError, match="no evidence-only split"):
    shortcut_report.evidence_only([1.0, 0.0], [])
