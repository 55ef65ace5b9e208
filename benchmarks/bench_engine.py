"""In-process JAX engine vs transformers `generate` (torch fp32, CPU): greedy tokens/s.

  .venv/bin/python benchmarks/bench_engine.py [--preset bench_50m] [--batch 8] \
      [--prompt-len 32] [--new-tokens 64] [--rounds 5] [--single-thread]

Both sides load one random checkpoint of the preset's sizes (written once by `hf_io.save_hf`,
norm scales randomised) and generate greedily, without stop tokens, exactly --new-tokens
tokens for the same --batch prompts of --prompt-len random ids. Sides:
  hf         transformers `generate` (KV cache), the named peer;
  jax        `JaxEngine.generate_many` (on-device decode loop), what we ship;
  jax_steps  the design alternative: a Python loop over jitted prefill / decode step /
             sampler that reads the tokens back every step (as a loop that stops rows must).
Each side is its own process (own thread pool) that warms up (JAX compiles) and then times
one round whenever the parent asks; the parent interleaves the sides round by round, so load
from other jobs on this shared machine hits all of them alike, and reports each side's
median and best round. Prints tokens/s, the ratios, and the fraction of greedy tokens on which
JAX and HF agree (a cross-check, not a speed figure). Not a test.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))


def prompts_for(args, vocab_size: int) -> np.ndarray:
  return np.random.default_rng(0).integers(0, vocab_size, (args.batch, args.prompt_len))


def side_jax(args):
  from carr_jax.model import hf_io
  from rollout.engines.base import SamplingParams
  from carr_jax.model.engine import JaxEngine
  cfg, params = hf_io.load_hf(args.model_dir)
  engine = JaxEngine(params, cfg, max_batch=args.batch)
  sampling = SamplingParams(temperature=0.0, max_new_tokens=args.new_tokens, stop_token_ids=())
  prompts = prompts_for(args, cfg.vocab_size).tolist()
  loop = asyncio.new_event_loop()

  def one_round():
    results = loop.run_until_complete(engine.generate_many(prompts, sampling))
    assert engine.batch_sizes[-1] == args.batch, engine.batch_sizes
    return [r.output_ids for r in results]
  one_round.close = lambda: loop.run_until_complete(engine.close())
  return one_round


def side_jax_steps(args):
  import jax
  import jax.numpy as jnp
  from carr_jax.model import decode
  from carr_jax.model import hf_io
  cfg, params = hf_io.load_hf(args.model_dir)
  b = args.batch
  prompts = jnp.asarray(prompts_for(args, cfg.vocab_size), jnp.int32)
  lengths = jnp.full((b,), args.prompt_len, jnp.int32)
  prefill = jax.jit(decode.prefill, static_argnums=1)
  step = jax.jit(decode.decode_step, static_argnums=1, donate_argnums=3)
  sample = jax.jit(decode.sample_tokens)  # same sampler and log-probs as the engine
  keys = jax.vmap(jax.random.key)(jnp.arange(b))
  greedy = (jnp.zeros((b,)), jnp.ones((b,)), jnp.full((b,), -1, jnp.int32))
  stop_ids = np.array([-1])

  def one_round():
    cache = decode.init_cache(cfg, b, args.prompt_len + args.new_tokens)
    logits, cache = prefill(params, cfg, prompts, lengths, cache)
    out = []
    for _ in range(args.new_tokens):
      token, _ = sample(logits, keys, *greedy)
      out.append(np.asarray(token))  # the per-step host read
      assert not np.isin(out[-1], stop_ids).any()
      logits, cache = step(params, cfg, token, cache)
    return np.stack(out, axis=1).tolist()
  return one_round


def side_hf(args):
  import torch
  import transformers
  torch.set_num_threads(args.torch_threads)
  model = transformers.AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32)
  model.eval()
  ids = torch.tensor(prompts_for(args, model.config.vocab_size))
  kwargs = dict(attention_mask=torch.ones_like(ids), max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens, do_sample=False, eos_token_id=None,
                pad_token_id=0, use_cache=True)

  def one_round():
    with torch.inference_mode():
      return model.generate(ids, **kwargs)[:, ids.shape[1]:].tolist()
  return one_round


SIDES = {"hf": side_hf, "jax": side_jax, "jax_steps": side_jax_steps}


def serve_side(args) -> None:
  """Child: warm up, then time one round per "round" line on stdin; "tokens" dumps outputs."""
  one_round = SIDES[args.side](args)
  tokens = one_round()
  print("ready", flush=True)
  for line in sys.stdin:
    if line.strip() == "round":
      start = time.perf_counter()
      tokens = one_round()
      print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)
    else:
      print(json.dumps({"tokens": tokens}), flush=True)
      break
  getattr(one_round, "close", lambda: None)()


def write_checkpoint(preset: str, out_dir: str) -> None:
  import jax
  import jax.numpy as jnp
  from carr_jax.model import hf_io
  from carr_jax.model import qwen3 as model_lib
  from carr_jax.model.config import get_preset
  cfg = get_preset(preset)
  params = jax.jit(model_lib.init_params, static_argnums=0)(cfg, jax.random.key(0))
  rng = np.random.default_rng(1)
  for group in ("input_norm", "post_attn_norm"):
    leaf = params["layers"][group]["scale"]
    params["layers"][group]["scale"] = leaf + 0.3 * jnp.asarray(rng.standard_normal(leaf.shape))
  hf_io.save_hf(params, cfg, out_dir)


def run_interleaved(argv: list[str], rounds: int, env: dict) -> dict[str, dict]:
  procs = {side: subprocess.Popen(
      [sys.executable, __file__, "--side", side] + argv, stdin=subprocess.PIPE,
      stdout=subprocess.PIPE, text=True, env=env) for side in SIDES}
  try:
    for side, proc in procs.items():  # warm-ups overlap; they are not timed
      if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"side {side} failed to start (see its stderr above)")
    seconds = {side: [] for side in SIDES}
    for _ in range(rounds):
      for side, proc in procs.items():
        time.sleep(0.5)  # let the previous side's worker threads go idle
        proc.stdin.write("round\n")
        proc.stdin.flush()
        seconds[side].append(json.loads(proc.stdout.readline())["seconds"])
    results = {}
    for side, proc in procs.items():
      proc.stdin.write("tokens\n")
      proc.stdin.flush()
      results[side] = {"seconds": seconds[side], **json.loads(proc.stdout.readline())}
    return results
  finally:
    for proc in procs.values():
      proc.stdin.close()
      proc.wait(timeout=60)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--preset", default="bench_50m")
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--prompt-len", type=int, default=32)
  parser.add_argument("--new-tokens", type=int, default=64)
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--torch-threads", type=int, default=2, help="this machine has 2 cores")
  parser.add_argument("--single-thread", action="store_true",
                      help="one thread per side (torch; XLA without its Eigen pool)")
  parser.add_argument("--side", choices=list(SIDES))
  parser.add_argument("--model-dir")
  args = parser.parse_args()
  if args.side:
    serve_side(args)
    return
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  if args.single_thread:
    args.torch_threads = 1
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                        "intra_op_parallelism_threads=1").strip()
  with tempfile.TemporaryDirectory() as tmp:
    model_dir = str(pathlib.Path(tmp) / "model")
    write_checkpoint(args.preset, model_dir)
    argv = sys.argv[1:] + ["--model-dir", model_dir, "--torch-threads", str(args.torch_threads)]
    results = run_interleaved(argv, args.rounds, env)

  tokens = args.batch * args.new_tokens
  median = {s: tokens / float(np.median(r["seconds"])) for s, r in results.items()}
  best = {s: tokens / min(r["seconds"]) for s, r in results.items()}
  print(f"preset {args.preset}, batch {args.batch}, prompt {args.prompt_len}, new tokens "
        f"{args.new_tokens}, {args.rounds} interleaved rounds, torch threads "
        f"{args.torch_threads}, tokens/s median (best)")
  names = {"hf": "transformers generate (peer)", "jax": "JaxEngine (ours)",
           "jax_steps": "Python loop over jitted steps"}
  for side, name in names.items():
    print(f"  {name:32s} {median[side]:9.1f} ({best[side]:.1f})")
  print(f"ratio JaxEngine / transformers: {median['jax'] / median['hf']:.2f}x median, "
        f"{best['jax'] / best['hf']:.2f}x best")
  print(f"ratio on-device loop / Python loop: {median['jax'] / median['jax_steps']:.2f}x median, "
        f"{best['jax'] / best['jax_steps']:.2f}x best")
  ours, peer = np.array(results["jax"]["tokens"]), np.array(results["hf"]["tokens"])
  print(f"greedy tokens identical JAX vs HF: {np.mean(ours == peer):.3f} "
        f"(rows fully identical: {int(np.all(ours == peer, axis=1).sum())}/{args.batch})")


if __name__ == "__main__":
  main()
