"""Qwen3 thinking chat format: render conversations to token ids, parse assistant output.

Rendering follows rollout/templates/qwen3_thinking.jinja (the format of the official
Qwen3-*-Thinking-2507 template) rule for rule, in Python, so the agent loop can build a
trajectory incrementally and never re-tokenize generated text:

  ids = fmt.prompt_ids(messages, tools)          # ... <|im_start|>assistant\n<think>\n
  ids += generated_ids                            # engine output, ends with <|im_end|>
  ids += fmt.observation_ids(outputs, generated_ids)   # \n + tool turn + next header
  ...

That sequence equals `tokenizer.apply_chat_template(history, tools, add_generation_prompt=True)`
as long as the engine's tokens are the canonical tokenization of the turn
(tests/rollout/test_chat.py):
every seam sits next to a special token, where the tokenizer splits anyway, or right after the
"\n" of `<think>\n`, which Qwen's pre-tokenizer never joins to the text after it.  The
template keeps the reasoning of every assistant turn after the LAST user query and drops the
reasoning of turns before it; a single-question agent loop therefore only ever appends.
Exception: empty reasoning renders as `<think>\n\n</think>`, whose "\n\n" the tokenizer merges
into one token while the loop holds "\n" (prompt) + "\n" (generated).

Parsing: `parse_assistant(text, tool_names)` splits the generated text (what follows
`<think>\n`) into reasoning, content and tool calls, raising `ChatFormatError` with a `kind`
from `ERROR_KINDS` on ill-formed output.  Only JSON level + name/arguments presence are checked
here; argument schemas are validated by the tools.
"""
from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from carr_common.safe_text import clean_json, clean_text, json_depth

ENDOFTEXT_ID = 151643
IM_START_ID = 151644
IM_END_ID = 151645
TOOL_CALL_ID, TOOL_CALL_END_ID = 151657, 151658
TOOL_RESPONSE_ID, TOOL_RESPONSE_END_ID = 151665, 151666
THINK_ID, THINK_END_ID = 151667, 151668
STOP_TOKEN_IDS = (ENDOFTEXT_ID, IM_END_ID)

GENERATION_PROMPT = "<|im_start|>assistant\n<think>\n"
_TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
_TOOLS_POSTAMBLE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n')


def _tojson(value: Any) -> str:
  # HF's chat-template `tojson` filter: json.dumps with ensure_ascii=False, default separators.
  return json.dumps(value, ensure_ascii=False)


# ---------------------------------------------------------------- rendering (pure, text level)


def system_text(system: str | None, tools: Sequence[Mapping] | None) -> str:
  """The system turn: optional system message, then the tools section when tools are given."""
  if tools:
    head = system + "\n\n" if system is not None else ""
    lines = "".join("\n" + _tojson(dict(t)) for t in tools)
    return "<|im_start|>system\n" + head + _TOOLS_PREAMBLE + lines + _TOOLS_POSTAMBLE
  return "" if system is None else f"<|im_start|>system\n{system}<|im_end|>\n"


def user_text(content: str) -> str:
  return f"<|im_start|>user\n{content}<|im_end|>\n"


def tool_responses_text(outputs: Sequence[str]) -> str:
  """One user turn holding one <tool_response> block per tool output, in call order."""
  blocks = "".join(f"\n<tool_response>\n{o}\n</tool_response>" for o in outputs)
  return f"<|im_start|>user{blocks}<|im_end|>\n"


def tool_call_text(name: str, arguments: Mapping | str) -> str:
  args = arguments if isinstance(arguments, str) else _tojson(arguments)
  return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def _call_parts(call: Mapping) -> tuple[str, Any]:
  fn = call.get("function") or call  # OpenAI-style {"function": {...}} or flat
  return fn["name"], fn["arguments"]


def assistant_body_text(content: str, tool_calls: Sequence[Mapping] | None,
                        lstrip: bool = False) -> str:
  """Content then tool calls, newline-separated, then <|im_end|> (no header, no reasoning).

  With `lstrip` the content is shown without leading newlines, but (as in the template) the
  newline before the first call still depends on the unstripped content.
  """
  out = content.lstrip("\n") if lstrip else content
  for k, call in enumerate(tool_calls or ()):
    if k > 0 or content:
      out += "\n"
    out += tool_call_text(*_call_parts(call))
  return out + "<|im_end|>"


def completion_text(reasoning: str, content: str,
                    tool_calls: Sequence[Mapping] | None = None) -> str:
  """What the model generates after the generation prompt for this turn (canonical form)."""
  return (reasoning.strip("\n") + "\n</think>\n\n"
          + assistant_body_text(content, tool_calls, lstrip=True))


def _split_reasoning(message: Mapping) -> tuple[str, str]:
  """(reasoning, content) of an assistant message, as the template reads them."""
  content = message.get("content")
  content = content if isinstance(content, str) else ""
  reasoning = message.get("reasoning_content")
  if isinstance(reasoning, str):
    return reasoning, content
  if "</think>" in content:
    before, after = content.split("</think>")[0], content.split("</think>")[-1]
    return before.rstrip("\n").split("<think>")[-1].lstrip("\n"), after.lstrip("\n")
  return "", content


