"""carr_common.jsonl.numbered_records: strict JSON lines, each named by its place."""
import pytest

from carr_common.jsonl import numbered_records
from carr_jax.evaluation.crypto import DecryptError, decrypt_fields


class _Bad(ValueError):
  pass


def test_blank_lines_are_skipped_but_counted():
  lines = ['{"a": 1}\n', "\n", "   \n", '[2]\n']
  assert list(numbered_records(lines, "f.jsonl", _Bad)) == [("f.jsonl:1", {"a": 1}),
                                                            ("f.jsonl:4", [2])]


def test_a_line_that_is_not_json_raises_the_callers_error_at_its_place():
  records = numbered_records(['{"a": 1}', "", '{"a": '], "f.jsonl", _Bad)
  assert next(records) == ("f.jsonl:1", {"a": 1})
  with pytest.raises(_Bad, match=r"^f\.jsonl:3: invalid JSON \(Expecting value\)$"):
    next(records)


def test_decrypt_fields_names_the_line_that_is_not_json():
  text = '{"answer": "x"}\n\nnot json\n'
  with pytest.raises(DecryptError, match=r"^input:3: invalid JSON"):
    decrypt_fields(text, [], "pw")  # no field to decrypt: line 1 passes as it is
