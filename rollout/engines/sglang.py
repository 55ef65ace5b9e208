"""Async client of SGLang's native HTTP API: token ids in, token ids and log-probs out.

  engine = SGLangEngine(["http://127.0.0.1:30000"], vocab_size=151936, max_concurrency=64)
  await engine.wait_until_ready()
  result = await engine.generate(prompt_ids, SamplingParams(temperature=1.0))
  await engine.update_weights_from_disk("/ckpt/step_10_hf", weight_version="10")

- `/generate` with `input_ids` (never text, so nothing is re-tokenized), `return_logprob` and
  `logprob_start_len=-1` (output tokens only); the request id `rid` is ours, so `abort(rid)`
  reaches the server that runs it.
- Token ids are checked against `vocab_size` before sending: an out-of-range id crashes the
  server instead of failing the request.
- Concurrency is bounded by a semaphore per event loop (each loop also gets its own httpx
  client); each request goes to the least-loaded server URL (in-flight count; round-robin
  among ties), skipping URLs that refused a connection recently.
- Requests are retried under the project's one HTTP policy (carr_common.http_retry) with
  `max_retries`, `backoff_base` and `backoff_max` as its retries, base delay and max delay:
  transport errors, timeouts and 408, 425, 429, 500, 502, 503, 504 are retried (on any URL
  when none is pinned) after a full-jitter exponential backoff or the server's Retry-After;
  other statuses are not.  Every retried call is safe to repeat: a retried /generate gets a
  fresh rid, and loading the same weights or aborting twice changes nothing.  /health and
  /flush_cache are single attempts (the `once` policy): wait_until_ready polls /health on its
  own, and a flush already waits up to `idle_timeout` for the server.  A /generate that
  exhausts the policy comes back with finish_reason "failed" and the last error; it never
  raises.
- Error text (a failed result's `error`, SGLangError, WeightUpdateError) passes through
  `carr_common.redaction.redact`: no API key, Authorization value or URL password reaches a
  trajectory record or a log, even when a server or gateway echoes one.
- `update_weights_from_disk` holds back new /generate requests, waits for the ones in flight
  to finish (each ends on the weights it started with, so its reported weight_version is
  exact: a multi-turn episode records one version per turn), loads new weights on every
  server, flushes the KV cache the old weights produced, then confirms through `/model_info`
  that each reports the new weight_version; then the held requests go.  The flush is its own
  call, `/flush_cache?timeout=idle_timeout`, which waits for the server to go idle (under
  overlapped rollouts it is idle only because requests are held): SGLang's in-update flush
  (`flush_cache: true`) is refused when the scheduler has not yet retired the batch of the
  last answered /generate, so a sync right after a rollout failed with a 400 on a loaded
  machine (6 of 30 back-to-back updates on 2 busy cores, sglang 0.5.23).

Log-probs and temperature (checked against HF in tests/rollout/engines/test_sglang_server.py,
`test_logprobs_are_after_temperature`): sglang 0.5.23 returns log softmax(logits / T) of the
sampled token, i.e. AFTER temperature scaling and BEFORE top-p/top-k truncation (no
renormalization over the kept tokens); greedy requests (T = 0) return log_softmax(logits).
The trainer must therefore recompute log-probs from logits / T with the rollout temperature.
Against HF fp32 the returned values agree to 5e-6 (greedy, T = 1) and 3e-5 (T = 0.5: sampled
requests take log(softmax), which is less exact than log_softmax for unlikely tokens).
(Setting SGLANG_RETURN_ORIGINAL_LOGPROB=1 in the server's environment would switch SGLang to
pre-temperature log-probs; carr_jax does not set it.)
"""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
import uuid
from collections.abc import Sequence
from typing import Any

import httpx

from carr_common.http_retry import (AttemptFailed, GaveUp, LoopPool, RetryPolicy, status_failure,
                                    with_retries)
from carr_common.in_flight import InFlight
from carr_common.redaction import redact
from rollout import routes
from rollout.engines.base import (QWEN3_VOCAB_SIZE, Engine, GenerationResult, SamplingParams,
                                  validate_routes_from, validate_token_ids)


_POLL_S = 0.01  # s between looks at a held or draining engine


