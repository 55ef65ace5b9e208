"""Test helpers for the SGLang engine: tiny random Qwen3 checkpoints, a real server fixture,
and a scripted stand-in HTTP server for the fast client tests.

tests/conftest.py defines the fixtures for every test module (a module importing them would
start its own session server). `sglang_server` gives ONE real server per test session (CPU
engine, fp32, 127.0.0.1, free port, `--sleep-on-idle`: it idles through most of the session,
and an idle server otherwise polls half a core away from the tests that run meanwhile) on the
first tiny model, restarts it if a test killed it, and stops it at the end; it skips with the
reason when the SGLang venv (scripts/setup_sglang_cpu.sh) is missing.
`ScriptedServer` is a stdlib ThreadingHTTPServer imitating /generate, /health, /model_info,
/update_weights_from_disk and /flush_cache, whose failures (5xx, dropped connections,
delays) a test scripts per request.
"""
from __future__ import annotations

import base64
import dataclasses
import http.server
import json
import pathlib
import shutil
import threading
import time

import numpy as np
import pytest

from rollout.engines import sglang_launcher
from tests.carr_jax.test_tokenizer import qwen3_tokenizer_dir


def make_tiny_qwen3(path: pathlib.Path, seed: int) -> pathlib.Path:
  """A random fp32 Qwen3 with the real vocab size and tokenizer files, saved HF-style."""
  import torch
  from transformers import Qwen3Config, Qwen3ForCausalLM
  torch.manual_seed(seed)
  config = Qwen3Config(
      vocab_size=151_936, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
      tie_word_embeddings=True, rope_theta=5e6, rms_norm_eps=1e-6,
      # A wide init gives peaked next-token distributions, so greedy paths are not ties.
      initializer_range=0.2, bos_token_id=151643, eos_token_id=151645)
  model = Qwen3ForCausalLM(config).to(torch.float32).eval()
  with torch.no_grad():  # random norm scales: a norm applied in the wrong place shows up
    for name, p in model.named_parameters():
      if "norm" in name:
        p.copy_(1.0 + 0.3 * torch.randn_like(p))
  model.save_pretrained(path)
  for name in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(qwen3_tokenizer_dir() / name, path / name)
  return path


@pytest.fixture(scope="session")
def tiny_qwen3_dirs(tmp_path_factory) -> tuple[pathlib.Path, pathlib.Path]:
  """Two different random models (A serves first, B is the weight-update target)."""
  root = tmp_path_factory.mktemp("tiny_qwen3")
  return make_tiny_qwen3(root / "a", seed=0), make_tiny_qwen3(root / "b", seed=1)


@dataclasses.dataclass
class ServerHandle:
  """The session's server; `restart()` brings it back on the same port after a kill."""
  model_path: pathlib.Path
  port: int
  server: sglang_launcher.SGLangServer | None = None

  @property
  def url(self) -> str:
    return f"http://127.0.0.1:{self.port}"

  def start(self) -> None:
    self.server = sglang_launcher.launch(str(self.model_path), self.port, dtype="float32",
                                         timeout=300.0, extra_args=("--sleep-on-idle",))

  def kill(self) -> None:
    """SIGKILL, as a crash would: no draining, in-flight requests lose their connection."""
    self.server.kill()

  def restart(self) -> None:
    if self.server is not None and self.server.alive():
      self.server.stop()
    self.start()


@pytest.fixture(scope="session")
def sglang_session_server(tiny_qwen3_dirs) -> ServerHandle:
  python = sglang_launcher.venv_python()
  if not python.exists():
    pytest.skip(f"SGLang venv missing ({python}); build it with scripts/setup_sglang_cpu.sh")
  handle = ServerHandle(model_path=tiny_qwen3_dirs[0], port=sglang_launcher.free_port())
  handle.start()
  yield handle
  if handle.server is not None:
    handle.server.stop()


@pytest.fixture
def sglang_server(sglang_session_server) -> ServerHandle:
  """The session server, restarted first if an earlier test killed it."""
  if not sglang_session_server.server.alive():
    sglang_session_server.restart()
  return sglang_session_server


# ------------------------------------------------------------------ scripted stand-in server


