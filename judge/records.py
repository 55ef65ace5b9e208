"""Judge inputs: the reward-server request, trajectory + CaRR records, and the final response.

Two input shapes reach the judge, both normalised into one `JudgeInput`:
  * the release's reward-server request:
      {history, label, task_unfinished, remote_env_info: {search_forbidden_strs, rubrics,
       rubric_reward_ratio}}  (+ our optional `remote_env_info.gold` for the gold backend);
  * a trajectory record (docs/design.md section 2) with its CaRR task record (section 3);
    `to_request` turns that pair into the request shape, so both paths share validation.

`parse_request` raises `RequestError` naming the field (the server answers 400); the in-process
path (`input_from_records`) never raises: a bad input becomes `JudgeInput.error` and scores 0.
Text is made valid UTF-8 and bounded here, so nothing downstream sees bytes or lone surrogates.
"""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from carr_common.safe_text import clean_text, json_depth

_REFERENCES_HEADING = re.compile(r"(?im)^[ \t]{0,3}#{1,6}[ \t]*references[ \t]*:?[ \t]*$")
_EXACT_ANSWER_HEADING = re.compile(r"(?im)^[ \t]{0,3}#{1,6}[ \t]*exact answer[ \t]*:?[ \t]*$")
_ANY_HEADING = re.compile(r"(?m)^[ \t]{0,3}#{1,6}[ \t]+\S")


class RequestError(ValueError):
  """A malformed judge request; `field` names the offending field (e.g. `history[3]`)."""

  def __init__(self, field: str, message: str):
    super().__init__(f"{field}: {message}")
    self.field = field


@dataclasses.dataclass
class JudgeInput:
  question: str
  label: str
  rubrics: list[str]
  history: list[dict]
  unfinished: bool = False
  rubric_reward_ratio: float = 0.0
  gold: dict | None = None  # synthetic world's metadata.gold (gold backend only)
  error: str | None = None  # set when the input itself is unusable: scores 0 with this reason


def as_text(value: Any, limit: int) -> str | None:
  """Valid, bounded UTF-8 text from a str/bytes value; None for anything else.

  Lone surrogates (what `surrogateescape` decoding of bad UTF-8 leaves behind) become U+FFFD.
  """
  if isinstance(value, (bytes, bytearray)):
    value = bytes(value).decode("utf-8", "replace")
  if not isinstance(value, str):
    return None
  return clean_text(value[:limit])


def _require(cond: bool, field: str, message: str) -> None:
  if not cond:
    raise RequestError(field, message)


def load_body(body: bytes, max_depth: int, max_values: int) -> Any:
  """The JSON value of a request body; RequestError("body", ...) when it may hold more than
  `max_values` values (bounded before parsing: every value after the first follows a ',', a
  '[' or a '{'), is not valid JSON (bad UTF-8, too-long integers and RecursionError from
  thousands of brackets included) or nests deeper than `max_depth`."""
  bound = 1 + sum(body.count(c) for c in (b",", b"[", b"{"))
  _require(bound <= max_values, "body",
           f"up to {bound} JSON values, the limit is {max_values} (max_json_values)")
  try:
    data = json.loads(body)
  except RecursionError:
    raise RequestError("body", f"JSON nested deeper than {max_depth} levels "
                               "(max_json_depth)") from None
  except ValueError:
    raise RequestError("body", "not valid JSON") from None
  _require(json_depth(data) <= max_depth, "body",
           f"JSON nested deeper than {max_depth} levels (max_json_depth)")
  return data


def parse_request(data: Any, text_limit: int = 1_000_000, *, max_rubrics: int | None = None,
                  max_history: int | None = None) -> JudgeInput:
  """Validates a release-shaped request; raises RequestError naming the first bad field.

  `max_rubrics` / `max_history` cap the rubric and message counts (the server passes
  JudgeConfig.max_rubrics / max_history_messages; None = no cap).
  """
  _require(isinstance(data, dict), "body", "must be a JSON object")
  for key in ("history", "label", "task_unfinished", "remote_env_info"):
    _require(key in data, key, "missing required field")
  history = data["history"]
  _require(isinstance(history, list), "history", "must be a list of messages")
  _require(max_history is None or len(history) <= max_history, "history",
           f"{len(history)} messages, the limit is {max_history} (max_history_messages)")
  for i, message in enumerate(history):
    _require(isinstance(message, dict), f"history[{i}]", "must be an object")
  label = data["label"]
  if isinstance(label, (int, float)) and not isinstance(label, bool):
    label = str(label)
  label = as_text(label, text_limit)
  _require(label is not None, "label", "must be a string")
  _require(bool(label.strip()), "label", "must not be empty or blank")
  _require(isinstance(data["task_unfinished"], bool), "task_unfinished", "must be a boolean")
  env = data["remote_env_info"]
  _require(isinstance(env, dict), "remote_env_info", "must be an object")
  forbidden = env.get("search_forbidden_strs")
  _require(isinstance(forbidden, list) and forbidden,
           "remote_env_info.search_forbidden_strs", "must be a non-empty list (question first)")
  question = as_text(forbidden[0], text_limit)
  _require(question is not None, "remote_env_info.search_forbidden_strs[0]",
           "must be a string (the question)")
  _require(bool(question.strip()), "remote_env_info.search_forbidden_strs[0]",
           "must not be empty or blank (the question)")
  rubrics = env.get("rubrics", [])
  _require(isinstance(rubrics, list), "remote_env_info.rubrics", "must be a list of strings")
  _require(max_rubrics is None or len(rubrics) <= max_rubrics, "remote_env_info.rubrics",
           f"{len(rubrics)} rubrics, the limit is {max_rubrics} (max_rubrics)")
  clean_rubrics = []
  for i, rubric in enumerate(rubrics):
    text = as_text(rubric, text_limit)
    _require(text is not None, f"remote_env_info.rubrics[{i}]", "must be a string")
    clean_rubrics.append(text)
  ratio = env.get("rubric_reward_ratio", 0)
  _require(isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and 0 <= ratio <= 1,
           "remote_env_info.rubric_reward_ratio", "must be a number in [0, 1]")
  gold = env.get("gold")
  _require(gold is None or isinstance(gold, dict), "remote_env_info.gold", "must be an object")
  return JudgeInput(question=question, label=label, rubrics=clean_rubrics, history=history,
                    unfinished=data["task_unfinished"], rubric_reward_ratio=float(ratio),
                    gold=gold)


