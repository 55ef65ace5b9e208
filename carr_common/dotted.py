"""Dotted keys ("judge.max_rubrics") of nested mappings such as an ml_collections.ConfigDict:
the one walker that the command line and the checkpoint resume share.

Standard library only.
"""
from __future__ import annotations

from typing import Any

_RAISE = object()


class MissingKey(KeyError):
  """`key` has no value; its first missing part follows `known` ("" when the first is)."""

  def __init__(self, key: str, known: str):
    super().__init__(key)
    self.key, self.known = key, known


def get(tree: Any, key: str, default: Any = _RAISE) -> Any:
  """The value at dotted `key` of `tree` ("" is `tree` itself); `default` where a part is
  missing or its parent is not a mapping, or MissingKey when no default is given."""
  parts = key.split(".") if key else []
  node = tree
  for i, part in enumerate(parts):
    if not hasattr(node, "items") or part not in node:
      if default is _RAISE:
        raise MissingKey(key, ".".join(parts[:i]))
      return default
    node = node[part]
  return node
