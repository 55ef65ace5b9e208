"""The multi-turn tool-using agent loop: one CaRR record -> G trajectories.

  fmt = ChatFormat(tokenizer)                       # rollout/chat.py
  backend = CorpusBackend.from_jsonl("world/corpus.jsonl")
  groups = await rollout_groups(engine, fmt, backend, records, 8, RolloutConfig())
  write_jsonl("rollouts.jsonl", [t for g in groups for t in g])   # rollout/trajectory.py

One episode (`run_episode`): render the record's messages with its tool schemas in the system
turn and open the assistant turn (`<think>\\n`); then, turn by turn, let the engine generate up
to a stop token, parse reasoning / content / `<tool_call>`s, check each call against its
schema, run the calls in order on the episode's own `BrowserSession` (awaiting, so other
episodes generate and browse meanwhile), and append the observation tokens (the tool turn and
the next assistant header).  The token ids are only ever appended: generated ids are the
engine's own, never re-tokenized, and equal `apply_chat_template` of the history whenever the
model's text is in canonical form (tests/rollout/agent/test_episode.py checks it on a full episode).

How an episode ends (`status`, `error_kind`):
  completed   the model answered without a tool call                           (null)
  ill_formed  first ill-formed turn, when `stop_on_ill_formed`: a kind of
              rollout.chat.ERROR_KINDS, or "bad_arguments" (schema check failed)
  tool_limit  the turn's calls would exceed `max_tool_calls`; they are not run  "tool_limit"
  truncated   a turn used its whole budget without a stop token:
              "turn_token_limit" (budget was max_turn_tokens) or "context_limit" (it was the
              room left in max_context_tokens); also "context_limit" when no room is left
              or the next observation would not fit (it is then dropped, tokens and history);
              "engine_limit" when the engine stopped short of the budget without a stop token
              (its own length limit, e.g. an SGLang context length below max_context_tokens)
  failed      the engine gave no usable turn after its own retries: "engine_failed",
              "engine_abort", "engine_error" (it raised), "engine_bad_output"; or this
              code crashed: "internal_error".  The trainer drops failed episodes.
With `stop_on_ill_formed=False` an unparsable turn gets an error observation instead (its kind
is added to `format_errors`) and a call with bad arguments gets the tool's error message.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import json
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from tqdm.auto import tqdm

from carr_common.vocab import KIND_OF_TOOL
from rollout.chat import (STOP_TOKEN_IDS, AssistantTurn, ChatFormat, ChatFormatError,
                          parse_assistant, tool_names_of)
from rollout.engines.base import Engine, GenerationResult, SamplingParams
from rollout.tools import Backend, BrowserSession, ToolResult, tool_schemas, validate_call
from rollout.trajectory import Trajectory, failed_record

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
  """How episodes are sampled and bounded."""

  # Sampling (paper: temperature 1.0, top_p 1.0).  Engines report log-probs of
  # softmax(logits / temperature), so the trainer must recompute with the same temperature.
  temperature: float = 1.0
  top_p: float = 1.0
  top_k: int = -1  # -1 = no top-k
  # Most new tokens one assistant turn may generate (reasoning + content + calls).
  max_turn_tokens: int = 8_192
  # Most tokens of a whole episode: prompt + turns + observations (paper: 64k, eval also 128k).
  # A turn's budget is min(max_turn_tokens, max_context_tokens - current length).
  max_context_tokens: int = 65_536
  # Most tool calls per episode (paper: 100); a turn that would exceed it ends the episode.
  max_tool_calls: int = 100
  # Paper: stop at the first ill-formed turn.  False: feed an error observation back.
  stop_on_ill_formed: bool = True
  # Episodes in flight at once over all groups (= SGLang requests in flight; each holds a
  # browser session; the in-process engine bounds its own batch, rollout.max_batch).
  concurrency: int = 64
  # Seconds one tool call may take; a slower call becomes an error observation "timeout".
  tool_timeout_s: float = 120.0
  # Optional system message, rendered before the tools section of the system turn.
  system_prompt: str | None = None

  def __post_init__(self):
    self.sampling(1)  # SamplingParams checks temperature, top_p and top_k, naming them
    for name in ("max_turn_tokens", "max_context_tokens", "concurrency"):
      if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
        raise ValueError(f"RolloutConfig.{name} must be a positive int, got "
                         f"{getattr(self, name)!r}")
    if not isinstance(self.max_tool_calls, int) or self.max_tool_calls < 0:
      raise ValueError(f"RolloutConfig.max_tool_calls must be an int >= 0, got "
                       f"{self.max_tool_calls!r}")
    if not self.tool_timeout_s > 0:
      raise ValueError(f"RolloutConfig.tool_timeout_s must be > 0, got {self.tool_timeout_s!r}")

  def sampling(self, max_new_tokens: int) -> SamplingParams:
    return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                          max_new_tokens=max_new_tokens, stop_token_ids=STOP_TOKEN_IDS)


# ------------------------------------------------------------------------- records and messages


def check_carr_record(record: Any, where: str = "record") -> None:
  """Raises ValueError naming the field when a CaRR record cannot start an episode."""
  if not isinstance(record, Mapping):
    raise ValueError(f"{where} must be an object, got {type(record).__name__}")
  where = f"{where} (id {record.get('id')!r})"
  if not isinstance(record.get("id"), (str, int)) or isinstance(record.get("id"), bool):
    raise ValueError(f"{where}: 'id' must be a string")
  messages = record.get("input_messages")
  if not isinstance(messages, list) or not messages:
    raise ValueError(f"{where}: 'input_messages' must be a non-empty list of messages")
  for k, m in enumerate(messages):
    if not isinstance(m, Mapping) or m.get("role") not in ("system", "user") or not isinstance(
        m.get("content"), str):
      raise ValueError(f"{where}: input_messages[{k}] must be a system or user message with "
                       "string content")
  if messages[-1]["role"] != "user":
    raise ValueError(f"{where}: the last of 'input_messages' must be the user question")
  tools = record.get("tools")
  if tools is not None and (not isinstance(tools, list) or not all(
      isinstance(t, Mapping) and isinstance((t.get("function") or t).get("name"), str)
      for t in tools)):
    raise ValueError(f"{where}: 'tools' must be a list of schemas with a string 'name'")


def record_tools(record: Mapping) -> list:
  """The tool schemas a record offers: its own `tools` ([] = none), else the browser's."""
  return tool_schemas() if record.get("tools") is None else record["tools"]