def _is_query(message: Mapping) -> bool:
  c = message.get("content")
  return (message["role"] == "user" and isinstance(c, str)
          and not (c.startswith("<tool_response>") and c.endswith("</tool_response>")))


def _expand_tool_messages(messages: Sequence[Mapping]) -> list[Mapping]:
  """Judge-history tool messages (content = [{tool_call_id, output}]) -> one per output."""
  out = []
  for m in messages:
    if m["role"] == "tool" and isinstance(m.get("content"), list):
      out.extend({"role": "tool", "content": item["output"]} for item in m["content"])
    else:
      out.append(m)
  return out


def render(messages: Sequence[Mapping], tools: Sequence[Mapping] | None = None,
           add_generation_prompt: bool = False) -> str:
  """The whole conversation as text, identical to the thinking chat template's output."""
  messages = _expand_tool_messages(messages)
  first_system = bool(messages) and messages[0]["role"] == "system"
  text = system_text(messages[0]["content"] if first_system else None, tools)
  queries = [i for i, m in enumerate(messages) if _is_query(m)]
  last_query = queries[-1] if queries else len(messages) - 1
  for i, m in enumerate(messages):
    role, last = m["role"], i == len(messages) - 1
    content = m.get("content") if isinstance(m.get("content"), str) else ""
    if role == "user" or (role == "system" and i > 0):
      text += f"<|im_start|>{role}\n{content}<|im_end|>\n"
    elif role == "assistant":
      reasoning, content = _split_reasoning(m)
      if i > last_query and (last or reasoning):
        text += "<|im_start|>assistant\n<think>\n" + completion_text(
            reasoning, content, m.get("tool_calls")) + "\n"
      else:
        text += "<|im_start|>assistant\n" + assistant_body_text(
            content, m.get("tool_calls")) + "\n"
    elif role == "tool":
      if i == 0 or messages[i - 1]["role"] != "tool":
        text += "<|im_start|>user"
      text += f"\n<tool_response>\n{content}\n</tool_response>"
      if last or messages[i + 1]["role"] != "tool":
        text += "<|im_end|>\n"
  return text + (GENERATION_PROMPT if add_generation_prompt else "")


# ---------------------------------------------------------------- token level


class ChatFormat:
  """Binds the rendering rules to a tokenizer (HF `PreTrainedTokenizerBase`)."""

  def __init__(self, tokenizer: Any):
    self.tokenizer = tokenizer

  def encode(self, text: str) -> list[int]:
    return list(self.tokenizer.encode(text, add_special_tokens=False))

  def prompt_ids(self, messages: Sequence[Mapping],
                 tools: Sequence[Mapping] | None = None) -> list[int]:
    """Tokens of the conversation so far plus the generation prompt."""
    return self.encode(render(messages, tools, add_generation_prompt=True))

  def observation_ids(self, tool_outputs: Sequence[str],
                      generated_ids: Sequence[int]) -> list[int]:
    """Tokens appended after a generated turn that called tools, up to the next header.

    The template closes every turn with "<|im_end|>\\n"; the engine stops after <|im_end|>, so
    only "\\n" is missing.  A turn cut off without <|im_end|> gets the whole closer (those
    tokens are not the policy's and carry loss mask 0 like every observation token).
    """
    closer = "\n" if generated_ids and generated_ids[-1] == IM_END_ID else "<|im_end|>\n"
    return self.encode(closer + tool_responses_text(tool_outputs) + GENERATION_PROMPT)

  def decode(self, ids: Sequence[int]) -> str:
    """The text of `ids`; lone surrogates (possible from byte-level tokens) become U+FFFD."""
    return clean_text(self.tokenizer.decode(list(ids), skip_special_tokens=False))


# ---------------------------------------------------------------- parsing

ERROR_KINDS = (
    "missing_think_end",      # no </think>: the turn never left its reasoning
    "multiple_think_end",     # more than one </think>
    "unclosed_tool_call",     # <tool_call> and </tool_call> counts differ or are misordered
    "bad_tool_call_json",     # the body of a <tool_call> is not JSON
    "tool_call_not_object",   # the JSON is not an object
    "missing_tool_name",      # no string "name"
    "missing_arguments",      # no "arguments"
    "arguments_not_object",   # "arguments" is neither an object nor a JSON string of one
    "unknown_tool",           # "name" is not one of the offered tools
)


class ChatFormatError(ValueError):
  """An ill-formed assistant turn; `kind` is one of ERROR_KINDS."""

  def __init__(self, kind: str, detail: str):
    assert kind in ERROR_KINDS, kind
    super().__init__(f"{kind}: {detail}")
    self.kind = kind
    self.detail = detail


@dataclasses.dataclass(frozen=True)
class ToolCall:
  name: str
  arguments: dict


@dataclasses.dataclass(frozen=True)
class AssistantTurn:
  reasoning: str
  content: str
  tool_calls: tuple[ToolCall, ...]

  def to_message(self) -> dict:
    """HF-style assistant message; `render` of it reproduces the canonical turn."""
    msg = {"role": "assistant", "reasoning_content": self.reasoning, "content": self.content}
    if self.tool_calls:
      msg["tool_calls"] = [{"name": c.name, "arguments": c.arguments} for c in self.tool_calls]
    return msg


