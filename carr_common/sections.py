"""A dataclass config from one section of a config (an ml_collections.ConfigDict or any
mapping): the one way the trainer's builders (carr_jax.jobs.components) and the task seam
(carr_jax.jobs.tasks) turn keys into dataclasses.

Standard library only.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping


def from_section(cls: type, section: Any, renamed: Mapping[str, str] | None = None,
                 **computed: Any) -> Any:
  """`cls` whose field f is `section[f]` (or `section[renamed[f]]`), but for the fields in
  `computed`, which the caller gives. A field with neither raises KeyError naming its key."""
  renamed, given = renamed or {}, {}
  for f in dataclasses.fields(cls):
    if f.name in computed:
      continue
    key = renamed.get(f.name, f.name)
    if key not in section:
      raise KeyError(f"{cls.__qualname__}.{f.name} needs the config key {key!r} in its section")
    given[f.name] = section[key]
  return cls(**given, **computed)
