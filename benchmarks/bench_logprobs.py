"""Chunked vs full-logit token log-probs: peak memory, time and values (forward + backward).

Peer: the plain implementation, `log_softmax(hidden @ unembed / temp)[targets]`, which holds
[T, V] fp32 logits (and their softmax and gradient) at once. Ours: `carr_jax.rl.loss.
chunked_token_logprobs`. Both are differentiated w.r.t. hidden and unembed.

Memory is measured two ways and labelled in the output:
  * XLA: `compiled.memory_analysis()` of the jitted forward + backward (temp buffers, and
    temp + arguments + outputs); compile only, so it works at sizes that would not fit here.
  * RSS: peak resident set size of a fresh child process during the FIRST execution of the
    compiled step (/proc/self/status VmHWM, reset after compilation through
    /proc/self/clear_refs), minus its RSS just before; compiler memory is excluded.
The full-logit peer needs ~14 GiB at T = 8,192 x V = 151,936 by XLA's plan, more than this
shared machine can spare, so it is executed (timed, RSS, value check) at `--run-seq` tokens
only; at `--seq` it is compiled for the XLA numbers. Timings are wall-clock of the second
execution. Keep --run-seq at least two chunks long, or both variants run the same
single-chunk computation.

Run (about 5 minutes on 2 busy CPU cores):
    .venv/bin/python benchmarks/bench_logprobs.py --seq 8192 --vocab 151936 \
        --hidden 128 --chunk 512 --run-seq 1024
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def _jax():
  import jax
  jax.config.update("jax_default_matmul_precision", "highest")
  return jax


def step_fn(variant: str, chunk: int):
  """Jitted (hidden, unembed, targets, cot) -> (logprobs, d hidden, d unembed)."""
  jax = _jax()
  import jax.numpy as jnp
  from carr_jax.rl.loss import chunked_token_logprobs

  def full(h, w, y):
    logits = jnp.einsum("btd,dv->btv", h, w, preferred_element_type=jnp.float32)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return jnp.take_along_axis(logp, y[..., None], axis=-1)[..., 0]

  def chunked(h, w, y):
    return chunked_token_logprobs(h, w, y, 1.0, chunk)[0]

  logprobs = {"full": full, "chunked": chunked}[variant]

  def fwd_bwd(h, w, y, cot):
    lp, vjp = jax.vjp(lambda h, w: logprobs(h, w, y), h, w)
    return (lp, *vjp(cot))

  return jax.jit(fwd_bwd)


def _specs(seq: int, hidden: int, vocab: int):
  jax = _jax()
  import jax.numpy as jnp
  f32 = jnp.float32
  return (jax.ShapeDtypeStruct((1, seq, hidden), f32), jax.ShapeDtypeStruct((hidden, vocab), f32),
          jax.ShapeDtypeStruct((1, seq), jnp.int32), jax.ShapeDtypeStruct((1, seq), f32))


def xla_memory(variant: str, seq: int, hidden: int, vocab: int, chunk: int) -> dict:
  """Compile only; XLA's buffer assignment of the forward + backward step."""
  m = step_fn(variant, chunk).lower(*_specs(seq, hidden, vocab)).compile().memory_analysis()
  return {"temp_bytes": m.temp_size_in_bytes,
          "total_bytes": m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes}


def _vm_kib(key: str) -> int:
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(key):
        return int(line.split()[1])
  raise RuntimeError(f"{key} not in /proc/self/status")


