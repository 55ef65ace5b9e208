"""The rollout-engine interface shared by the SGLang HTTP client and the in-process JAX engine.

An engine turns prompt token ids into generated token ids plus one log-prob per generated
token; it never sees text.  The agent loop owns templating (rollout/chat.py) and appends the
engine's ids to the trajectory as they are.

Contract of `generate` (both engines):
  - never raises for a failed request: the result comes back with finish_reason "failed" and
    `error` set, so one bad rollout is counted instead of killing a training step;
  - raises `InvalidTokenIdsError` (a ValueError) before any work when an id is outside
    [0, vocab_size), naming the prompt position and the value;
  - `logprobs[i]` is the log-prob of `output_ids[i]` under the distribution the engine
    sampled from, i.e. softmax(logits / temperature) before top-p/top-k truncation (see
    rollout/engines/sglang.py for how that was established for SGLang); greedy requests
    (temperature 0) report log_softmax(logits).
  - a stop token that ended generation is the last element of `output_ids` (it belongs to
    the turn: the template closes turns with <|im_end|>).
"""
from __future__ import annotations

import abc
import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from rollout.chat import STOP_TOKEN_IDS

QWEN3_VOCAB_SIZE = 151_936  # rows of Qwen3's embedding (ids above 151668 are padding)
FINISH_REASONS = ("stop", "length", "abort", "failed")


class InvalidTokenIdsError(ValueError):
  """A prompt holds an id the model cannot embed (SGLang would crash on it)."""


def validate_token_ids(ids: Sequence[int], vocab_size: int, name: str = "prompt_ids") -> None:
  if len(ids) == 0:
    raise InvalidTokenIdsError(f"{name} is empty")
  for pos, tok in enumerate(ids):
    if isinstance(tok, bool) or not isinstance(tok, int):
      raise InvalidTokenIdsError(f"{name}[{pos}] = {tok!r} is not an int")
    if not 0 <= tok < vocab_size:
      raise InvalidTokenIdsError(f"{name}[{pos}] = {tok} is outside [0, {vocab_size})")


def validate_routes_from(routes_from: int | None, prompt_len: int, recording: bool,
                         needs: str) -> None:
  """`generate`'s `routes_from`: None, or a position in [0, prompt_len] of an engine that
  records routes (`needs` names what it takes to record them)."""
  if routes_from is not None and not (recording and 0 <= routes_from <= prompt_len):
    raise ValueError(f"routes_from={routes_from} needs {needs} and a position in "
                     f"[0, {prompt_len}]")


@dataclasses.dataclass(frozen=True)
class SamplingParams:
  temperature: float = 1.0  # 0 = greedy
  top_p: float = 1.0
  top_k: int = -1  # -1 = no top-k
  max_new_tokens: int = 1024
  stop_token_ids: tuple[int, ...] = STOP_TOKEN_IDS

  def __post_init__(self):
    if self.temperature < 0:
      raise ValueError(f"temperature must be >= 0, got {self.temperature}")
    if not 0 < self.top_p <= 1:
      raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
    if self.top_k == 0 or self.top_k < -1:
      raise ValueError(f"top_k must be -1 or >= 1, got {self.top_k}")
    if self.max_new_tokens < 1:
      raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclasses.dataclass(frozen=True)
class GenerationResult:
  output_ids: list[int]
  logprobs: list[float]  # one per output id
  finish_reason: str  # one of FINISH_REASONS
  weight_version: str
  prompt_tokens: int
  rid: str
  error: str | None = None  # set when finish_reason == "failed" (or the server's abort message)
  attempts: int = 1  # HTTP attempts spent (retries + 1)
  # MoE, when asked (`routes_from`): the experts routed at positions routes_from ..
  # prompt_tokens + len(output_ids) - 2, [positions, layers, k] int (rollout/routes.py)
  routed_experts: Any = None

  @property
  def ok(self) -> bool:
    return self.finish_reason in ("stop", "length")


class Engine(abc.ABC):
  """Async generation engine.  Implementations must be safe for concurrent `generate` calls."""

  vocab_size: int
  record_routes: bool = False  # `generate` takes routes_from= (MoE routing replay)

  @abc.abstractmethod
  async def generate(self, prompt_ids: Sequence[int], params: SamplingParams,
                     rid: str | None = None, routes_from: int | None = None
                     ) -> GenerationResult:
    """One completion of `prompt_ids`; see the module docstring for the contract. With
    `routes_from` (only when `record_routes`; in [0, len(prompt_ids)]) the result also holds the
    experts routed from that position on (`GenerationResult.routed_experts`); an engine that
    records no routes raises ValueError when asked."""

  async def generate_many(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                          rids: Sequence[str] | None = None) -> list[GenerationResult]:
    """Concurrent `generate` over prompts (the engine bounds concurrency); results in order."""
    for k, ids in enumerate(prompts):  # fail the whole call early rather than half-sent
      validate_token_ids(ids, self.vocab_size, f"prompts[{k}]")
    rids = rids or [None] * len(prompts)
    return list(await asyncio.gather(
        *(self.generate(ids, params, rid) for ids, rid in zip(prompts, rids))))

  @abc.abstractmethod
  async def abort(self, rid: str) -> None:
    """Stops a running request; its `generate` returns with finish_reason "abort"."""

  @property
  @abc.abstractmethod
  def weight_version(self) -> str:
    """Version of the weights the engine currently serves."""

  async def close(self) -> None:
    """Releases connections / device memory."""
