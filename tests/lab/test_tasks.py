"""Task loading (carr_jax/jobs/tasks.py): CaRR-format files, whose errors name the file and the
true line number, blank lines counted, evaluation ids defaulting to the line number; and the
in-process task source named by `data.source`."""
import json

import pytest

from carr_jax.jobs import evaluate, tasks
from configs import base


def record(label="Paris"):
  return {"input_messages": [{"role": "user", "content": "Which city?"}], "label": label}


def write(path, lines):
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return path


def test_a_bad_record_is_named_by_its_line_after_blank_lines(tmp_path):
  path = write(tmp_path / "t.jsonl", [json.dumps(record()), "", json.dumps(record(label=3))])
  with pytest.raises(tasks.DataError, match=r"t\.jsonl:3: label must be a string"):
    tasks.load_records(path)


def test_bad_json_is_named_by_its_line(tmp_path):
  path = write(tmp_path / "t.jsonl", ["", "", json.dumps(record()), "{not json"])
  with pytest.raises(tasks.DataError, match=r"t\.jsonl:4: invalid JSON"):
    tasks.read_jsonl(path)


def test_records_and_places(tmp_path):
  path = write(tmp_path / "t.jsonl", ["", json.dumps(record()), "  ", json.dumps(record("Rome"))])
  assert [r["label"] for r in tasks.load_records(path)] == ["Paris", "Rome"]
  assert [place for place, _ in tasks.numbered_jsonl(path)] == [f"{path}:2", f"{path}:4"]


def test_eval_ids_default_to_the_line_number(tmp_path):
  path = write(tmp_path / "bench.jsonl", [json.dumps(record()), "", json.dumps(record("Rome"))])
  assert [r["id"] for r in evaluate.load_eval_records(str(path))] == ["bench-00001",
                                                                      "bench-00003"]


def test_data_source_names_the_module_whose_tasks_load():
  from lab.configs import lab_config
  config = lab_config()
  config.world.entities, config.world.questions = 20, 8
  from lab import tasks as lab_tasks
  assert tasks.task_source(config.data) is lab_tasks
  assert tasks.load_tasks(config) == lab_tasks.world_tasks(config.world)
  config.data.source = "lab.no_such_source"
  with pytest.raises(tasks.DataError, match="data.source must be 'jsonl' or an importable task "
                     "source module, got 'lab.no_such_source'"):
    tasks.load_tasks(config)


def test_the_task_source_brings_its_section_and_its_held_out_measures():
  """use_task_source adds the section the source owns; a held-out evaluation gets the
  source's measures and per-question lists (lab.metrics: the shortcut flags, the
  evidence-only accuracy), and CaRR records (jsonl) get none."""
  from judge.breakdown import Breakdown
  from lab import metrics as lab_metrics
  from lab.configs import lab_config, world_section
  plain = base.get_config()
  assert "world" not in plain and plain.data.source == "jsonl"
  assert tasks.source_evaluation(plain, [], []) == ({}, {})
  assert tasks.source_summary_names(plain) == ()
  config = lab_config()
  assert config.data.source == "lab.tasks" and config.world == world_section()
  config.world.style = "reference"
  config.world.entities, config.world.questions = 60, 40
  _, evals, _ = tasks.load_tasks(config)
  flags = [r["metadata"]["gold"]["shortcut"] for r in evals]
  assert True in flags and False in flags  # both subsets are held out
  right = [Breakdown(outcome_reward=1.0, rubric_reward=0.0) for _ in evals]  # k = 1
  metrics, per_question = tasks.source_evaluation(config, evals, right)
  assert per_question == {"shortcut": flags}
  assert metrics["eval/evidence_only_questions"] == flags.count(False)
  assert metrics["eval/evidence_only_accuracy"] == 1.0
  assert metrics["eval/shortcut_admitting_rate"] == 1.0  # right, with no evidence
  assert tasks.source_summary_names(config) == lab_metrics.SUMMARY_NAMES


def test_the_expert_takes_the_keys_a_section_has_and_defaults_for_the_rest():
  """configs/base.py's `sft` section has none of the laboratory expert's keys (the paper's
  tiny cold start runs on it): lab.tasks fills them with lab.configs.sft_section's defaults."""
  from lab import configs as lab_configs
  from lab import tasks as lab_tasks
  from lab.world.expert import ExpertConfig
  plain = base.sft_section()
  plain.batch_size = 3
  assert "expert_answer" not in plain
  filled = lab_tasks.expert_keys(plain)
  assert (filled.expert_answer, filled.expert_samples) == (ExpertConfig.answer, 1)
  assert filled.batch_size == 3
  own = lab_configs.sft_section()
  own.expert_answer = "brief"
  assert lab_tasks.expert_keys(own).expert_answer == "brief"
