"""Strict parsing of judge LLM outputs: one JSON-block reader and one validator per step.

Every parser returns a clean value or raises `OutputError(reason)`; the caller re-asks the
judge with that reason and, after `max_reasks`, gives the step reward 0 with the reason.
Rejected on purpose: missing or invalid JSON, missing/extra keys, names that are not strings
or null, judgments that are not JSON booleans ("true", 1). A name that is empty, a placeholder
("null", "N/A", "not mentioned") or longer than `MAX_NAME_CHARS` is read as null, the paper's
"not identified": only the rubrics that mention that entity go unidentified.
"""
from __future__ import annotations

import itertools
import json
import re
from typing import Any

from carr_common.safe_text import clean_text, json_depth

_FENCED = re.compile(r"```(?:json)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_NULL_WORDS = {"null", "none", "n/a", "na", "not identified", "not mentioned", "unknown"}
MAX_NAME_CHARS = 300  # a "name" longer than this is prose, not a name
MAX_JSON_DEPTH = 16  # judge answers are flat objects; deeper is not an answer
MAX_BARE_ATTEMPTS = 64  # bare `{` positions tried when there is no fenced block
_CORRECT_LINE = re.compile(r"(?im)^\W*correct\W*:\W*(yes|no)\b")
_EXTRACTED_LINE = re.compile(r"(?im)^\W*extracted_final_answer\W*:[ \t]*(.+)$")


class OutputError(ValueError):
  """A judge output that cannot be used; `reason` is fed back to the judge on re-ask."""

  def __init__(self, reason: str):
    super().__init__(reason)
    self.reason = reason


def _clean(value: Any, source: str) -> Any:
  """`value` (parsed from `source`) with lone surrogates replaced; too deep is an error.

  The reply text itself is already clean (ChatClient.complete), so a surrogate can only come
  from a `\\u` escape; both checks are skipped when `source` cannot need them (the common,
  benchmarked case costs two `str.count`s and one `in`).
  """
  if (source.count("[") + source.count("{") > MAX_JSON_DEPTH
      and json_depth(value) > MAX_JSON_DEPTH):
    raise OutputError(f"the JSON nests deeper than {MAX_JSON_DEPTH} levels")
  if "\\u" not in source:
    return value
  text = json.dumps(value, ensure_ascii=False)  # raw surrogates can only sit inside strings
  cleaned = clean_text(text)
  return value if cleaned is text else json.loads(cleaned)


def json_block(text: Any) -> Any:
  """The JSON value of the first ```json fenced block, else of the first bare `{...}`.

  Bounded for hostile replies: at most `MAX_BARE_ATTEMPTS` bare `{` are tried, nesting past
  `MAX_JSON_DEPTH` and Python's integer-digit limit are OutputErrors, and strings come back
  without lone surrogates.
  """
  if not isinstance(text, str) or not text.strip():
    raise OutputError("empty reply")
  fenced = _FENCED.search(text)
  if fenced:
    try:
      return _clean(json.loads(fenced.group(1)), fenced.group(1))
    except RecursionError:
      raise OutputError(f"the JSON nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as e:
      raise OutputError(f"the JSON block is not valid JSON ({str(e)[:200]})") from None
  decoder = json.JSONDecoder()
  for match in itertools.islice(re.finditer(r"\{", text), MAX_BARE_ATTEMPTS):
    try:
      return _clean(decoder.raw_decode(text, match.start())[0], text)
    except (ValueError, RecursionError):
      continue
  raise OutputError("no JSON block found")


def _exact_keys(value: Any, keys: list[str]) -> dict:
  if not isinstance(value, dict):
    raise OutputError(f"expected a JSON object, got {type(value).__name__}")
  missing = [k for k in keys if k not in value]
  extra = [k for k in value if k not in keys]
  if missing or extra:
    # The reason goes back to the judge outside any fence: name only our own keys, count
    # the judge's (an extra key may be text injected into the judged content).
    raise OutputError(f"keys must be exactly {keys}; missing {missing}, "
                      f"{len(extra)} unexpected")
  return value


def parse_entity_names(text: Any, ids: list[str]) -> dict[str, str | None]:
  """{id: name or None} with exactly the placeholder ids as keys."""
  value = _exact_keys(json_block(text), ids)
  names: dict[str, str | None] = {}
  for key in ids:
    name = value[key]
    if name is not None and not isinstance(name, str):
      raise OutputError(f"{key}: must be a string or null, got {type(name).__name__}")
    if isinstance(name, str):
      name = " ".join(name.split())
      if (not name or name.lower().strip(".") in _NULL_WORDS
          or len(name) > MAX_NAME_CHARS):
        name = None  # no usable name: this entity is not identified (paper), no re-ask
    names[key] = name
  return names


def parse_support(text: Any, keys: list[str]) -> dict[str, bool]:
  """{statement key: bool} with exactly `keys`; values must be JSON booleans."""
  value = _exact_keys(json_block(text), keys)
  for key in keys:
    if not isinstance(value[key], bool):
      raise OutputError(f"{key}: must be true or false, got {type(value[key]).__name__}")
  return {key: value[key] for key in keys}


def parse_outcome(text: Any) -> tuple[str | None, bool]:
  """(extracted final answer or None, correct) from a JSON block, or from the
  `extracted_final_answer:` / `correct: yes|no` lines BrowseComp-style graders write."""
  try:
    value = json_block(text)
  except OutputError:
    value = None
  if isinstance(value, dict) and "correct" in value:
    correct = value["correct"]
    if isinstance(correct, str) and correct.strip().lower() in ("yes", "no"):
      correct = correct.strip().lower() == "yes"
    if not isinstance(correct, bool):
      raise OutputError(f'"correct" must be "yes" or "no", got '
                        f'{type(value["correct"]).__name__}')
    extracted = value.get("extracted_final_answer")
    if extracted is not None and not isinstance(extracted, str):
      raise OutputError('"extracted_final_answer" must be a string or null')
    return extracted, correct
  if isinstance(text, str):
    verdict, extracted = _CORRECT_LINE.search(text), _EXTRACTED_LINE.search(text)
    if verdict and extracted:
      return extracted.group(1).strip(), verdict.group(1).lower() == "yes"
  raise OutputError('no JSON object with "extracted_final_answer" and "correct" found')
