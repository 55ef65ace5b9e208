"""CaRR reward server with the authors' release API: `POST /evaluate` + `GET /health`.

Where its scoring differs from the release, and why: docs/judge-vs-release.md.

  python -m judge.server --port 8888 --base-url https://api.deepseek.com \\
      --model deepseek-chat --api-key-env DEEPSEEK_API_KEY      # binds 127.0.0.1
  python -m judge.server --backend gold --port 8888              # synthetic world only

Request (the release's shape): `{history, label, task_unfinished, remote_env_info:
{search_forbidden_strs: [question], rubrics: [str], rubric_reward_ratio: float}}`; our
extension: `remote_env_info.gold` (the synthetic world's gold annotations, gold backend).
Response: `{reward, outcome_reward, rubric_reward, rubric_scores}` exactly as the release
(reward = (1 - ratio) * outcome + ratio * rubric; outcome judged only if ratio < 1, rubrics
only if ratio > 0), plus `breakdown`, our full per-trajectory record. A malformed request gets
HTTP 400 whose `detail` names the field; a judge failure is a reward of 0 with a reason, not a
500. `GET /metrics` returns the judge counters (calls, tokens, cache hit rate, errors).

Limits (JudgeConfig): a body over `max_body_bytes` gets 413, and one not received within
`body_timeout_s` 408; more than `max_rubrics` rubrics, more than `max_history_messages`
messages, more than `max_json_values` JSON values (counted before parsing) or JSON nested
deeper than `max_json_depth` get 400; each detail names the config key. Bodies are parsed
one at a time in a worker thread, so `/health` answers while big bodies are parsed. Scoring past `deadline_s`
gives reward 0 with reason "deadline: ...". The response is always valid UTF-8 (lone
surrogates become U+FFFD). A client that disconnects mid-body is logged in one line.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging

import fastapi
import uvicorn
from starlette.requests import ClientDisconnect

from judge.config import JudgeConfig, add_config_arguments, config_from_args, setup_logging
from judge.pipeline import Judge
from judge.records import JudgeInput, RequestError, clean_text, load_body, parse_request

log = logging.getLogger(__name__)


async def read_body(request: fastapi.Request, limit: int, timeout_s: float) -> bytes:
  """The request body; HTTP 413 as soon as it is known to exceed `limit` bytes, 408 when it
  is not complete within `timeout_s`."""
  too_large = fastapi.HTTPException(413, f"body: larger than {limit} bytes (max_body_bytes)")
  declared = request.headers.get("content-length", "")
  if declared.isdigit() and int(declared) > limit:
    raise too_large

  async def receive() -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
      size += len(chunk)
      if size > limit:
        raise too_large
      chunks.append(chunk)
    return b"".join(chunks)
  try:
    return await asyncio.wait_for(receive(), timeout_s)
  except TimeoutError:
    raise fastapi.HTTPException(408, f"body: not received within {timeout_s:g} s "
                                     "(body_timeout_s)") from None


def parse_body(body: bytes, config: JudgeConfig) -> JudgeInput:
  """The validated request of a body (runs in a worker thread); RequestError -> 400."""
  return parse_request(load_body(body, config.max_json_depth, config.max_json_values),
                       max_rubrics=config.max_rubrics, max_history=config.max_history_messages)


def json_response(payload: dict) -> fastapi.Response:
  """A JSON response that always encodes (a stray surrogate becomes U+FFFD, never a 500)."""
  text = clean_text(json.dumps(payload, ensure_ascii=False))
  return fastapi.Response(text.encode("utf-8"), media_type="application/json")


def create_app(judge: Judge) -> fastapi.FastAPI:
  app = fastapi.FastAPI(title="carr_jax judge")
  config = judge.config
  # One parse at a time: json.loads holds the GIL, so the loop waits for at most one of them.
  parsing = asyncio.Semaphore(1)

  @app.post("/evaluate")
  async def evaluate(request: fastapi.Request) -> fastapi.Response:
    try:
      body = await read_body(request, config.max_body_bytes, config.body_timeout_s)
    except ClientDisconnect:  # nobody to answer: one line, no traceback
      log.info("/evaluate: the client disconnected before its body was complete")
      return fastapi.Response(status_code=400)
    try:
      async with parsing:
        inp = await asyncio.to_thread(parse_body, body, config)
    except RequestError as e:
      raise fastapi.HTTPException(400, str(e)) from None
    ratio = inp.rubric_reward_ratio
    breakdown = await judge.score_input(inp, outcome=ratio < 1, rubric=ratio > 0)
    return json_response({**breakdown.release_response(ratio),
                          "breakdown": breakdown.to_dict()})

  @app.get("/health")
  async def health() -> dict:
    return {"status": "ok", "backend": judge.backend.name}

  @app.get("/metrics")
  async def metrics() -> dict:
    return judge.metrics()

  return app


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python -m judge.server",
                              description="CaRR reward server (release-compatible POST "
                              "/evaluate).")
  p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
  p.add_argument("--port", type=int, default=8888, help="port (default: 8888)")
  add_config_arguments(p)
  return p


def main(argv: list[str] | None = None) -> None:
  p = parser()
  args = p.parse_args(argv)
  setup_logging(args.verbose)
  config = config_from_args(args, p)
  if config.backend == "llm" and config.api_key_env and config.api_key() is None:
    log.warning("%s is not set: calling the judge endpoint without a key", config.api_key_env)
  judge = Judge(config)
  log.info("judge %s on %s:%d, config %s", judge.backend.name, args.host, args.port,
           config.public_dict())  # the key itself is not a config field
  uvicorn.run(create_app(judge), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
  main()
