"""SFT examples: multi-turn trajectories -> token ids + loss mask, with the RL mask semantics.

An example is `{"token_ids": [int], "loss_mask": [0|1]}`; `loss_mask[i] = 1` exactly when
token i is one the policy generates in the agent loop (rollout/agent.py): for every assistant
turn, the tokens after the generation prompt `<|im_start|>assistant\\n<think>\\n` up to and
including its `<|im_end|>`. Prompts, tool observations, the "\\n" that closes each turn and
the next turn's header are 0, as in a trajectory record (docs/design.md section 2).

Rendering is incremental, the agent loop's way (`render_example`): the prompt of the messages
before the first assistant turn (`ChatFormat.prompt_ids`), then each turn's canonical
completion (`rollout.chat.completion_text`), then the messages up to the next assistant turn
rendered by `rollout.chat.render` plus the next generation prompt. So a trajectory the agent
loop produced renders to its own token ids, and for a single-question conversation the ids
equal `apply_chat_template(messages, tools)` without its final "\\n" (tests/lab/test_sft.py).
With several user questions the template would drop the reasoning of turns before the last
one; here every turn is kept, because that is the context the agent loop shows the policy.

Accepted JSONL lines (`load_examples`), checked in this order:
  1. a trajectory record with `token_ids` and `loss_mask` (our rollouts, `lab.world.expert`):
     used as is. `status` other than "completed" is skipped, and with `min_outcome` > 0 so is
     a record whose `judge.outcome_reward` is lower (rejection sampling on dumped rollouts).
  2. `history` (the judge's format: tool_calls with JSON-string arguments, tool messages with
     `content: [{tool_call_id, output}]`) or `messages` (HF chat messages), plus optional
     `tools` (flat or OpenAI-wrapped schemas).
  3. DeepDive / CaRR SFT trajectories (HF `zai-org/DeepDive` split trajectories_sft):
     `conversations`, a list of `{role, content}` (or ShareGPT `{from, value}`). Mapping:
       system -> system; user / human -> user; assistant / gpt -> assistant; tool /
       observation / function -> tool (rendered inside <tool_response>). An assistant text
       holding `<think>...</think>` is split into reasoning and content; tool calls written
       inline as `<tool_call>...</tool_call>` stay in the content verbatim, which renders to
       the same text the model must produce. A user turn that already holds
       `<tool_response>` blocks is kept verbatim.
     Tools for 2 and 3: the record's `tools`; else none when a system message already lists
     tools (`<tools>`); else the browser schemas (`default_tools`), so the prompt shows the
     tools the agent loop offers.
Anything else is an `SFTDataError` naming the file, line and field.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from carr_common.jsonl import numbered_records
from rollout import chat
from rollout.tools.schemas import tool_schemas


class SFTDataError(ValueError):
  """A trajectory that cannot become an SFT example; the message names where and which field."""


_ROLES = {"system": "system", "user": "user", "human": "user", "assistant": "assistant",
          "gpt": "assistant", "tool": "tool", "observation": "tool", "function": "tool"}


def _normalize_message(m: Any, where: str) -> dict:
  if not isinstance(m, Mapping):
    raise SFTDataError(f"{where}: must be an object, got {type(m).__name__}")
  raw_role = m.get("role", m.get("from"))
  role = _ROLES.get(raw_role) if isinstance(raw_role, str) else None
  if role is None:
    raise SFTDataError(f"{where}.role: unknown role {raw_role!r} (known: {sorted(_ROLES)})")
  content = m.get("content", m.get("value"))
  if role == "tool" and isinstance(content, list):  # the judge's format: one message, N outputs
    if not all(isinstance(c, Mapping) and isinstance(c.get("output"), str) for c in content):
      raise SFTDataError(f"{where}.content: a tool message's list must hold {{output: str}}")
    return {"role": "tool", "content": [dict(c) for c in content]}
  if not isinstance(content, str) and not (role == "assistant" and content is None):
    raise SFTDataError(f"{where}.content: must be a string, got {type(content).__name__}")
  out = {"role": role, "content": content or ""}
  if role == "assistant":
    reasoning = m.get("reasoning_content")
    if reasoning is None and "</think>" in out["content"]:  # DeepDive: reasoning inline
      head, out["content"] = out["content"].rsplit("</think>", 1)
      reasoning = head.split("<think>")[-1]
      out["content"] = out["content"].lstrip("\n")
    if reasoning is not None and not isinstance(reasoning, str):
      raise SFTDataError(f"{where}.reasoning_content: must be a string")
    out["reasoning_content"] = (reasoning or "").strip("\n")
    calls = m.get("tool_calls") or []
    if not isinstance(calls, list):
      raise SFTDataError(f"{where}.tool_calls: must be a list")
    for k, call in enumerate(calls):
      fn = call.get("function") or call if isinstance(call, Mapping) else None
      if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not isinstance(
          fn.get("arguments"), (str, Mapping)):
        raise SFTDataError(f"{where}.tool_calls[{k}]: needs a string name and arguments "
                           "(object or JSON string)")
    if calls:
      out["tool_calls"] = calls
  return out


def normalize_messages(messages: Any, where: str = "messages") -> list[dict]:
  """Checked, role-mapped messages; raises SFTDataError naming the first bad field."""
  if not isinstance(messages, list) or not messages:
    raise SFTDataError(f"{where}: must be a non-empty list of messages")
  out = [_normalize_message(m, f"{where}[{i}]") for i, m in enumerate(messages)]
  if out[0]["role"] == "assistant":
    raise SFTDataError(f"{where}[0]: a conversation cannot start with an assistant turn")
  if not any(m["role"] == "assistant" for m in out):
    raise SFTDataError(f"{where}: no assistant turn, nothing to learn")
  return out


def render_example(messages: Sequence[Mapping], tools: Sequence[Mapping] | None,
                   fmt: chat.ChatFormat) -> dict[str, list[int]]:
  """Token ids and loss mask of normalized messages, rendered as the agent loop would."""
  first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
  ids = fmt.prompt_ids(messages[:first], tools)
  mask = [0] * len(ids)
  i = first
  while i < len(messages):
    m = messages[i]
    generated = fmt.encode(chat.completion_text(m.get("reasoning_content", ""), m["content"],
                                                m.get("tool_calls")))
    ids += generated
    mask += [1] * len(generated)
    j = i + 1
    while j < len(messages) and messages[j]["role"] != "assistant":
      j += 1
    if j == len(messages):
      break  # trailing non-assistant messages teach nothing
    # The turn's "\n" closer, the messages in between, the next header (never generated).
    following = fmt.encode("\n" + chat.render(messages[i + 1:j]) + chat.GENERATION_PROMPT)
    ids += following
    mask += [0] * len(following)
    i = j
  return {"token_ids": ids, "loss_mask": mask}


def _tools_for(record: Mapping, messages: Sequence[Mapping], default_tools: bool, where: str):
  tools = record.get("tools")
  if tools is not None:
    if not isinstance(tools, list) or not all(
        isinstance(t, Mapping) and isinstance((t.get("function") or t).get("name"), str)
        for t in tools):
      raise SFTDataError(f"{where}.tools: must be a list of schemas with a string name")
    return tools
  lists_tools = any(m["role"] == "system" and "<tools>" in m["content"] for m in messages)
  return tool_schemas() if default_tools and not lists_tools else None


def example_from_record(record: Any, fmt: chat.ChatFormat, where: str, *,
                        min_outcome: float = 0.0,
                        default_tools: bool = True) -> dict[str, Any] | None:
  """One SFT example from a JSONL record (module docstring), or None when it is filtered out."""
  if not isinstance(record, Mapping):
    raise SFTDataError(f"{where}: must be a JSON object")
  name = str(record.get("prompt_id", record.get("id", where)))
  if "token_ids" in record or "loss_mask" in record:
    if record.get("status", "completed") != "completed":
      return None
    outcome = (record.get("judge") or {}).get("outcome_reward")
    if min_outcome > 0 and (outcome is None or outcome < min_outcome):
      return None
    ids, mask = record.get("token_ids"), record.get("loss_mask")
    if not isinstance(ids, list) or not isinstance(mask, list) or len(ids) != len(mask):
      raise SFTDataError(f"{where}.loss_mask: token_ids and loss_mask must be lists of equal "
                         "length")
    if not all(isinstance(t, int) and t >= 0 for t in ids):
      raise SFTDataError(f"{where}.token_ids: must hold non-negative ints")
    if any(v not in (0, 1) for v in mask):
      raise SFTDataError(f"{where}.loss_mask: must hold only 0/1")
    return {"id": name, "token_ids": list(ids), "loss_mask": list(mask)}
  for field in ("history", "messages", "conversations"):
    if field in record:
      messages = normalize_messages(record[field], f"{where}.{field}")
      tools = _tools_for(record, messages, default_tools, where)
      return {"id": name, **render_example(messages, tools, fmt)}
  raise SFTDataError(f"{where}: no token_ids/loss_mask, history, messages or conversations")


def load_examples(path: str | Path, fmt: chat.ChatFormat, *, min_outcome: float = 0.0,
                  default_tools: bool = True) -> tuple[list[dict], int]:
  """(examples, number of records filtered out) from a JSONL file of trajectories."""
  examples, skipped = [], 0
  with open(path, encoding="utf-8") as f:
    for where, record in numbered_records(f, str(path), SFTDataError):
      ex = example_from_record(record, fmt, where, min_outcome=min_outcome,
                               default_tools=default_tools)
      if ex is None:
        skipped += 1
      elif sum(ex["loss_mask"]):
        examples.append(ex)
  return examples, skipped