def initial_messages(record: Mapping, cfg: RolloutConfig) -> list[dict]:
  messages = [dict(m) for m in record["input_messages"]]
  if cfg.system_prompt is not None and messages[0]["role"] != "system":
    messages.insert(0, {"role": "system", "content": cfg.system_prompt})
  return messages


def _strip_stop(text: str) -> str:
  for stop in ("<|im_end|>", "<|endoftext|>"):
    if text.endswith(stop):
      return text[:-len(stop)]
  return text


def assistant_message(turn: AssistantTurn, call_ids: Sequence[str]) -> dict:
  """A parsed turn in the judge's history format (arguments as a JSON string)."""
  msg = {"role": "assistant", "reasoning_content": turn.reasoning, "content": turn.content}
  if turn.tool_calls:
    # ensure_ascii=False and default separators: the chat template's `tojson`, so the history
    # renders to the same tokens when the model wrote canonical JSON.
    msg["tool_calls"] = [
        {"tool_call_id": cid, "name": c.name,
         "arguments": json.dumps(c.arguments, ensure_ascii=False)}
        for cid, c in zip(call_ids, turn.tool_calls)]
  return msg


def raw_message(text: str) -> dict:
  """An unparsable or cut-off turn: its decoded text, verbatim, as content."""
  return {"role": "assistant", "reasoning_content": "", "content": _strip_stop(text)}


def tool_message(call_ids: Sequence[str], outputs: Sequence[str]) -> dict:
  return {"role": "tool", "content": [{"tool_call_id": cid, "output": out}
                                      for cid, out in zip(call_ids, outputs)]}


def format_feedback(error: ChatFormatError) -> str:
  return (f"Your last message could not be run ({error}). Finish your reasoning with </think>, "
          "then either answer or call a tool as <tool_call>\n{\"name\": <tool name>, "
          "\"arguments\": {<arguments as a JSON object>}}\n</tool_call>.")


# ------------------------------------------------------------------------- one episode


