"""Reading JSON lines strictly: every non-blank line must be JSON, and a bad one is named by
its place (`<where>:<line number>`), so a caller's error points into the file.

Standard library only.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any


def numbered_records(lines: Iterable[str], where: str,
                     error: type[Exception]) -> Iterator[tuple[str, Any]]:
  """(place, parsed value) of each non-blank line of `lines`, the place being
  "<where>:<line number>" (1-based, blank lines counted); a line that is not JSON raises
  `error("<place>: invalid JSON (<reason>)")`."""
  for lineno, line in enumerate(lines, 1):
    if not line.strip():
      continue
    place = f"{where}:{lineno}"
    try:
      yield place, json.loads(line)
    except json.JSONDecodeError as e:
      raise error(f"{place}: invalid JSON ({e.msg})") from None
