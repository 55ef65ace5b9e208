"""In-process JAX rollout engine: the CPU default when no SGLang URL is configured.

Implements `rollout.engines.base.Engine` over `carr_jax.model.decode.generate` (KV-cache prefill,
on-device sampling loop). Same contract as the SGLang client: token ids in, token ids and
one log-prob per generated token out, log-probs of softmax(logits / temperature) before
top-p/top-k truncation, stop token kept as the last output id.

  engine = JaxEngine(params, cfg, weight_version="0", max_batch=8)  # vocab=RestrictedVocab
  results = await engine.generate_many(prompts, SamplingParams(temperature=1.0))
  await engine.update_weights(new_params, weight_version="1")

Batching: `generate` queues its request and one worker task serves the queue. Requests that
arrive together (e.g. from one `asyncio.gather`) form one batch of up to `max_batch` rows;
requests arriving while a batch runs form the next. Each row keeps its own sampling
parameters. The batch runs in a worker thread, so the event loop (tool calls, judge
requests) keeps going meanwhile.

Shapes are bucketed so a run compiles a handful of times: rows, new tokens and stop-id
slots to powers of two, the prompt length to quarter steps between them (`length_bucket`:
at most 1.25x padding where a power of two can waste almost 2x; the KV cache is prompt bucket
plus new tokens); padding rows generate nothing.

Shared prefix (`prefix_multiple` > 0, the config's `batch.prefix_multiple`): the leading
tokens all of a batch's prompts share (the chat template's system turn), rounded down to that
multiple, are computed once per batch (`decode.generate`'s `prefix_tokens`), and the rows keep
only what follows; `prefix_lengths` records each batch's.

Randomness: a request's 32-bit seed hashes the engine seed, the weight version served when it
is submitted and its rid (`request_seed`), and row draws depend only on that seed and the
decode step.  The agent's rids name the episode and turn (prompt/sample/turn), so samples are
reproduced whatever the batch composition and the order in which concurrent episodes reach
the engine; a run resumed from a checkpoint samples what the uninterrupted run sampled.
Requests without a rid are numbered in call order.  The same rid at the same weight version
gives the same draws.

Aborting: a queued request returns at once with finish_reason "abort"; a request whose batch
is already running finishes on device (the decode loop cannot be interrupted) and is then
reported as "abort" with what it generated.

Routes (MoE routing replay, rollout/routes.py): with `record_routes` every batch also returns
the experts each layer routed each token to, and `generate(..., routes_from=i)` returns those
of positions i .. len(prompt) + len(output) - 2 (the last output token is routed when a later
request feeds it), so a multi-turn episode asks each turn for the positions it has not seen.

Weights: `update_weights(params, version)` swaps the in-memory params between batches (a
running batch finishes on the version it started with, which its results report);
`update_weights_from_disk(hf_dir, version)` loads an HF checkpoint first, like SGLang's.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import itertools
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from carr_jax.model import decode
from carr_jax.model import hf_io
from carr_jax.model.config import Qwen3Config
from carr_jax.model.restricted_vocab import RestrictedVocab
from rollout import routes as routes_lib
from rollout.engines.base import (Engine, GenerationResult, SamplingParams, validate_routes_from,
                                  validate_token_ids)


def bucket(n: int, minimum: int = 1) -> int:
  """Smallest power of two >= max(n, minimum)."""
  n = max(n, minimum, 1)
  return 1 << (n - 1).bit_length()


def length_bucket(n: int, minimum: int = 1) -> int:
  """Smallest of `bucket(n, minimum)`'s lower power of two p plus a multiple of p/4 that is >= n.

  Four shapes per doubling: 280 -> 320, 350 -> 384, 430 -> 448 (powers of two: all 512).
  """
  top = bucket(n, minimum)
  half = top // 2
  if half < max(minimum, 4):
    return top
  step = half // 4
  return half + -(-(n - half) // step) * step


@dataclasses.dataclass
class _Request:
  prompt_ids: list[int]
  params: SamplingParams
  rid: str
  seed: int
  future: asyncio.Future
  aborted: bool = False
  routes_from: int | None = None  # return the routed experts from this position on


def prompt_prefix_length(prompts: Sequence[Sequence[int]], multiple: int) -> int:
  """The leading tokens every prompt shares, rounded down to a multiple of `multiple` (0: no
  sharing), leaving every prompt at least one token of its own. (Token lists of any length;
  the trainer's packed [R, S] rows have their own rule: `rl.packing.shared_prefix_length`.)"""
  if multiple <= 0:
    return 0
  first, n = prompts[0], min(len(p) for p in prompts) - 1
  for p in prompts[1:]:
    n = next((i for i in range(n) if p[i] != first[i]), n)
  return n // multiple * multiple


def _pack(batch: Sequence[_Request], rows: int, min_len: int,
          prefix_multiple: int = 0) -> dict[str, np.ndarray]:
  """Requests -> right-padded numpy arguments of `decode.generate` with `rows` rows; with
  `prefix_multiple`, the prefix the requests share (`prompt_prefix_length`) is cut off into
  "prefix_tokens" [P] when P > 0."""
  shared = prompt_prefix_length([r.prompt_ids for r in batch], prefix_multiple)
  prompt_len = length_bucket(max(len(r.prompt_ids) for r in batch) - shared, min_len)
  stop_slots = bucket(max(len(r.params.stop_token_ids) for r in batch), 2)
  args = {"tokens": np.zeros((rows, prompt_len), np.int32),
          "lengths": np.ones((rows,), np.int32),  # padding rows: one token, no output
          "seeds": np.zeros((rows,), np.uint32),
          "temperature": np.zeros((rows,), np.float32),
          "top_p": np.ones((rows,), np.float32),
          "top_k": np.full((rows,), -1, np.int32),
          "max_new_tokens": np.zeros((rows,), np.int32),
          "stop_ids": np.full((rows, stop_slots), -1, np.int32)}
  if shared:
    args["prefix_tokens"] = np.asarray(batch[0].prompt_ids[:shared], np.int32)
  for i, r in enumerate(batch):
    p = r.params
    args["tokens"][i, :len(r.prompt_ids) - shared] = r.prompt_ids[shared:]
    args["lengths"][i] = len(r.prompt_ids) - shared
    args["seeds"][i] = r.seed
    args["temperature"][i], args["top_p"][i], args["top_k"][i] = p.temperature, p.top_p, p.top_k
    args["max_new_tokens"][i] = p.max_new_tokens
    args["stop_ids"][i, :len(p.stop_token_ids)] = p.stop_token_ids
  return args


def _routes(out: dict[str, np.ndarray], i: int, r: _Request, n: int,
            num_experts: int) -> np.ndarray | None:
  """Row i's experts at positions r.routes_from .. len(prompt) + n - 2 [N, L, k] (the last
  output token is routed when a later request feeds it), stored compactly, or None when not
  asked."""
  if r.routes_from is None:
    return None
  routes = np.concatenate([out["prompt_routes"][i, :len(r.prompt_ids)],
                           out["routes"][i, :max(n - 1, 0)]])
  return routes_lib.compact(routes[r.routes_from:], num_experts)


def _unpack(out: dict[str, np.ndarray], batch: Sequence[_Request], version: str,
            num_experts: int = 0) -> list[GenerationResult]:
  results = []
  for i, r in enumerate(batch):
    n = int(out["num_tokens"][i])
    reason = "stop" if out["stop_token"][i] >= 0 else "length"
    results.append(GenerationResult(
        output_ids=[int(t) for t in out["tokens"][i, :n]],
        logprobs=[float(x) for x in out["logprobs"][i, :n]],
        finish_reason="abort" if r.aborted else reason, weight_version=version,
        prompt_tokens=len(r.prompt_ids), rid=r.rid,
        error="aborted while its batch was running" if r.aborted else None,
        routed_experts=_routes(out, i, r, n, num_experts)))
  return results


def request_seed(seed: int, weight_version: str, rid: str) -> int:
  """The 32-bit sampling seed of request `rid` (stable across processes and runs)."""
  digest = hashlib.blake2b(f"{seed}/{weight_version}/{rid}".encode(), digest_size=4).digest()
  return int.from_bytes(digest, "little")


class JaxEngine(Engine):
  """Batched in-process generation with a Qwen3 params tree (see the module docstring)."""

  def __init__(self, params: Any, cfg: Qwen3Config, *, weight_version: str = "0",
               max_batch: int = 8, seed: int = 0, max_total_len: int | None = None,
               min_len_bucket: int = 16, vocab: RestrictedVocab | None = None,
               prefix_multiple: int = 0, record_routes: bool = False):
    if max_batch < 1:
      raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    if record_routes and (not cfg.is_moe or prefix_multiple):
      raise ValueError("record_routes is for a mixture of experts without a shared prefix")
    if prefix_multiple < 0:
      raise ValueError(f"prefix_multiple must be >= 0, got {prefix_multiple}")
    if vocab is not None:
      vocab.check_fits(cfg.vocab_size)
    self.cfg = cfg
    self.vocab = vocab  # the output vocabulary sampled from (None: all ids)
    self.vocab_size = cfg.vocab_size
    self.max_batch = max_batch
    self.max_total_len = max_total_len or cfg.max_position_embeddings
    self.min_len_bucket = min_len_bucket
    self.prefix_multiple = prefix_multiple
    self.record_routes = record_routes  # every batch also returns its routed experts
    self._params, self._version = params, str(weight_version)
    self.seed = seed
    self._anonymous = itertools.count()  # rids of requests sent without one
    self._queue: collections.deque[_Request] = collections.deque()
    self._running: dict[str, _Request] = {}
    self._wake: asyncio.Event | None = None
    self._worker: asyncio.Task | None = None
    self._batch_lock: asyncio.Lock | None = None
    self.batch_sizes: list[int] = []  # requests per batch served, in order (for metrics)
    self.prefix_lengths: list[int] = []  # each batch's shared prefix P (0: none), in order

  # ------------------------------------------------------------------ generation

  async def generate(self, prompt_ids: Sequence[int], params: SamplingParams,
                     rid: str | None = None, routes_from: int | None = None
                     ) -> GenerationResult:
    """See `Engine.generate`; `routes_from` (MoE, `record_routes`): also return the experts
    routed at every position from there on (`GenerationResult.routed_experts`)."""
    validate_token_ids(prompt_ids, self.vocab_size)
    validate_routes_from(routes_from, len(prompt_ids), self.record_routes,
                         "record_routes=True")
    rid = rid or f"anonymous-{next(self._anonymous)}"
    total = len(prompt_ids) + params.max_new_tokens
    if total > self.max_total_len:
      return GenerationResult(
          output_ids=[], logprobs=[], finish_reason="failed", weight_version=self._version,
          prompt_tokens=len(prompt_ids), rid=rid,
          error=(f"prompt_ids ({len(prompt_ids)}) + max_new_tokens ({params.max_new_tokens}) "
                 f"= {total} exceeds max_total_len {self.max_total_len}"))
    self._start_worker()
    request = _Request(list(prompt_ids), params, rid,
                       request_seed(self.seed, self._version, rid),
                       asyncio.get_running_loop().create_future(), routes_from=routes_from)
    self._queue.append(request)
    self._wake.set()
    return await request.future

  def _start_worker(self) -> None:
    if self._worker is None or self._worker.done():
      self._wake, self._batch_lock = asyncio.Event(), asyncio.Lock()
      self._worker = asyncio.get_running_loop().create_task(self._serve())

  async def _serve(self) -> None:
    while True:
      await self._wake.wait()
      self._wake.clear()
      await asyncio.sleep(0)  # let requests scheduled in the same tick join this batch
      while self._queue:
        batch = [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]
        batch = [r for r in batch if not r.future.done()]  # callers that gave up (cancelled)
        if batch:
          async with self._batch_lock:
            await self._run(batch)

  async def _run(self, batch: list[_Request]) -> None:
    params, version = self._params, self._version
    self.batch_sizes.append(len(batch))
    self._running.update((r.rid, r) for r in batch)
    try:
      results = await asyncio.to_thread(self._generate_batch, params, batch, version)
    except Exception as e:  # one broken batch is reported per request, never raised
      results = [GenerationResult(output_ids=[], logprobs=[], finish_reason="failed",
                                  weight_version=version, prompt_tokens=len(r.prompt_ids),
                                  rid=r.rid, error=f"{type(e).__name__}: {e}") for r in batch]
    finally:
      for r in batch:
        self._running.pop(r.rid, None)
    for r, result in zip(batch, results):
      if not r.future.done():
        r.future.set_result(result)

  def _generate_batch(self, params: Any, batch: list[_Request],
                      version: str) -> list[GenerationResult]:
    args = _pack(batch, bucket(len(batch)), self.min_len_bucket, self.prefix_multiple)
    self.prefix_lengths.append(len(args.get("prefix_tokens", ())))
    max_steps = bucket(max(r.params.max_new_tokens for r in batch), self.min_len_bucket)
    out = decode.generate_jit(params, self.cfg, **args, max_steps=max_steps, vocab=self.vocab,
                              record_routes=self.record_routes)
    return _unpack(jax.device_get(out), batch, version, self.cfg.num_experts)

  @property
  def running_rids(self) -> set[str]:
    """Ids of the requests in the batch on device now."""
    return set(self._running)

  async def abort(self, rid: str) -> None:
    for r in list(self._queue):
      if r.rid == rid:
        self._queue.remove(r)
        r.future.set_result(GenerationResult(
            output_ids=[], logprobs=[], finish_reason="abort", weight_version=self._version,
            prompt_tokens=len(r.prompt_ids), rid=rid, error="aborted before it started"))
    if rid in self._running:
      self._running[rid].aborted = True

  # ------------------------------------------------------------------ weights

  @property
  def weight_version(self) -> str:
    return self._version

  async def update_weights(self, params: Any, weight_version: str) -> None:
    """Serves `params` from the next batch on; they must match the current tree exactly."""
    def layout(tree):
      return (jax.tree.structure(tree), [(x.shape, x.dtype) for x in jax.tree.leaves(tree)])
    if layout(params) != layout(self._params):
      raise ValueError("update_weights: params differ from the served tree in structure, "
                       "shape or dtype")
    if self._batch_lock is None:
      self._params, self._version = params, str(weight_version)
      return
    async with self._batch_lock:
      self._params, self._version = params, str(weight_version)

  async def update_weights_from_disk(self, model_path: str, weight_version: str) -> None:
    """Loads the HF checkpoint at `model_path` (same architecture) and serves it."""
    params = await asyncio.to_thread(hf_io.load_hf_params, model_path, self.cfg)
    await self.update_weights(params, weight_version)

  async def close(self) -> None:
    """Stops the worker; requests still queued or running come back as "abort"."""
    for r in list(self._queue) + list(self._running.values()):
      if not r.future.done():
        r.future.set_result(GenerationResult(
            output_ids=[], logprobs=[], finish_reason="abort", weight_version=self._version,
            prompt_tokens=len(r.prompt_ids), rid=r.rid, error="engine closed"))
    self._queue.clear()
    if self._worker is not None:
      self._worker.cancel()
      try:
        await self._worker
      except asyncio.CancelledError:
        pass
      self._worker = None
