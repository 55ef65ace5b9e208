"""Start and stop a real SGLang server (CPU engine) as a subprocess of the SGLang virtualenv.

The server runs from the separate venv built by scripts/setup_sglang_cpu.sh (default
<repo>/.venv-sglang, or $SGLANG_VENV), bound to 127.0.0.1, with the flags SGLang's CPU
engine needs (`server_command`).  `launch()` returns once `/health` answers 200, or raises with
the tail of the server log.  The server and its scheduler/detokenizer children share a new
process group, so `stop()` ends exactly them.

  server = launch("HF_MODEL_DIR", port=30000)
  ... server.url ...
  server.stop()

Measured on this 2-core machine while other jobs loaded it (tiny fp32 Qwen3, 64 new tokens):
- torch/OpenMP threads: the server runs with OMP_NUM_THREADS=1 unless told otherwise
  (`threads=`, or OMP_NUM_THREADS in the caller's environment).  With the default team of 2
  threads, contention made decoding crawl: 14 tok/s single stream and 25 tok/s for 8 streams,
  against 200 and 530 tok/s with one thread.  Raise it on a dedicated host with a larger model.
- `--sleep-on-idle` is not passed: it stops an idle server from busy-polling about half a
  core, but halved 8-stream throughput (530 -> 250 tok/s).  Add it through `extra_args` for a
  server that mostly idles.

CLI: scripts/launch_sglang.py.  Only the stdlib is used, so any interpreter can launch it.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[2]


def default_venv() -> pathlib.Path:
  return pathlib.Path(os.environ.get("SGLANG_VENV") or REPO / ".venv-sglang")


def venv_python(venv: pathlib.Path | None = None) -> pathlib.Path:
  return pathlib.Path(venv or default_venv()) / "bin" / "python"


def free_port(host: str = "127.0.0.1") -> int:
  with socket.socket() as s:
    s.bind((host, 0))
    return s.getsockname()[1]


def server_command(model_path: str, port: int, *, host: str = "127.0.0.1",
                   context_length: int = 512, max_total_tokens: int = 4096,
                   max_running_requests: int = 8, chunked_prefill_size: int = 256,
                   weight_version: str = "default", random_seed: int = 0, dtype: str = "auto",
                   record_routes: bool = False, extra_args: tuple[str, ...] = (),
                   python: str | None = None) -> list[str]:
  """The sglang.launch_server command line for the CPU engine: torch-native attention, PyTorch
  sampling, no overlap schedule, no warm-up; `record_routes` (MoE routing replay) lets requests
  ask for their routed experts."""
  return [
      str(python or venv_python()), "-m", "sglang.launch_server",
      "--model-path", str(model_path), "--host", host, "--port", str(port),
      "--device", "cpu", "--tp-size", "1",
      "--attention-backend", "torch_native", "--sampling-backend", "pytorch",
      "--disable-overlap-schedule", "--skip-server-warmup",
      "--max-total-tokens", str(max_total_tokens),
      "--max-running-requests", str(max_running_requests),
      "--context-length", str(context_length),
      "--chunked-prefill-size", str(chunked_prefill_size),
      "--max-prefill-tokens", str(chunked_prefill_size),
      "--weight-version", weight_version, "--random-seed", str(random_seed),
      "--dtype", dtype,  # "auto" runs fp32 checkpoints in fp16 on CPU; tests ask for float32
      *(("--enable-return-routed-experts",) if record_routes else ()),
      *extra_args,
  ]


def health_ok(url: str, timeout: float = 2.0) -> bool:
  try:
    with urllib.request.urlopen(f"{url}/health", timeout=timeout) as resp:
      return resp.status == 200
  except (urllib.error.URLError, OSError):
    return False


@dataclasses.dataclass
class SGLangServer:
  """A running server process; `url` is http://host:port."""
  process: subprocess.Popen
  url: str
  log_path: pathlib.Path
  command: list[str]

  def log_tail(self, chars: int = 4000) -> str:
    try:
      return self.log_path.read_text(errors="replace")[-chars:]
    except OSError:
      return ""

  def alive(self) -> bool:
    return self.process.poll() is None

  def stop(self, timeout: float = 30.0) -> None:
    """Graceful: SIGTERM to the server (it drains and ends its children), SIGKILL after
    `timeout` s; then SIGKILL to whatever of its process group is left."""
    if self.process.poll() is None:
      self.process.terminate()
      try:
        self.process.wait(timeout=timeout)
      except subprocess.TimeoutExpired:
        pass
    self.kill()

  def kill(self) -> None:
    """Immediate: SIGKILL to the whole process group (start_new_session made pgid == pid)."""
    try:
      os.killpg(self.process.pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
    self.process.wait()


def launch(model_path: str, port: int | None = None, *, host: str = "127.0.0.1",
           venv: pathlib.Path | None = None, timeout: float = 240.0,
           log_path: pathlib.Path | None = None, threads: int | None = None,
           **flags) -> SGLangServer:
  """Starts the server and waits until /health is OK; raises RuntimeError otherwise.

  `flags` go to `server_command`; `threads` sets the server's OMP_NUM_THREADS (default: the
  caller's OMP_NUM_THREADS, else 1; see the module docstring).
  """
  python = venv_python(venv)
  if not python.exists():
    raise FileNotFoundError(
        f"no SGLang venv at {python.parent.parent}: run scripts/setup_sglang_cpu.sh")
  port = port or free_port(host)
  cmd = server_command(model_path, port, host=host, python=str(python), **flags)
  if log_path is None:
    log_path = pathlib.Path(tempfile.mkstemp(prefix=f"sglang_{port}_", suffix=".log")[1])
  env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", TOKENIZERS_PARALLELISM="false")
  env["OMP_NUM_THREADS"] = str(threads or os.environ.get("OMP_NUM_THREADS") or 1)
  env.pop("XLA_FLAGS", None)  # the trainer's fake-device flags mean nothing to torch
  with open(log_path, "ab") as log:
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
  server = SGLangServer(process=proc, url=f"http://{host}:{port}", log_path=log_path,
                        command=cmd)
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    if not server.alive():
      raise RuntimeError(f"SGLang server exited with {proc.returncode}:\n{server.log_tail()}")
    if health_ok(server.url):
      return server
    time.sleep(0.5)
  server.stop()
  raise RuntimeError(f"SGLang server not healthy after {timeout} s:\n{server.log_tail()}")


def main_wait(server: SGLangServer) -> None:
  """Blocks until SIGINT/SIGTERM or the server dies, then stops it (used by the CLI)."""
  stop = {"flag": False}

  def on_signal(signum, frame):
    del signum, frame
    stop["flag"] = True

  signal.signal(signal.SIGINT, on_signal)
  signal.signal(signal.SIGTERM, on_signal)
  try:
    while not stop["flag"] and server.alive():
      time.sleep(0.5)
  finally:
    server.stop()
  if not stop["flag"]:
    print(f"server exited with {server.process.returncode}", file=sys.stderr)