async def _generate(engine: Engine, traj: Trajectory, params: SamplingParams,
                    rid: str) -> GenerationResult | None:
  """One turn from the engine; None (and the trajectory failed) when it yields nothing usable."""
  start = time.perf_counter()
  asked = traj.routed_positions if engine.record_routes else None
  try:
    result = await engine.generate(list(traj.token_ids), params, rid, routes_from=asked)
  except Exception as e:  # the engine contract says it should not raise; count it anyway
    traj.finish("failed", "engine_error", f"{type(e).__name__}: {e}")
    return None
  finally:
    traj.generation_s += time.perf_counter() - start
  if not result.ok:
    traj.finish("failed", f"engine_{result.finish_reason}",
                result.error or f"finish_reason {result.finish_reason!r}")
    return None
  n = len(result.output_ids)
  if not 0 < n <= params.max_new_tokens or len(result.logprobs) != n:
    traj.finish("failed", "engine_bad_output", f"{n} output ids (budget "
                f"{params.max_new_tokens}) with {len(result.logprobs)} log-probs")
    return None
  if asked is not None:  # the new positions: the rest of the context, and the output but its last
    want = len(traj.token_ids) + n - 1 - asked
    got = None if result.routed_experts is None else len(result.routed_experts)
    if got != want:
      traj.finish("failed", "engine_bad_routes", f"{got} routed positions, want {want}")
      return None
    traj.routes.append(result.routed_experts)
  return result


async def _run_tools(session: BrowserSession, turn: AssistantTurn, traj: Trajectory,
                     timeout_s: float) -> list[ToolResult]:
  """The turn's calls in order (open may use the search before it, find the page opened)."""
  start = time.perf_counter()
  results = []
  for call in turn.tool_calls:
    try:
      result = await asyncio.wait_for(session.call(call.name, call.arguments), timeout_s)
    except asyncio.TimeoutError:
      result = ToolResult(f"{call.name} did not answer within {timeout_s:g} seconds.", False,
                          "timeout", KIND_OF_TOOL.get(call.name))
    traj.count_tool(result.kind, None if result.ok else (result.error or "error"))
    results.append(result)
  traj.tool_s += time.perf_counter() - start
  return results


def _parse(text: str, tool_names: Collection[str]) -> tuple[AssistantTurn, str | None]:
  """(turn, schema problem or None); raises ChatFormatError when the text is ill-formed."""
  turn = parse_assistant(text, tool_names)
  for call in turn.tool_calls:
    problem = validate_call(call.name, call.arguments)
    if problem:
      return turn, problem
  return turn, None


def _append_observation(fmt: ChatFormat, traj: Trajectory, cfg: RolloutConfig,
                        call_ids: Sequence[str], outputs: Sequence[str],
                        generated: Sequence[int]) -> bool:
  """Appends the tool turn (tokens + history); False (and truncated) when it does not fit."""
  obs = fmt.observation_ids(outputs, generated)
  if len(traj) + len(obs) >= cfg.max_context_tokens:  # no room left for the next turn
    traj.finish("truncated", "context_limit", f"the observation ({len(obs)} tokens) would "
                f"leave no room in {cfg.max_context_tokens} tokens (at {len(traj)})")
    return False
  traj.add_observation(obs)
  traj.history.append(tool_message(call_ids, outputs))
  return True


