"""The three browser tool schemas, defined once for the whole project.

Flat schemas (`{"name", "description", "parameters"}`, no `"type": "function"` wrapper), as the
CaRR records and the Qwen3 system prompt list them. The world generator copies `TOOL_SCHEMAS`
into every record; `BrowserSession` validates calls against the same objects, so the model is
judged by exactly the contract it was shown. The tool names are `carr_common.vocab`'s, which
the judge and the trainer count by too. Importing this module pulls in no third-party code.
"""
from __future__ import annotations

import copy
from typing import Any

from carr_common.vocab import FIND, OPEN, SEARCH, TOOL_NAMES

MAX_SEARCH_RESULTS = 20  # `num` above this is clamped; search APIs rarely rank further usefully
OPEN_CHAR_LIMIT = 10_000  # characters of a page an `open` call returns (find sees the whole page)
FIND_MAX_MATCHES = 20
FIND_CONTEXT_CHARS = 200  # characters of context on each side of a find match

SEARCH_SCHEMA: dict[str, Any] = {
    "name": SEARCH,
    "description": (
        "Run a web search. Returns numbered results, each with a title, a URL and a short "
        "description. The numbers can be passed to browser.open."),
    "parameters": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to search for."},
            "num": {
                "type": "integer",
                "description": f"How many results to return (default 10, at most "
                               f"{MAX_SEARCH_RESULTS}).",
            },
        },
        "required": ["query"],
    },
}

OPEN_SCHEMA: dict[str, Any] = {
    "name": OPEN,
    "description": (
        "Open a page, given either the number of a result from the latest browser.search or a "
        f"full http(s) URL. Shows the page title, URL and the first {OPEN_CHAR_LIMIT:,} "
        "characters of its text; the whole page stays available to browser.find."),
    "parameters": {
        "type": "object",
        "properties": {
            "id": {
                "type": ["integer", "string"],
                "description": "A result number from the latest search, or a URL.",
            },
        },
        "required": ["id"],
    },
}

FIND_SCHEMA: dict[str, Any] = {
    "name": FIND,
    "description": (
        "Look for a word or phrase in the page opened last (the whole page, not only the part "
        f"shown). Returns up to {FIND_MAX_MATCHES} matches with surrounding text: exact "
        "case-insensitive matches first, then close approximate matches."),
    "parameters": {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "The text to look for."},
        },
        "required": ["pattern"],
    },
}

_SCHEMAS = (SEARCH_SCHEMA, OPEN_SCHEMA, FIND_SCHEMA)  # in the order of vocab.TOOL_NAMES
SCHEMAS_BY_NAME = {s["name"]: s for s in _SCHEMAS}


def tool_schemas() -> list[dict[str, Any]]:
  """A fresh deep copy of the three schemas, safe to put in records and mutate."""
  return copy.deepcopy(list(_SCHEMAS))


def brief_tool_schemas() -> list[dict[str, Any]]:
  """search and open with one-line descriptions: a ~110-token tool list instead of ~390, for
  small CPU policies that pay for every prompt token (the synthetic world's `prompt="brief"`).
  The calls they allow are validated exactly as with the full schemas."""
  search, open_ = tool_schemas()[:2]
  search["description"] = "Web search; returns numbered results."
  del search["parameters"]["properties"]["query"]["description"]
  search["parameters"]["properties"]["num"] = {"type": "integer"}
  open_["description"] = "Open a search result by its number, or a URL."
  del open_["parameters"]["properties"]["id"]["description"]
  return [search, open_]


_JSON_TYPES = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "object": (dict,), "array": (list,),
}


def _type_ok(value: Any, json_type: str) -> bool:
  # bool is an int subclass in Python but never a JSON integer or number.
  if isinstance(value, bool) and json_type in ("integer", "number"):
    return False
  return isinstance(value, _JSON_TYPES[json_type])


def validate_call(name: str, arguments: Any) -> str | None:
  """Checks a tool call against its schema; returns a readable problem or None if valid."""
  schema = SCHEMAS_BY_NAME.get(name)
  if schema is None:
    return f"Unknown tool {name!r}. Available tools: {', '.join(TOOL_NAMES)}."
  if not isinstance(arguments, dict):
    return f"Arguments of {name} must be a JSON object, got {type(arguments).__name__}."
  props = schema["parameters"]["properties"]
  for key in arguments:
    if key not in props:
      return (f"Unknown argument {key!r} for {name}. Allowed arguments: "
              f"{', '.join(props)}.")
  for key in schema["parameters"].get("required", []):
    if key not in arguments:
      return f"Missing required argument {key!r} for {name}."
  for key, value in arguments.items():
    types = props[key]["type"]
    types = [types] if isinstance(types, str) else types
    if not any(_type_ok(value, t) for t in types):
      return (f"Argument {key!r} of {name} must be of type {' or '.join(types)}, got "
              f"{type(value).__name__} ({value!r:.60}).")
  return None