_CALL_OPEN, _CALL_CLOSE = "<tool_call>", "</tool_call>"
_STOP_TEXTS = ("<|im_end|>", "<|endoftext|>")
MAX_CALL_DEPTH = 16  # a tool call nested deeper is ill-formed (the real schemas need 2)


def _load_json(text: str, kind: str, what: str) -> Any:
  """`json.loads` for model output: every failure is a ChatFormatError of `kind`.

  Besides invalid JSON, `json.loads` raises RecursionError on thousands of nested brackets
  and ValueError on integers past Python's digit limit; both are the model's fault, so both
  make the turn ill-formed. Strings come back with lone surrogates (from `\\ud800`
  escapes) replaced, so no writer downstream can fail on them.
  """
  try:
    value = json.loads(text)
  except json.JSONDecodeError as e:
    raise ChatFormatError(kind, f"{e.msg} in {what}") from None
  except RecursionError:
    raise ChatFormatError(kind, f"nesting too deep in {what}") from None
  except ValueError as e:  # e.g. "Exceeds the limit (4300 digits) for integer string ..."
    raise ChatFormatError(kind, f"{str(e)[:80]} in {what}") from None
  if json_depth(value) > MAX_CALL_DEPTH:
    raise ChatFormatError(kind, f"nested deeper than {MAX_CALL_DEPTH} levels in {what}")
  return clean_json(value)


def _parse_call(body: str, tool_names: Collection[str] | None) -> ToolCall:
  obj = _load_json(body, "bad_tool_call_json", repr(clean_text(body.strip()[:200])))
  if not isinstance(obj, dict):
    raise ChatFormatError("tool_call_not_object", f"got {type(obj).__name__}")
  name = obj.get("name")
  if not isinstance(name, str) or not name:
    raise ChatFormatError("missing_tool_name", f"keys {sorted(obj)}")
  if "arguments" not in obj:
    raise ChatFormatError("missing_arguments", f"call to {name!r}")
  args = obj["arguments"]
  if isinstance(args, str):  # some models emit arguments as a JSON string
    args = _load_json(args, "arguments_not_object", f"call to {name!r}: {args[:200]!r}")
  if not isinstance(args, dict):
    raise ChatFormatError("arguments_not_object", f"call to {name!r}: {type(args).__name__}")
  if tool_names is not None and name not in tool_names:
    raise ChatFormatError("unknown_tool", f"{name!r} not in {sorted(tool_names)}")
  return ToolCall(name=name, arguments=args)


def _split_calls(text: str) -> tuple[list[str], list[str]]:
  """(the text between tool calls, the bodies of `<tool_call>...</tool_call>`), in one linear
  scan (a lazy regex rescans to the end from every unclosed tag: quadratic)."""
  opens, closes = text.count(_CALL_OPEN), text.count(_CALL_CLOSE)
  problem = ChatFormatError("unclosed_tool_call", f"{opens} opened, {closes} closed")
  pieces, bodies, pos = [], [], 0
  while (start := text.find(_CALL_OPEN, pos)) >= 0:
    end = text.find(_CALL_CLOSE, start + len(_CALL_OPEN))
    if end < 0:
      raise problem
    pieces.append(text[pos:start])
    bodies.append(text[start + len(_CALL_OPEN):end])
    pos = end + len(_CALL_CLOSE)
  pieces.append(text[pos:])
  if not opens == closes == len(bodies):  # a nested open, or a close without its open
    raise problem
  return pieces, bodies


def parse_assistant(text: str, tool_names: Collection[str] | None = None) -> AssistantTurn:
  """Splits generated text (after `<think>\\n`) into reasoning, content and tool calls.

  `text` is the decoded output with special tokens kept; a trailing stop token is ignored.
  `tool_names` (e.g. `tool_names_of(schemas)`) enables the unknown-tool check.
  """
  text = clean_text(text)
  for stop in _STOP_TEXTS:
    if text.endswith(stop):
      text = text[: -len(stop)]
      break
  n_end = text.count("</think>")
  if n_end == 0:
    raise ChatFormatError("missing_think_end", f"{len(text)} chars without </think>")
  if n_end > 1:
    raise ChatFormatError("multiple_think_end", f"{n_end} times")
  before, after = text.split("</think>")
  reasoning = before.rstrip("\n").split("<think>")[-1].strip("\n")
  after = after.lstrip("\n")
  pieces, bodies = _split_calls(after)
  calls = tuple(_parse_call(b, tool_names) for b in bodies)
  content = "\n".join(s.strip("\n") for s in pieces if s.strip())
  return AssistantTurn(reasoning=reasoning, content=content, tool_calls=calls)


def tool_names_of(schemas: Sequence[Mapping]) -> frozenset[str]:
  """Names of flat (`{"name": ...}`) or OpenAI-wrapped (`{"function": {...}}`) tool schemas."""
  return frozenset((s.get("function") or s)["name"] for s in schemas)