class SGLangError(RuntimeError):
  """A request that could not be served (after retries, or refused with a 4xx). The message
  is redacted (carr_common.redaction): a server or gateway may echo credentials."""

  def __init__(self, message: str, attempts: int):
    super().__init__(redact(message))
    self.attempts = attempts


class WeightUpdateError(RuntimeError):
  """A server did not take the new weights or does not report the new weight_version (the
  message redacted, as SGLangError's)."""

  def __init__(self, message: str):
    super().__init__(redact(message))


def sampling_payload(params: SamplingParams) -> dict:
  # Only keys SGLang knows: an unknown sampling_params key is a 400.
  return {"temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k,
          "max_new_tokens": params.max_new_tokens,
          "stop_token_ids": list(params.stop_token_ids),
          "skip_special_tokens": False, "no_stop_trim": True}


def parse_generate_response(body: dict, rid: str, attempts: int,
                            route_shape: tuple[int, int, int] | None = None
                            ) -> GenerationResult:
  """One /generate answer -> GenerationResult; inconsistent answers become "failed". With
  `route_shape` (MoE layers, k, experts), `meta_info.routed_experts` is decoded and stored
  compactly (rollout/routes.py; an id outside [0, experts) raises ValueError)."""
  meta = body["meta_info"]
  output_ids = list(body["output_ids"])
  entries = meta.get("output_token_logprobs") or []
  logprobs = [float(e[0]) for e in entries]
  finish = meta.get("finish_reason") or {}
  reason = finish.get("type", "failed")
  error = redact(str(finish.get("message"))) if reason == "abort" else None
  if [int(e[1]) for e in entries] != output_ids:
    reason, error = "failed", (f"log-prob token ids {[e[1] for e in entries][:8]}... differ "
                               f"from output_ids {output_ids[:8]}...")
  routed = None
  if route_shape is not None and reason in ("stop", "length"):
    if not isinstance(meta.get("routed_experts"), str):
      reason, error = "failed", ("no routed_experts in the answer: launch SGLang with "
                                 "--enable-return-routed-experts")
    else:
      layers, k, experts = route_shape
      routed = routes.compact(routes.decode_sglang(meta["routed_experts"], layers, k), experts)
  return GenerationResult(
      output_ids=output_ids, logprobs=logprobs, finish_reason=reason,
      weight_version=str(meta.get("weight_version", "")),
      prompt_tokens=int(meta.get("prompt_tokens", 0)), rid=rid, error=error,
      attempts=attempts, routed_experts=routed)