def _get(obj: Any, *path: str) -> Any:
  for key in path:
    if not isinstance(obj, dict):
      return None
    obj = obj.get(key)
  return obj


def task_question(task: Any) -> Any:
  """The question of a CaRR record: search_forbidden_strs[0], else the first user message."""
  forbidden = _get(task, "metadata", "remote_env_info", "search_forbidden_strs")
  if isinstance(forbidden, list) and forbidden:
    return forbidden[0]
  messages = _get(task, "input_messages")
  if isinstance(messages, list) and messages and isinstance(messages[0], dict):
    return messages[0].get("content")
  return None


def to_request(trajectory: Any, task: Any, rubric_reward_ratio: float = 0.0) -> dict:
  """The reward-server request for a trajectory record + its CaRR record (no validation)."""
  given = _get(task, "metadata", "remote_env_info")
  env = dict(given) if isinstance(given, dict) else {}
  env["search_forbidden_strs"] = [task_question(task)]
  env.setdefault("rubrics", [])
  env["rubric_reward_ratio"] = rubric_reward_ratio
  gold = _get(task, "metadata", "gold")
  if gold is not None:
    env["gold"] = gold
  status = _get(trajectory, "status")
  return {"history": _get(trajectory, "history"), "label": _get(task, "label"),
          "task_unfinished": status != "completed", "remote_env_info": env}


def input_from_records(trajectory: Any, task: Any) -> JudgeInput:
  """Never raises: a malformed record gives a JudgeInput whose `error` names the field."""
  try:
    inp = parse_request(to_request(trajectory, task))
  except RequestError as e:
    return JudgeInput(question="", label="", rubrics=[], history=[], error=f"bad input: {e}")
  status = _get(trajectory, "status")
  if inp.unfinished:
    inp.error = f"task unfinished (status={status!r})"
  return inp


def _message_text(content: Any, limit: int) -> str | None:
  if isinstance(content, list):  # OpenAI-style content parts
    parts = [p.get("text") for p in content if isinstance(p, dict)]
    content = "".join(p for p in parts if isinstance(p, str))
  return as_text(content, limit)


def final_response(history: list, limit: int) -> tuple[str | None, str]:
  """(response text, "") or (None, reason) for the trajectory's final assistant answer."""
  if not history:
    return None, "empty history"
  last = history[-1]
  if not isinstance(last, dict) or last.get("role") != "assistant":
    return None, "last message is not an assistant answer"
  if "content" not in last:
    return None, "final assistant message has no content"
  if last.get("tool_calls"):
    return None, "final assistant message still calls tools"
  text = _message_text(last["content"], limit)
  if text is None:
    return None, f"final answer is not text ({type(last['content']).__name__})"
  if not text.strip():
    return None, "final answer is empty"
  return text, ""


def cut_references(response: str) -> str:
  """The response before its last `## References` heading (only that part is judged)."""
  last = None
  for last in _REFERENCES_HEADING.finditer(response):
    pass
  return (response[:last.start()] if last else response).strip()


def exact_answer_sections(response: str) -> int:
  """How many `## Exact Answer` headings the response has (a committed answer has one)."""
  return sum(1 for _ in _EXACT_ANSWER_HEADING.finditer(response))


def exact_answer(response: str) -> str | None:
  """Text of the `## Exact Answer` section (up to the next heading), or None."""
  last = None
  for last in _EXACT_ANSWER_HEADING.finditer(response):
    pass
  if last is None:
    return None
  rest = response[last.end():]
  following = _ANY_HEADING.search(rest)
  answer = (rest[:following.start()] if following else rest).strip()
  return answer or None
