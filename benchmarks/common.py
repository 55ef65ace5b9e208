"""Shared helpers of the benchmarks: per-side subprocesses, memory readings, the HF peer model.

Each benchmark runs every side in its own fresh process (so a side's peak RSS and thread
pool are its own) with `--side NAME`, and prints one JSON line that the parent collects.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rss_mb() -> float:
  with open("/proc/self/statm") as f:
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_sides(script: str, sides: list[str], argv: list[str],
              env: dict[str, str] | None = None) -> dict[str, dict]:
  """Runs `script --side S argv...` for each side, with extra environment `env`; returns
  {side: parsed JSON result}."""
  results = {}
  for side in sides:
    out = subprocess.run([sys.executable, script, "--side", side] + argv, capture_output=True,
                         text=True, env={**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})})
    if out.returncode != 0:
      raise RuntimeError(f"side {side} failed:\n{out.stderr[-3000:]}")
    results[side] = json.loads(out.stdout.strip().splitlines()[-1])
  return results


def print_comparison(results: dict[str, dict], ours: str = "jax", peer: str = "torch") -> None:
  """One line per side (tokens/s, step time, peak step memory), then our/peer ratios."""
  for r in results.values():
    print(f"{r['impl']:<60} {r['tokens_per_s']:8.0f} tok/s  step {r['step_s']:.2f} s  "
          f"peak +{r['peak_step_mb']:.0f} MB")
  print_ratio(results, ours, peer)


def print_ratio(results: dict[str, dict], ours: str, peer: str) -> None:
  a, b = results[ours], results[peer]
  label = "carr_jax / peer" if (ours, peer) == ("jax", "torch") else f"{ours} / {peer}"
  print(f"ratio {label}: throughput {a['tokens_per_s'] / b['tokens_per_s']:.2f}x, "
        f"peak step memory {a['peak_step_mb'] / b['peak_step_mb']:.2f}x")


def run_trainer(config: str, steps: int, init_dir: str, flags: Sequence[str] = (),
                env: dict[str, str] | None = None) -> str:
  """`python -m carr_jax.train` for `steps` steps, no evaluation, one checkpoint at the end,
  from `init_dir` (a cold start's checkpoints; "" a random policy), in a fresh process and
  workdir on the CPU, with extra `--config.*` flags and environment. Returns the workdir."""
  workdir = tempfile.mkdtemp(prefix="bench_trainer_")
  cmd = [sys.executable, "-m", "carr_jax.train", "--config", config, "--workdir", workdir,
         f"--config.train.num_steps={steps}", "--config.train.eval_every=0",
         f"--config.checkpoint.every={steps}",
         f"--config.checkpoint.init_dir={os.path.abspath(init_dir) if init_dir else ''}",
         *flags]
  full_env = {**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})}
  full_env.pop("XLA_FLAGS", None)
  subprocess.run(cmd, cwd=REPO, env=full_env, check=True, capture_output=True)
  return workdir


def hf_qwen3(preset: str):
  """A transformers Qwen3 model (fp32, sdpa attention) with the sizes of our preset."""
  import torch
  import transformers
  sys.path.insert(0, REPO)
  from carr_jax.model.config import get_preset
  c = get_preset(preset)
  hf = transformers.Qwen3Config(
      vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_hidden_layers=c.num_layers,
      num_attention_heads=c.num_heads, num_key_value_heads=c.num_kv_heads, head_dim=c.head_dim,
      intermediate_size=c.intermediate_size, rope_theta=c.rope_theta,
      tie_word_embeddings=c.tie_word_embeddings, attn_implementation="sdpa")
  torch.set_num_threads(os.cpu_count())
  return transformers.AutoModelForCausalLM.from_config(hf, dtype=torch.float32), c


def scripted_judge(args: list[str], prefix: list[str] = (),
                   timeout: float = 60.0) -> tuple[subprocess.Popen, str]:
  """`python -m judge.testing ARGS` (canned valid judge replies) on a free 127.0.0.1 port, in
  its own process (after `prefix`, e.g. a taskset), once /health answers. Returns (the
  process, its OpenAI base URL); the caller ends the process."""
  import httpx

  from rollout.engines.sglang_launcher import free_port
  port = free_port()
  process = subprocess.Popen([*prefix, sys.executable, "-m", "judge.testing", "--port",
                              str(port), *args], cwd=REPO)
  url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + timeout
  while process.poll() is None and time.monotonic() < deadline:
    try:
      if httpx.get(url + "/health", timeout=2).status_code == 200:
        return process, url + "/v1"
    except httpx.TransportError:
      time.sleep(0.1)
  process.kill()
  raise RuntimeError("the scripted judge server did not start")