class SGLangEngine(Engine):
  """Client of one or more SGLang servers (see the module docstring)."""

  def __init__(self, urls: str | Sequence[str], *, vocab_size: int = QWEN3_VOCAB_SIZE,
               max_concurrency: int = 32, max_retries: int = 6, backoff_base: float = 0.5,
               backoff_max: float = 10.0, request_timeout: float = 600.0,
               connect_timeout: float = 5.0, down_cooldown: float = 2.0,
               idle_timeout: float = 120.0, route_shape: tuple[int, int, int] | None = None):
    self.route_shape = route_shape  # (MoE layers, k, experts): `generate` takes routes_from=
    self.record_routes = route_shape is not None
    self.urls = [u.rstrip("/") for u in ([urls] if isinstance(urls, str) else urls)]
    if not self.urls:
      raise ValueError("urls: need at least one server URL")
    self.vocab_size = vocab_size
    self.max_concurrency = max_concurrency
    self.policy = RetryPolicy(retries=max_retries, base_delay=backoff_base,
                              max_delay=backoff_max)
    self.once = dataclasses.replace(self.policy, retries=0)  # probes and the cache flush
    self.down_cooldown = down_cooldown
    self.idle_timeout = idle_timeout  # s a server may take to finish requests before a flush
    self._timeout = httpx.Timeout(request_timeout, connect=connect_timeout)
    self._pool = LoopPool(self._new_loop_state, _close_loop_state)
    self._inflight = {u: 0 for u in self.urls}
    self._down_until = {u: 0.0 for u in self.urls}
    self._tiebreak = itertools.count()
    self._rid_url: dict[str, tuple[str, str]] = {}  # our rid -> (url, rid sent to it)
    self._weight_version = ""
    self._generating = InFlight()  # /generate calls sent and not answered
    self._held = False  # a weight update holds new /generate calls back

  # ------------------------------------------------------------------ transport

  def _pick_url(self) -> str:
    """Least in-flight among servers not recently refused; round-robin among ties."""
    now = time.monotonic()
    up = [u for u in self.urls if self._down_until[u] <= now] or self.urls
    least = min(self._inflight[u] for u in up)
    ties = [u for u in up if self._inflight[u] == least]
    return ties[next(self._tiebreak) % len(ties)]

  def _new_loop_state(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
    limits = httpx.Limits(max_connections=self.max_concurrency + 4 * len(self.urls))
    return (httpx.AsyncClient(timeout=self._timeout, limits=limits),
            asyncio.Semaphore(self.max_concurrency))

  async def _send(self, method: str, path: str, payload: dict | None = None, *,
                  url: str | None = None, rid: str | None = None,
                  policy: RetryPolicy | None = None,
                  **kwargs: Any) -> tuple[httpx.Response, int]:
    """A response below 400 and the attempts it took, under `policy` (default: self.policy),
    on `url` or else the least-loaded server of each attempt; raises SGLangError."""
    client = self._pool.get()[0]

    async def attempt(number: int) -> tuple[httpx.Response, int]:
      target = url or self._pick_url()
      if rid is not None:
        # A retry gets a fresh server-side id: if only the connection broke, the first try
        # may still be running there, and SGLang rejects a duplicate rid with a 400.
        payload["rid"] = rid if number == 1 else f"{rid}.retry{number - 1}"
        self._rid_url[rid] = (target, payload["rid"])
      self._inflight[target] += 1
      try:
        resp = await client.request(method, target + path, json=payload, **kwargs)
      except httpx.TransportError as e:
        self._down_until[target] = time.monotonic() + self.down_cooldown
        raise AttemptFailed(f"{target}{path}: {type(e).__name__}: {e}") from None
      finally:
        self._inflight[target] -= 1
      if resp.status_code >= 400:
        raise status_failure(resp, f"{target}{path}: HTTP {resp.status_code}: "
                                   f"{resp.text[:500]}")
      return resp, number

    try:
      return await with_retries(policy or self.policy, attempt)
    except GaveUp as e:
      if e.exhausted:
        raise SGLangError(f"gave up after {e.attempts} attempts: {e.problem}",
                          e.attempts) from None
      raise SGLangError(e.problem, e.attempts) from None

  async def _call(self, method: str, path: str, payload: dict | None = None,
                  **kwargs: Any) -> tuple[Any, int]:
    """`_send`, and the answer's JSON body (None if empty) with the attempts it took."""
    resp, attempts = await self._send(method, path, payload, **kwargs)
    try:
      return (resp.json() if resp.content else None), attempts
    except ValueError:
      raise SGLangError(f"{resp.request.url}: answer is not JSON: {resp.text[:200]!r}",
                        attempts) from None

  # ------------------------------------------------------------------ generation

  async def generate(self, prompt_ids: Sequence[int], params: SamplingParams,
                     rid: str | None = None, routes_from: int | None = None
                     ) -> GenerationResult:
    validate_token_ids(prompt_ids, self.vocab_size)
    validate_routes_from(routes_from, len(prompt_ids), self.record_routes, "route_shape")
    rid = rid or uuid.uuid4().hex
    payload = {"input_ids": list(prompt_ids), "sampling_params": sampling_payload(params),
               "return_logprob": True, "logprob_start_len": -1, "rid": rid, "stream": False}
    if routes_from is not None:  # the server answers positions [routes_from, seqlen - 1)
      payload.update(return_routed_experts=True, routed_experts_start_len=routes_from)

    def failed(error: str, attempts: int) -> GenerationResult:
      return GenerationResult(output_ids=[], logprobs=[], finish_reason="failed",
                              weight_version="", prompt_tokens=len(prompt_ids), rid=rid,
                              error=error, attempts=attempts)

    while self._held:  # polled: an engine may serve several event loops
      await asyncio.sleep(_POLL_S)
    async with self._pool.get()[1]:
      try:
        with self._generating:
          body, attempts = await self._call("POST", "/generate", payload, rid=rid)
      except SGLangError as e:
        return failed(str(e), e.attempts)
      finally:
        self._rid_url.pop(rid, None)
    try:
      return parse_generate_response(body, rid, attempts,
                                     self.route_shape if routes_from is not None else None)
    except (KeyError, TypeError, ValueError, IndexError) as e:
      return failed(redact(f"malformed /generate answer ({type(e).__name__}: {e}): "
                           f"{str(body)[:200]}"), attempts)

  async def abort(self, rid: str) -> None:
    """Aborts request `rid` where it runs now (every server if it is not in flight)."""
    url, server_rid = self._rid_url.get(rid, (None, rid))
    for target in [url] if url else self.urls:
      await self._call("POST", "/abort_request", {"rid": server_rid}, url=target)

  async def abort_all(self) -> None:
    await asyncio.gather(*(self._call("POST", "/abort_request", {"abort_all": True}, url=u)
                           for u in self.urls))

  # ------------------------------------------------------------------ server state

  async def health(self, url: str) -> bool:
    try:
      await self._send("GET", "/health", url=url, policy=self.once, timeout=5.0)
    except SGLangError:
      return False
    return True

  async def wait_until_ready(self, timeout: float = 300.0, poll: float = 0.5) -> None:
    """Waits until every server's /health is OK, then reads the served weight_version."""
    deadline = time.monotonic() + timeout
    pending = list(self.urls)
    while pending:
      ok = await asyncio.gather(*(self.health(u) for u in pending))
      pending = [u for u, good in zip(pending, ok) if not good]
      if pending and time.monotonic() > deadline:
        raise TimeoutError(f"SGLang servers not healthy after {timeout} s: {pending}")
      if pending:
        await asyncio.sleep(poll)
    versions = {u: await self.served_weight_version(u) for u in self.urls}
    self._weight_version = versions[self.urls[0]]

  async def served_weight_version(self, url: str) -> str:
    info, _ = await self._call("GET", "/model_info", url=url)
    return str(info["weight_version"])

  @property
  def weight_version(self) -> str:
    return self._weight_version

  @property
  def inflight(self) -> int:
    """HTTP requests sent and not yet answered, over all servers."""
    return sum(self._inflight.values())

  async def update_weights_from_disk(self, model_path: str, weight_version: str) -> None:
    """Every server loads `model_path` (HF dir), drops its old KV cache and must then report
    `weight_version`."""

    async def one(url: str) -> None:
      try:
        body, _ = await self._call(
            "POST", "/update_weights_from_disk",
            {"model_path": model_path, "weight_version": weight_version, "flush_cache": False},
            url=url)
      except SGLangError as e:  # SGLang answers a failed load with a 4xx
        body = {"success": False, "message": str(e)}
      if not body.get("success"):
        raise WeightUpdateError(f"{url}: update_weights_from_disk({model_path}) failed: "
                                f"{body.get('message')}")
      await self.flush_cache(url)
      served = await self.served_weight_version(url)
      if served != weight_version:
        raise WeightUpdateError(f"{url}: serves weight_version {served!r} after the update, "
                                f"expected {weight_version!r}")

    self._held = True
    try:
      while self._generating.now:
        await asyncio.sleep(_POLL_S)
      await asyncio.gather(*(one(u) for u in self.urls))
      self._weight_version = weight_version
    finally:
      self._held = False

  async def flush_cache(self, url: str) -> None:
    """Drops the server's KV/prefix cache once it is idle (waits up to `idle_timeout` s)."""
    try:
      await self._send("POST", "/flush_cache", url=url, policy=self.once,
                       params={"timeout": self.idle_timeout}, timeout=self.idle_timeout + 30.0)
    except SGLangError as e:
      raise WeightUpdateError(f"{url}: new weights loaded but the old KV cache was not flushed "
                              f"(server busy for {self.idle_timeout} s, or unreachable): "
                              f"{e}") from None

  async def close(self) -> None:
    """Closes the running event loop's HTTP client."""
    await self._pool.aclose()


async def _close_loop_state(state: tuple[httpx.AsyncClient, asyncio.Semaphore]) -> None:
  await state[0].aclose()