def run_child(variant: str, seq: int, hidden: int, vocab: int, chunk: int, out: str) -> None:
  """In a fresh process: compile, reset the RSS high-water mark, execute, report."""
  jax = _jax()
  rng = np.random.default_rng(0)
  args = [rng.normal(size=(1, seq, hidden)).astype(np.float32),
          (rng.normal(size=(hidden, vocab)) / np.sqrt(hidden)).astype(np.float32),
          rng.integers(0, vocab, size=(1, seq)).astype(np.int32),
          rng.normal(size=(1, seq)).astype(np.float32)]
  args = [jax.device_put(a) for a in args]
  compiled = step_fn(variant, chunk).lower(*args).compile()
  # The first execution measures memory: after it, freed buffers stay resident in the
  # allocator and a second run would show no growth.
  with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets VmHWM to the current RSS
  before = _vm_kib("VmRSS:")
  jax.block_until_ready(compiled(*args))
  peak = _vm_kib("VmHWM:")
  t0 = time.perf_counter()
  outs = jax.block_until_ready(compiled(*args))
  seconds = time.perf_counter() - t0
  np.savez(out, *[np.asarray(o) for o in outs])
  print(json.dumps({"seconds": seconds, "rss_delta_bytes": (peak - before) * 1024}))


def _spawn(variant, seq, a, out) -> dict:
  cmd = [sys.executable, __file__, "--child", variant, "--seq", str(seq), "--hidden",
         str(a.hidden), "--vocab", str(a.vocab), "--chunk", str(a.chunk), "--out", out]
  res = subprocess.run(cmd, check=True, capture_output=True, text=True)
  return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--seq", type=int, default=8192)
  p.add_argument("--run-seq", type=int, default=1024, help="size at which the peer executes")
  p.add_argument("--hidden", type=int, default=128)
  p.add_argument("--vocab", type=int, default=151_936)
  p.add_argument("--chunk", type=int, default=512)
  p.add_argument("--child", choices=["full", "chunked"])
  p.add_argument("--out")
  a = p.parse_args()
  if a.child:
    return run_child(a.child, a.seq, a.hidden, a.vocab, a.chunk, a.out)

  gib = lambda b: f"{b / 2**20:,.0f} MiB"
  print(f"B=1 T={a.seq} D={a.hidden} V={a.vocab} chunk={a.chunk}; forward + backward, fp32")
  mem = {v: xla_memory(v, a.seq, a.hidden, a.vocab, a.chunk) for v in ("full", "chunked")}
  for v in ("full", "chunked"):
    print(f"  XLA {v:8s} T={a.seq}: temp {gib(mem[v]['temp_bytes'])}, "
          f"temp+args+outputs {gib(mem[v]['total_bytes'])}")
  print(f"  XLA memory ratio full/chunked at T={a.seq}: temp "
        f"{mem['full']['temp_bytes'] / mem['chunked']['temp_bytes']:.1f}x, total "
        f"{mem['full']['total_bytes'] / mem['chunked']['total_bytes']:.1f}x")

  with tempfile.TemporaryDirectory() as tmp:
    runs = {}
    for v, seq in (("chunked", a.seq), ("full", a.run_seq), ("chunked", a.run_seq)):
      runs[v, seq] = _spawn(v, seq, a, os.path.join(tmp, f"{v}_{seq}.npz"))
      r = runs[v, seq]
      print(f"  run {v:8s} T={seq}: {r['seconds']:.2f} s, RSS peak delta "
            f"{gib(r['rss_delta_bytes'])}")
    full, ours = runs["full", a.run_seq], runs["chunked", a.run_seq]
    print(f"  at T={a.run_seq}: time full/chunked {full['seconds'] / ours['seconds']:.2f}x, "
          f"RSS full/chunked {full['rss_delta_bytes'] / max(ours['rss_delta_bytes'], 1):.1f}x")
    f = np.load(os.path.join(tmp, f"full_{a.run_seq}.npz"))
    c = np.load(os.path.join(tmp, f"chunked_{a.run_seq}.npz"))
    for i, name in enumerate(("logprobs", "d_hidden", "d_unembed")):
      diff = np.abs(f[f"arr_{i}"] - c[f"arr_{i}"]).max()
      print(f"  max |full - chunked| {name}: {diff:.2e} (max |full| "
            f"{np.abs(f[f'arr_{i}']).max():.2e})")


if __name__ == "__main__":
  main()