async def _episode_loop(engine: Engine, fmt: ChatFormat, session: BrowserSession,
                        traj: Trajectory, tool_names: Collection[str],
                        cfg: RolloutConfig) -> None:
  for turn_index in itertools.count():  # ends: every turn adds >= 1 token to a bounded context
    room = cfg.max_context_tokens - len(traj)
    if room < 1:
      traj.finish("truncated", "context_limit",
                  f"{len(traj)} tokens leave no room in {cfg.max_context_tokens}")
      return
    budget = min(cfg.max_turn_tokens, room)
    rid = f"{traj.prompt_id}/{traj.sample_index}/{turn_index}"
    result = await _generate(engine, traj, cfg.sampling(budget), rid)
    if result is None:
      return
    out = result.output_ids
    traj.add_generated(out, result.logprobs, result.weight_version)
    text = fmt.decode(out)
    if out[-1] not in STOP_TOKEN_IDS:
      traj.history.append(raw_message(text))
      if len(out) < budget:  # e.g. a server whose context length is below max_context_tokens
        kind = "engine_limit"
      else:
        kind = "turn_token_limit" if budget == cfg.max_turn_tokens else "context_limit"
      traj.finish("truncated", kind, f"turn {turn_index} stopped after {len(out)} of its "
                  f"{budget} tokens without a stop token ({result.finish_reason})")
      return
    try:
      turn, problem = _parse(text, tool_names)
    except ChatFormatError as e:
      traj.history.append(raw_message(text))
      if cfg.stop_on_ill_formed:
        traj.finish("ill_formed", e.kind, str(e))
        return
      traj.format_errors.append(e.kind)
      if not _append_observation(fmt, traj, cfg, [f"call_{turn_index}_invalid"],
                                 [format_feedback(e)], out):
        return
      continue
    call_ids = [f"call_{turn_index}_{k}" for k in range(len(turn.tool_calls))]
    traj.history.append(assistant_message(turn, call_ids))
    if problem:
      if cfg.stop_on_ill_formed:
        traj.finish("ill_formed", "bad_arguments", problem)
        return
      traj.format_errors.append("bad_arguments")  # the session answers with the problem
    if not turn.tool_calls:
      traj.finish("completed")
      return
    if traj.total_tool_calls + len(turn.tool_calls) > cfg.max_tool_calls:
      traj.finish("tool_limit", "tool_limit", f"{len(turn.tool_calls)} more calls after "
                  f"{traj.total_tool_calls} would exceed max_tool_calls={cfg.max_tool_calls}")
      return
    results = await _run_tools(session, turn, traj, cfg.tool_timeout_s)
    if not _append_observation(fmt, traj, cfg, call_ids, [r.text for r in results], out):
      return


async def run_episode(engine: Engine, fmt: ChatFormat, backend: Backend, record: Mapping,
                      sample_index: int, cfg: RolloutConfig) -> dict[str, Any]:
  """One trajectory record for `record` (a checked CaRR record); see the module docstring."""
  start = time.perf_counter()
  messages = initial_messages(record, cfg)
  tools = record_tools(record)
  env = (record.get("metadata") or {}).get("remote_env_info") or {}
  session = BrowserSession(backend, forbidden_strs=env.get("search_forbidden_strs") or ())
  traj = Trajectory.start(str(record["id"]), sample_index, fmt.prompt_ids(messages, tools),
                          messages, engine.weight_version)
  try:
    await _episode_loop(engine, fmt, session, traj, tool_names_of(tools), cfg)
  finally:
    traj.total_s = time.perf_counter() - start
  return traj.to_record()


# ------------------------------------------------------------------------- many episodes


async def rollout_groups(engine: Engine, fmt: ChatFormat, backend: Backend,
                         records: Sequence[Mapping], group_size: int, cfg: RolloutConfig,
                         progress: bool = True) -> list[list[dict[str, Any]]]:
  """`group_size` episodes per record, all records at once (at most `cfg.concurrency` in
  flight).  Returns one list per record, in record order, samples in index order.  An episode
  that crashes is logged and returned as "failed" (error_kind "internal_error")."""
  if not isinstance(group_size, int) or group_size < 1:
    raise ValueError(f"group_size must be a positive int, got {group_size!r}")
  for k, record in enumerate(records):
    check_carr_record(record, f"records[{k}]")
  slots = asyncio.Semaphore(cfg.concurrency)
  statuses: collections.Counter[str] = collections.Counter()

  with tqdm(total=len(records) * group_size, desc="rollout", unit="traj",
            disable=not progress, dynamic_ncols=True) as bar:

    async def one(record: Mapping, index: int) -> dict[str, Any]:
      async with slots:
        try:
          out = await run_episode(engine, fmt, backend, record, index, cfg)
        except Exception as e:  # a bug in one episode must not kill the training step
          log.exception("episode %s/%d crashed", record["id"], index)
          out = failed_record(str(record["id"]), index, "internal_error",
                              f"{type(e).__name__}: {e}")
      statuses[out["status"]] += 1
      bar.set_postfix(statuses, refresh=False)
      bar.update(1)
      return out

    flat = await asyncio.gather(*(one(r, i) for r in records for i in range(group_size)))
  return [flat[k * group_size:(k + 1) * group_size] for k in range(len(records))]
