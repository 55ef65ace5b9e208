"""Launch a real SGLang CPU server for an HF model directory and keep it up until Ctrl-C.

  python scripts/launch_sglang.py --model-path HF_MODEL_DIR [--port 30000]
      [--context-length 512] [--max-total-tokens 4096] [--venv .venv-sglang] [--timeout 240]

Prints the server URL once /health is OK (stdout, one line), then waits; SIGINT/SIGTERM stop
the server and its children.  Needs the venv of scripts/setup_sglang_cpu.sh.  The logic lives
in rollout/engines/sglang_launcher.py, which tests and the trainer import.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from rollout.engines import sglang_launcher  # noqa: E402  (after the repo path is set)


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python scripts/launch_sglang.py",
                              description=__doc__.split("\n")[0])
  a = p.add_argument
  a("--model-path", required=True, help="HF model directory to serve")
  a("--host", default="127.0.0.1", help="bind address (default: loopback)")
  a("--port", type=int, default=None, help="port (default: a free port)")
  a("--venv", type=pathlib.Path, default=None,
    help="SGLang virtualenv (default: $SGLANG_VENV, else .venv-sglang)")
  a("--timeout", type=float, default=240.0, help="seconds to wait for /health (default: 240)")
  a("--context-length", type=int, default=512, help="server context length (default: 512)")
  a("--max-total-tokens", type=int, default=4096, help="KV cache tokens (default: 4096)")
  a("--max-running-requests", type=int, default=8,
    help="requests decoded at once (default: 8)")
  a("--chunked-prefill-size", type=int, default=256, help="prefill chunk (default: 256)")
  a("--weight-version", default="default", help="weight version the server reports")
  a("--dtype", default="auto", help="auto | float32 | bfloat16 | float16 (default: auto)")
  a("--threads", type=int, default=None,
    help="server OMP_NUM_THREADS (default: $OMP_NUM_THREADS, else 1)")
  a("--log", type=pathlib.Path, default=None, help="server log file")
  return p


def main(argv: list[str] | None = None) -> None:
  args = parser().parse_args(argv)
  server = sglang_launcher.launch(
      args.model_path, args.port, host=args.host, venv=args.venv, timeout=args.timeout,
      log_path=args.log, threads=args.threads, context_length=args.context_length,
      max_total_tokens=args.max_total_tokens, max_running_requests=args.max_running_requests,
      chunked_prefill_size=args.chunked_prefill_size, weight_version=args.weight_version,
      dtype=args.dtype)
  print(server.url, flush=True)
  print(f"log: {server.log_path}", file=sys.stderr, flush=True)
  sglang_launcher.main_wait(server)


if __name__ == "__main__":
  main()
