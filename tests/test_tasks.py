"""CaRR-format task files (carr_jax/jobs/tasks.py): errors name the file and the true line
number, blank lines counted; evaluation ids default to the line number."""
import json

import pytest

from carr_jax.jobs import evaluate, tasks


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