class ScriptedServer:
  """Imitates SGLang's /generate for client tests.

  `script` is a list of actions consumed one per /generate request, then "ok" forever:
  "ok" (answer), "500"/"503" (error status; "503;Retry-After=0" adds that header), "drop"
  (close the socket without answering),
  "400" (a client error), "not_json" / "no_meta" (malformed 200 answers), "echo_secrets"
  (a 401 whose body echoes an API key, a bearer token and the request's Authorization).  With
  accept_updates=False, /update_weights_from_disk reports success but the served
  weight_version stays.  /flush_cache answers 400 while `busy` is set, as SGLang does when
  its scheduler stays busy past the request's timeout.  `control` records every
  update/flush call as (path, body or query).  Each answer echoes the prompt's last id + 1
  as the single output token with log-prob -0.5, after `delay` seconds.  `max_active`
  records peak concurrency.  A request with `return_routed_experts` gets, as SGLang 0.5.23
  started with --enable-return-routed-experts answers, `meta_info.routed_experts`: base64 of
  int32 [positions, layers, k] (`route_shape`) for positions routed_experts_start_len ..
  seqlen - 2 (`routes_for`); the action "no_routes" leaves them out.
  """

  def __init__(self, script=(), delay: float = 0.0, weight_version: str = "v0",
               accept_updates: bool = True, route_shape: tuple[int, int] = (2, 2)):
    self.route_shape = route_shape
    self.script = list(script)
    self.accept_updates = accept_updates
    self.busy = False
    self.control: list[tuple[str, object]] = []
    self.delay = delay
    self.weight_version = weight_version
    self.requests: list[dict] = []
    self.active = self.max_active = 0
    self.lock = threading.Lock()
    outer = self

    class Handler(http.server.BaseHTTPRequestHandler):
      protocol_version = "HTTP/1.1"

      def log_message(self, *args):  # keep pytest output clean
        pass

      def _send(self, status: int, body: dict | None, headers: dict[str, str] | None = None):
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        for name, value in (headers or {}).items():
          self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

      def do_GET(self):
        if self.path == "/health":
          self._send(200, None)
        elif self.path == "/model_info":
          self._send(200, {"weight_version": outer.weight_version})
        else:
          self._send(404, {"error": "not found"})

      def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if self.path.startswith("/flush_cache"):
          self.rfile.read(length)
          outer.control.append(("/flush_cache", self.path.partition("?")[2]))
          if outer.busy:
            return self._send(400, None)
          return self._send(200, None)
        body = json.loads(self.rfile.read(length))
        if self.path == "/update_weights_from_disk":
          outer.control.append((self.path, body))
          if outer.accept_updates:  # else: claims success but keeps the old version
            outer.weight_version = body["weight_version"]
          return self._send(200, {"success": True, "message": "ok"})
        if self.path == "/abort_request":
          return self._send(200, None)
        with outer.lock:
          outer.requests.append(body)
          action = outer.script.pop(0) if outer.script else "ok"
          outer.active += 1
          outer.max_active = max(outer.max_active, outer.active)
        try:
          time.sleep(outer.delay)
          if action == "drop":
            self.close_connection = True
            self.connection.shutdown(2)
            return
          if action == "not_json":
            self.send_response(200)
            self.send_header("Content-Length", "8")
            self.end_headers()
            return self.wfile.write(b"not json")
          if action == "no_meta":
            return self._send(200, {"output_ids": [1]})
          if action == "echo_secrets":  # a gateway that echoes credentials in its errors
            return self._send(401, {"error": {"message": "Invalid key sk-echoed0123456789",
                                              "authorization": "Bearer gw-token-0123456789",
                                              "seen": self.headers.get("authorization")}})
          if action not in ("ok", "no_routes"):
            status, _, retry_after = action.partition(";Retry-After=")
            return self._send(int(status), {"error": {"message": f"scripted {status}"}},
                              {"Retry-After": retry_after} if retry_after else None)
          out = body["input_ids"][-1] + 1
          meta = {"id": body["rid"], "finish_reason": {"type": "length", "length": 1},
                  "prompt_tokens": len(body["input_ids"]), "completion_tokens": 1,
                  "weight_version": outer.weight_version,
                  "output_token_logprobs": [[-0.5, out, None]]}
          if body.get("return_routed_experts") and action != "no_routes":
            start, end = body.get("routed_experts_start_len", 0), len(body["input_ids"])
            meta["routed_experts"] = base64.b64encode(
                outer.routes_for(start, end).tobytes()).decode()
          self._send(200, {"text": "", "output_ids": [out], "meta_info": meta})
        finally:
          with outer.lock:
            outer.active -= 1

    self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.httpd.daemon_threads = True
    self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
    self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

  def routes_for(self, start: int, end: int) -> np.ndarray:
    """The experts the server reports at positions start .. end - 1: int32 [n, layers, k]."""
    layers, k = self.route_shape
    grid = np.arange(start, end)[:, None, None] * 7 + np.arange(layers)[:, None] * 3 + np.arange(k)
    return (grid % 16).astype(np.int32)

  def __enter__(self) -> "ScriptedServer":
    self.thread.start()
    return self

  def __exit__(self, *exc) -> None:
    self.httpd.shutdown()
    self.httpd.server_close()
