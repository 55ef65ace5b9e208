"""Text that can always be encoded: lone surrogates become U+FFFD, JSON lines never raise.

A Python `str` may hold lone surrogates (U+D800..U+DFFF) that UTF-8 cannot encode: `json.loads`
of a `"\\ud800"` escape makes one, and so does `surrogateescape` decoding of bad bytes. Such a
character from a model's tool call or a judge's reply would otherwise raise UnicodeEncodeError
far away, in whatever writer meets it first. So text is cleaned where it enters (decoded model
output, tool-call arguments, tool output, judge replies, request fields) with `clean_text` /
`clean_json`, and the writers use `json_line`, which cleans again and so never raises on text.

  clean_text("a\\ud800b")           -> "a\\ufffdb"
  clean_json({"q": ["\\udcff"]})    -> {"q": ["\\ufffd"]}
  f.write(json_line(record))        # one JSON line, valid UTF-8, never UnicodeEncodeError

Standard library only, in carr_common, so the rollout, the judge and the trainer all use this
one copy.
"""
from __future__ import annotations

import json
import re
from typing import Any

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
  """`text` with every surrogate code point replaced by U+FFFD (a copy only when needed)."""
  try:
    text.encode("utf-8")
  except UnicodeEncodeError:
    return _SURROGATE.sub(REPLACEMENT, text)
  return text


def clean_json(value: Any) -> Any:
  """A copy of a JSON-like value (dicts, lists, tuples, scalars) with every string, keys
  included, passed through `clean_text`. Iterative, so any nesting depth is safe."""
  if isinstance(value, str):
    return clean_text(value)
  if not isinstance(value, (dict, list, tuple)):
    return value
  root: list[Any] = [None]
  stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]  # (source, parent, key in parent)
  while stack:
    source, parent, key = stack.pop()
    if isinstance(source, dict):
      copy: dict[Any, Any] = {}
      parent[key] = copy
      for k, v in source.items():
        k = clean_text(k) if isinstance(k, str) else k
        copy[k] = None
        stack.append((v, copy, k))
    elif isinstance(source, (list, tuple)):
      items: list[Any] = [None] * len(source)
      parent[key] = items
      stack.extend((v, items, i) for i, v in enumerate(source))
    else:
      parent[key] = clean_text(source) if isinstance(source, str) else source
  return root[0]


def json_depth(value: Any) -> int:
  """Nesting depth of a JSON-like value (a scalar is 0, `[]` and `{}` are 1); iterative."""
  depth, stack = 0, [(value, 0)]
  while stack:
    node, level = stack.pop()
    if isinstance(node, dict):
      node = list(node.values())
    if isinstance(node, (list, tuple)):
      depth = max(depth, level + 1)
      stack.extend((child, level + 1) for child in node)
  return depth


def json_text(value: Any, **kwargs: Any) -> str:
  """`json.dumps(value, ensure_ascii=False, **kwargs)` that is always encodable as UTF-8.

  The fast path dumps as is; only output holding a surrogate is redone from a cleaned copy.
  """
  text = json.dumps(value, ensure_ascii=False, **kwargs)
  try:
    text.encode("utf-8")
  except UnicodeEncodeError:
    text = json.dumps(clean_json(value), ensure_ascii=False, **kwargs)
  return text


def json_line(value: Any) -> str:
  """One JSONL line (with its newline) for a record; never raises on surrogates."""
  return json_text(value) + "\n"
