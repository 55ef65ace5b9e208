"""carr_common.vocab: the correctness rule, the tool schemas' agreement with the vocabulary, and
a source scan that keeps the vocabulary spelt in one place."""
import ast
import asyncio
import math
from pathlib import Path

import numpy as np
import pytest

from carr_common.vocab import (CORRECT_THRESHOLD, KIND_OF_TOOL, OPEN, SEARCH, STATUSES,
                               TOOL_KINDS, TOOL_NAMES, is_correct)
from rollout.tools import BrowserSession, CorpusBackend, Page, tool_schemas
from rollout.tools.schemas import SCHEMAS_BY_NAME, brief_tool_schemas

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("carr_jax", "rollout", "judge", "carr_common", "scripts", "benchmarks")
VOCAB_FILE = ROOT / "carr_common" / "vocab.py"
ABOVE = math.nextafter(CORRECT_THRESHOLD, 1.0)
BELOW = math.nextafter(CORRECT_THRESHOLD, 0.0)


@pytest.mark.parametrize("outcome, expected", [
    (0.0, False), (BELOW, False), (CORRECT_THRESHOLD, False), (ABOVE, True), (1.0, True),
    (math.nan, False)])
def test_is_correct_on_a_float(outcome, expected):
  assert is_correct(outcome) is expected


def test_is_correct_on_an_array_is_elementwise_and_keeps_the_shape():
  outcome = np.array([[0.0, BELOW, CORRECT_THRESHOLD], [ABOVE, 1.0, np.nan]])
  got = is_correct(outcome)
  assert got.dtype == np.bool_ and got.shape == (2, 3)
  np.testing.assert_array_equal(got, [[False, False, False], [True, True, False]])


def test_every_tool_name_has_a_distinct_kind():
  assert list(KIND_OF_TOOL) == list(TOOL_NAMES)
  assert sorted(KIND_OF_TOOL.values()) == sorted(TOOL_KINDS)
  assert KIND_OF_TOOL["browser.open"] == "open"


def test_the_schemas_are_named_by_the_vocabulary():
  assert [s["name"] for s in tool_schemas()] == list(TOOL_NAMES)
  assert list(SCHEMAS_BY_NAME) == list(TOOL_NAMES)
  assert {s["name"] for s in brief_tool_schemas()} <= set(TOOL_NAMES)


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_a_session_reports_each_tool_under_its_kind(name):
  session = BrowserSession(CorpusBackend([Page("https://w.example/x", "X", "x marks it.")]))
  arguments = {SEARCH: {"query": "x"}, OPEN: {"id": 1}}.get(name, {"pattern": "x"})
  assert asyncio.run(session.call(name, arguments)).kind == KIND_OF_TOOL[name]


# ------------------------------------------------------------------ one spelling

# What the scan looks for, in every .py file of SCANNED except carr_common/vocab.py:
#  * a literal tuple, list or set of strings, or the string keys of a literal dict, that
#    holds all the statuses, all the tool kinds or all the tool names (in any order): the
#    vocabulary spelt out again instead of imported;
#  * a comparison (<, <=, >, >=) of the literal 0.5 with an expression whose source mentions
#    "outcome": the correctness threshold unnamed (use vocab.is_correct).
# Other 0.5s (clip ratios, backoff jitter, rng.random() < 0.5, attention scales) are neither,
# so the scan leaves them alone.
_VOCABULARIES = {"statuses": set(STATUSES), "tool kinds": set(TOOL_KINDS),
                 "tool names": set(TOOL_NAMES)}
_ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _strings(node: ast.AST) -> set[str] | None:
  if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
    items = node.elts
  elif isinstance(node, ast.Dict):
    items = node.keys
  else:
    return None
  if items and all(isinstance(i, ast.Constant) and isinstance(i.value, str) for i in items):
    return {i.value for i in items}
  return None


def _unnamed_threshold(node: ast.AST) -> bool:
  if not (isinstance(node, ast.Compare) and all(isinstance(op, _ORDER) for op in node.ops)):
    return False
  operands = [node.left, *node.comparators]
  half = [isinstance(o, ast.Constant) and o.value == 0.5 for o in operands]
  return any(half) and any("outcome" in ast.unparse(o) for o, h in zip(operands, half) if not h)


def findings(source: str) -> list[str]:
  """'line N: what' for each respelling of the vocabulary in `source`."""
  out = []
  for node in ast.walk(ast.parse(source)):
    strings = _strings(node)
    for what, words in _VOCABULARIES.items():
      if strings is not None and strings >= words:
        out.append(f"line {node.lineno}: the {what} spelt out (import carr_common.vocab)")
    if _unnamed_threshold(node):
      out.append(f"line {node.lineno}: outcome compared with 0.5 (use vocab.is_correct)")
  return out


@pytest.mark.parametrize("source, hits", [
    ('S = ("completed", "truncated", "ill_formed", "tool_limit", "failed")', 1),
    ('S = ["failed", "completed", "tool_limit", "truncated", "ill_formed"]', 1),
    ('K = {"search", "open", "find"}', 1),
    ('M = {"browser.search": 1, "browser.open": 2, "browser.find": 3, "open": 4}', 1),
    ("ok = s['outcome'] > 0.5", 1),
    ("ok = 0.5 <= b.outcome_reward", 1),
    ("acc = np.mean(groups.outcome > 0.5)", 1),
    ('if status == "completed": pass', 0),
    ('H = {"search": f, "open": g, "find": h}', 1),
    ('K = ("search", "open")', 0),
    ("if rng.random() < 0.5: pass", 0),
    ("ok = reward > 0.5", 0),
    ("is_low: float = 0.5", 0),
    ("ok = is_correct(outcome)", 0),
])
def test_the_scan_finds_respellings_and_only_those(source, hits):
  assert len(findings(source)) == hits, findings(source)


def test_the_vocabulary_is_spelt_only_in_carr_common_vocab():
  found = [f"{path.relative_to(ROOT)} {hit}"
           for room in SCANNED for path in sorted((ROOT / room).rglob("*.py"))
           if path != VOCAB_FILE for hit in findings(path.read_text(encoding="utf-8"))]
  assert not found, "\n".join(found)
  assert findings(VOCAB_FILE.read_text(encoding="utf-8"))  # the scan does see the real thing
