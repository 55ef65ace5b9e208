"""A scripted OpenAI-compatible chat server for judge tests and the judge benchmark.

Real HTTP (FastAPI + uvicorn) on 127.0.0.1 and a free port; replies are decided by a script:
either a list consumed in order or a function of the request body, each item a `Reply` (or a
plain string = a 200 completion with that content). A Reply can carry any status (429, 500,
...), a delay, a Retry-After header, a raw malformed body or null content. All request bodies
are recorded in `server.requests`.

  with ScriptedServer(lambda body: canned_reply(body), delay=0.01) as server:
    config = JudgeConfig(base_url=server.base_url, model="scripted", api_key_env="")

`canned_reply` answers any judge prompt validly (it reads the step kind and the expected keys
that every judge prompt states). `python -m judge.testing --port P --delay 0.2` serves
canned replies from a separate process (used by benchmarks/bench_judge.py); with
`--max-delay 3` each call takes a uniform random time between the two (bench_overlap.py).
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import random
import re
import socket
import threading
import time
from typing import Any, Callable

import fastapi
import starlette.requests
import uvicorn

from judge.records import exact_answer

_FENCE = re.compile(r"<<<([A-Z]+) ([0-9a-f]{16})>>>\n(.*?)\n<<<END \1 \2>>>", re.DOTALL)
_KIND = re.compile(r"^\[judge step: (\w+)\]")
_KEYS = re.compile(r"Its keys are exactly: (.*?)\.(?:\n|$)")


@dataclasses.dataclass
class Reply:
  content: str | None = ""
  status: int = 200
  delay: float = 0.0
  raw_body: str | bytes | None = None  # sent verbatim instead of a completion (bad bodies)
  headers: dict[str, str] = dataclasses.field(default_factory=dict)
  prompt_tokens: int = 100
  completion_tokens: int = 20


Script = Callable[[dict], "Reply | str"] | list


def prompt_kind(body: dict) -> str:
  """'outcome' | 'identify' | 'support' | 'rubrics' | '' from a judge request body."""
  match = _KIND.match(body["messages"][0]["content"])
  return match.group(1) if match else ""


def prompt_keys(body: dict) -> list[str]:
  match = _KEYS.search(body["messages"][0]["content"])
  return re.findall(r'"([^"]+)"', match.group(1)) if match else []


def prompt_blocks(text: str) -> dict[str, str]:
  """Fenced untrusted blocks of a prompt: {label: content} (see judge/prompts.py)."""
  return {m.group(1): m.group(3) for m in _FENCE.finditer(text)}


def unfenced(text: str) -> str:
  """The prompt text with every fenced block replaced by `[LABEL data]`."""
  return _FENCE.sub(lambda m: f"[{m.group(1)} data]", text)


def canned_reply(body: dict) -> Reply:
  """A valid reply to any judge prompt: correct, every entity named, every rubric supported."""
  kind, keys = prompt_kind(body), prompt_keys(body)
  if kind == "outcome":
    value: Any = {"extracted_final_answer": "canned", "reasoning": "", "correct": "yes"}
  elif kind == "identify":  # E0 as the reply's Exact Answer gives it (the prompt's rule)
    answer = exact_answer(prompt_blocks(body["messages"][-1]["content"]).get("RESPONSE", ""))
    value = {k: answer if k == "E0" and answer else f"Entity {k}" for k in keys}
  elif kind == "support":
    value = {k: True for k in keys}
  elif kind == "rubrics":
    value = {"entities": {"E0": "the answer", "E1": "a clue entity"},
             "rubrics": ["<E0> is linked to <E1>.", "<E1> appears in the question."]}
  else:
    return Reply(status=400, content=None, raw_body='{"error": "not a judge prompt"}')
  return Reply(f"```json\n{json.dumps(value)}\n```")


def _completion(reply: Reply) -> fastapi.Response:
  if reply.raw_body is not None:
    return fastapi.Response(reply.raw_body, status_code=reply.status, headers=reply.headers,
                            media_type="application/json")
  body = {"id": "scripted", "object": "chat.completion", "created": 0, "model": "scripted",
          "choices": [{"index": 0, "finish_reason": "stop",
                       "message": {"role": "assistant", "content": reply.content}}],
          "usage": {"prompt_tokens": reply.prompt_tokens,
                    "completion_tokens": reply.completion_tokens,
                    "total_tokens": reply.prompt_tokens + reply.completion_tokens}}
  return fastapi.responses.JSONResponse(body, status_code=reply.status, headers=reply.headers)


class ServedApp:
  """Context manager serving an ASGI app with uvicorn in a background thread on 127.0.0.1."""

  def __init__(self, app: Any):
    self.app = app

  def __enter__(self) -> "ServedApp":
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    self.port = sock.getsockname()[1]
    self.url = f"http://127.0.0.1:{self.port}"
    config = uvicorn.Config(self.app, log_level="warning", lifespan="off", access_log=False,
                            timeout_graceful_shutdown=1)
    self._server = uvicorn.Server(config)
    self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                    daemon=True)
    self._thread.start()
    deadline = time.monotonic() + 20
    while not self._server.started:
      if time.monotonic() > deadline or not self._thread.is_alive():
        raise RuntimeError("server did not start")
      time.sleep(0.01)
    return self

  def __exit__(self, *exc: Any) -> None:
    self._server.should_exit = True
    self._thread.join(timeout=10)


class ScriptedServer(ServedApp):
  """The scripted chat-completions app, served in a background thread.

  `requests` holds every request body, `request_headers` their headers, `max_in_flight` the
  peak number of requests being answered at once (to check the client's concurrency bound).
  """

  def __init__(self, script: Script, delay: float = 0.0, max_delay: float | None = None,
               seed: int = 0):
    self.script = script
    self.delay, self.max_delay = delay, max_delay  # max_delay: uniform in [delay, max_delay]
    self._rng = random.Random(seed)
    self.requests: list[dict] = []
    self.request_headers: list[dict[str, str]] = []
    self.in_flight = self.max_in_flight = 0
    self._lock = threading.Lock()
    super().__init__(self._build_app())

  def __enter__(self) -> "ScriptedServer":
    super().__enter__()
    self.base_url = self.url + "/v1"
    return self

  def _next_reply(self, body: dict) -> Reply:
    with self._lock:
      self.requests.append(body)
      if callable(self.script):
        reply = self.script(body)
      elif self.script:
        reply = self.script.pop(0)
      else:
        reply = Reply(status=500, content=None, raw_body='{"error": "script exhausted"}')
    return Reply(reply) if isinstance(reply, str) else reply

  def _base_delay(self) -> float:
    if self.max_delay is None:
      return self.delay
    return self._rng.uniform(self.delay, self.max_delay)

  def _build_app(self) -> fastapi.FastAPI:
    app = fastapi.FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: fastapi.Request) -> fastapi.Response:
      try:
        body = await request.json()
      except starlette.requests.ClientDisconnect:  # the client timed out first
        return fastapi.Response(status_code=499)
      self.request_headers.append(dict(request.headers))
      reply = self._next_reply(body)
      self.in_flight += 1  # one event loop: no lock needed between awaits
      self.max_in_flight = max(self.max_in_flight, self.in_flight)
      try:
        await asyncio.sleep(self._base_delay() + reply.delay)
      finally:
        self.in_flight -= 1
      return _completion(reply)

    @app.get("/health")
    async def health() -> dict:
      return {"status": "ok"}

    return app


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python -m judge.testing",
                              description="Scripted OpenAI-compatible judge server (canned "
                              "valid replies).")
  p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
  p.add_argument("--port", type=int, required=True, help="port to listen on")
  p.add_argument("--delay", type=float, default=0.0, help="seconds per call (default: 0)")
  p.add_argument("--max-delay", type=float, default=None,
                 help="with it, each call takes a uniform random time in [delay, max-delay]")
  return p


def main(argv: list[str] | None = None) -> None:
  args = parser().parse_args(argv)
  if args.max_delay is not None and args.max_delay < args.delay:
    raise SystemExit(f"--max-delay {args.max_delay} is below --delay {args.delay}")
  server = ScriptedServer(canned_reply, delay=args.delay, max_delay=args.max_delay)
  uvicorn.run(server.app, host=args.host, port=args.port, log_level="warning",
              access_log=False, lifespan="off")


if __name__ == "__main__":
  main()
