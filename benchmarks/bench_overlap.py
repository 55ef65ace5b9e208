"""Overlapped rollouts and training (`rollout.max_staleness`): steps per hour at k = 0, 1, 2.

Real parts, one core each: the trainer (`python -m carr_jax.train`, lab/configs/demo_cpu.py on
the synthetic world) pinned to core 0; a real SGLang CPU server pinned to core 1 serving the
policy, which the trainer updates through HF exports each step; the judge an OpenAI-compatible
scripted server on 127.0.0.1 (judge/testing.py, canned valid replies, each call taking a
uniform random `--delay` to `--max-delay` s, 1-3 s by default), called by the trainer's LLM
judge client over HTTP.

The policy is a tiny random Qwen3 (untied, the real vocabulary) with three logits lifted
through a constant residual dimension: </think>, <tool_call> and <|im_end|>, so a turn ends
after ~20 tokens, mostly after closing its reasoning, and some turns open a tool call. Those
calls are ill-formed (random text), and with `rollout.stop_on_ill_formed=False` the episode
goes on after the error observation, so episodes run 3-4 turns and ~55% end with a reply the
judge scores (its outcome call; a reply that cites nothing needs no rubric call). Each step
samples 2 questions x 8 (`--prompts`, `--group`): at that batch the collection and the train
step take comparable time on two CPU cores, the case overlap is for (at 4 questions the
train step is ~1.5x the collection and the limit is 1.45-1.66x; benchmarks/README.md). The
learning rate is 0, so every k samples from the same policy: the step still computes and
applies its (zero) update, exports and pushes the weights with a new version, and staleness
is counted as in training. (With the demo's rate the policies of different k drift apart: in
a measured run k = 1's episodes ran 3.41 turns against k = 0's 3.78, and its train step was
12% shorter.) The episodes themselves still differ from run to run (the server's sampling is
not seeded), by up to 0.6 turns per episode over 16 steps, so `--runs N` repeats every k N
times, interleaved, and pairs the ratios by run.

Peer, measured in the same run: the k = 0 run (the paper's synchronous step) and its limit.
From its per-step phases (perf/rollout_s + perf/judge_s = collection c; perf/train_s +
perf/sync_s = trainer t), the best overlap can reach (c + t) / max(c, t) of its speed.
Steps per hour come from the wall time between the ends of step `--skip` and of the last
step (TensorBoard event times), so start-up and the compiles of the first shapes are left
out. A packed batch's shape follows its episodes, so a new one can appear later: every run
reads and fills one persistent compilation cache, first filled by an untimed k=<first> run
(`--warmup`), so that a shape's compile does not land in one run's timed steps only.

    .venv/bin/python benchmarks/bench_overlap.py [--steps 20 --skip 4 --ks 0,1,2 --runs 1]
Needs the SGLang venv (scripts/setup_sglang_cpu.sh) and two cores. Not a test.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks.common import scripted_judge  # noqa: E402
from rollout.engines import sglang_launcher  # noqa: E402
from tests.carr_jax.test_tokenizer import qwen3_tokenizer_dir  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
IM_END, TOOL_CALL, THINK_END = 151645, 151657, 151668  # Qwen3 token ids


def talking_policy(path: pathlib.Path, seed: int, lifts: dict[int, float]):
  """A random untied Qwen3 whose logits of the token ids in `lifts` are raised: residual dim 0
  holds a constant (every embedding, no layer writes it), and only those lm_head rows read it,
  with weight `lifts[id]`. Saved HF-style with the tokenizer files."""
  import shutil

  import torch
  from transformers import Qwen3Config, Qwen3ForCausalLM
  torch.manual_seed(seed)
  config = Qwen3Config(
      vocab_size=151_936, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
      tie_word_embeddings=False, rope_theta=5e6, rms_norm_eps=1e-6, bos_token_id=151643,
      eos_token_id=IM_END)
  model = Qwen3ForCausalLM(config).to(torch.float32).eval()
  with torch.no_grad():
    model.model.embed_tokens.weight[:, 0] = 1.0
    for layer in model.model.layers:
      layer.self_attn.o_proj.weight[0, :] = 0.0
      layer.mlp.down_proj.weight[0, :] = 0.0
    model.lm_head.weight[:, 0] = 0.0
    for token, weight in lifts.items():
      model.lm_head.weight[token, 0] = weight
  model.save_pretrained(path)
  for name in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(qwen3_tokenizer_dir() / name, path / name)
  return path


# An output-layer product, as both sides mostly run: 8 hidden states [8, 64] through a
# [64, 151936] fp32 unembedding (39 MB, streamed from memory each time).
_MATMULS = ("import time\nimport numpy as np\nh = np.random.rand(8, 64).astype('f4')\n"
            "w = np.random.rand(64, 151936).astype('f4')\n"
            "n, end = 0, time.perf_counter() + {s}\nwhile time.perf_counter() < end:\n"
            "  h @ w\n  n += 1\nprint(n / {s})\n")


def core_interference(seconds: float = 6.0) -> float:
  """Single-threaded output-layer products per second on core 0 while core 1 runs the same
  loop, over those alone (1.0: the cores do not slow each other; a VM's two vCPUs may share a
  physical core or its memory bandwidth)."""
  env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
         "MKL_NUM_THREADS": "1"}

  def matmuls(core: int, s: float) -> subprocess.Popen:
    return subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c",
                             _MATMULS.format(s=s)], env=env, stdout=subprocess.PIPE, text=True)
  alone = float(matmuls(0, seconds).communicate()[0])
  other = matmuls(1, seconds + 2)
  time.sleep(1.0)
  shared = float(matmuls(0, seconds).communicate()[0])
  other.communicate()
  return shared / alone


def sglang_server(model_dir: pathlib.Path, core: int, log: pathlib.Path):
  """A real SGLang CPU server whose processes all run on `core` (they inherit the affinity
  this process has while it starts them)."""
  everything = os.sched_getaffinity(0)
  os.sched_setaffinity(0, {core})
  try:
    return sglang_launcher.launch(str(model_dir), dtype="float32", context_length=2048,
                                  max_total_tokens=65536, max_running_requests=32,
                                  timeout=600.0, log_path=log)
  finally:
    os.sched_setaffinity(0, everything)


def train(k: int, workdir: pathlib.Path, args, model_dir, sglang_url, judge_base,
          compile_cache: pathlib.Path) -> None:
  """One trainer run at max_staleness k, pinned to core 0, its XLA executables kept in and
  read from `compile_cache` (JAX's persistent compilation cache, shared by every run); raises
  with its log tail."""
  overrides = [
      "--config.rollout.engine=sglang", f"--config.rollout.sglang_urls={sglang_url}",
      f"--config.model.hf_path={model_dir}", "--config.model.output_vocab=full",
      "--config.judge.backend=llm", f"--config.judge.base_url={judge_base}",
      "--config.judge.model=scripted", "--config.judge.api_key_env=",
      "--config.judge.use_cache=False",
      "--config.world.entities=60", f"--config.world.questions={2 * args.steps * args.prompts}",
      f"--config.data.prompts_per_step={args.prompts}", f"--config.data.group_size={args.group}",
      "--config.rollout.stop_on_ill_formed=False", "--config.rollout.max_turn_tokens=48",
      "--config.rollout.max_context_tokens=2048", "--config.rollout.max_tool_calls=4",
      "--config.batch.row_lengths=(2048,)", "--config.batch.loss_positions_multiple=128",
      f"--config.rollout.max_staleness={k}", "--config.loss.old_logprobs=rollout",
      "--config.loss.importance_sampling=none", "--config.optim.learning_rate=0.0",
      f"--config.train.num_steps={args.steps}", "--config.train.eval_every=0",
      f"--config.checkpoint.every={args.steps}"]
  log = workdir.with_suffix(".log")
  with open(log, "w") as f:
    proc = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-m", "carr_jax.train", "--config",
         "lab/configs/demo_cpu.py", "--workdir", str(workdir), *overrides],
        cwd=REPO, stdout=f, stderr=subprocess.STDOUT,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "TOKENIZERS_PARALLELISM": "false",
             "JAX_COMPILATION_CACHE_DIR": str(compile_cache)})
  if proc.returncode:
    raise RuntimeError(f"k={k} failed:\n{log.read_text()[-3000:]}")


def read_run(workdir: pathlib.Path, skip: int) -> dict[str, float]:
  """Seconds per step after step `skip` (event wall times) and the mean per-step metrics."""
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
  acc = EventAccumulator(str(workdir / "tb"), size_guidance={"scalars": 0})
  acc.Reload()
  ends = {e.step: e.wall_time for e in acc.Scalars("train/loss")}
  last = max(ends)
  out = {"s_per_step": (ends[last] - ends[skip]) / (last - skip)}
  for tag in {"perf/sync_s", *(tag for _, tag, _ in _SHOWN)}:
    if tag in acc.Tags()["scalars"]:
      out[tag] = statistics.mean(e.value for e in acc.Scalars(tag) if e.step > skip)
  return out


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--steps", type=int, default=20)
  p.add_argument("--skip", type=int, default=4, help="steps left out of the timing (compiles)")
  p.add_argument("--ks", default="0,1,2", help="max_staleness values; the first is the peer")
  p.add_argument("--runs", type=int, default=1,
                 help="runs per k, interleaved (k order reversed on odd runs), paired by run")
  p.add_argument("--prompts", type=int, default=2)
  p.add_argument("--group", type=int, default=8)
  p.add_argument("--delay", type=float, default=1.0, help="judge seconds per call, least")
  p.add_argument("--max-delay", type=float, default=3.0, help="judge seconds per call, most")
  p.add_argument("--lifts", default="1.32,1.12,1.17",
                 help="lm_head weights of </think>, <tool_call>, <|im_end|> on the constant")
  p.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                 help="first an untimed k=<first> run that fills the shared compile cache")
  p.add_argument("--out", default="", help="kept work dir (default: a temporary one)")
  args = p.parse_args()
  ks = [int(k) for k in args.ks.split(",")]
  if len(os.sched_getaffinity(0)) < 2:
    raise SystemExit("needs two cores: the trainer on core 0, SGLang and the judge on core 1")
  interference = core_interference()
  out = pathlib.Path(args.out or tempfile.mkdtemp(prefix="bench_overlap_"))
  out.mkdir(parents=True, exist_ok=True)
  lifts = dict(zip((THINK_END, TOOL_CALL, IM_END), map(float, args.lifts.split(","))))
  model_dir = talking_policy(out / "policy", 0, lifts)
  judge, judge_base = scripted_judge(["--delay", str(args.delay), "--max-delay",
                                      str(args.max_delay)], prefix=["taskset", "-c", "1"])
  runs: list[dict[int, dict]] = []
  try:
    server = sglang_server(model_dir, core=1, log=out / "sglang.log")
    try:
      def train_run(k: int, workdir: pathlib.Path) -> None:
        train(k, workdir, args, model_dir, server.url, judge_base, out / "compile_cache")
      if args.warmup:
        train_run(ks[0], out / "warmup")
      for r in range(args.runs):
        runs.append({})
        for k in (ks if r % 2 == 0 else ks[::-1]):
          workdir = out / (f"k{k}" if args.runs == 1 else f"run{r}_k{k}")
          train_run(k, workdir)
          runs[r][k] = read_run(workdir, args.skip)
    finally:
      server.stop()
  finally:
    judge.kill()
  print(f"core 0's output-layer products while core 1 runs the same loop: {interference:.2f}x "
        f"of its rate alone")
  for r, results in enumerate(runs):
    report(r, results, ks[0], args)
  if len(runs) > 1:
    summarize(runs, ks)


_SHOWN = (("rollout", "perf/rollout_s", ".1f"), ("judge", "perf/judge_s", ".1f"),
          ("train", "perf/train_s", ".1f"), ("trainer idle", "perf/trainer_idle_s", ".1f"),
          ("rollout idle", "perf/rollout_idle_s", ".1f"),
          ("staleness", "rollout/staleness_mean", ".2f"),
          ("partial", "rollout/partial_share", ".2f"), ("dropped", "rollout/dropped_stale", ".0f"),
          ("turns", "rollout/turns", ".2f"), ("sampled tokens", "rollout/response_tokens", ".0f"),
          ("completed", "rollout/completed_rate", ".2f"),
          ("judge calls in flight, peak", "judge/calls_in_flight_peak", ".0f"))


def collection_s(run: dict) -> float:
  """The collection's phase per step, c = rollout + judge."""
  return run["perf/rollout_s"] + run["perf/judge_s"]


def trainer_s(run: dict) -> float:
  """The trainer's phase per step, t = train + sync."""
  return run["perf/train_s"] + run["perf/sync_s"]


def limit(peer: dict) -> float:
  """(c + t) / max(c, t) from the peer's per-step phases."""
  return (collection_s(peer) + trainer_s(peer)) / max(collection_s(peer), trainer_s(peer))


def matched(peer: dict, run: dict) -> float:
  """The ratio with the workload difference taken out: the peer's step time over the peer's
  trainer phase times `run`'s step / trainer-phase factor (1.0: its step is all training).
  Two runs sample different episodes; this reads each side against its own train steps."""
  return peer["s_per_step"] / (trainer_s(peer) * run["s_per_step"] / trainer_s(run))


def report(run: int, results: dict[int, dict], peer: int, args) -> None:
  base = results[peer]
  print(f"run {run}, k={peer}, steps {args.skip + 1}-{args.steps}: collection (rollout + "
        f"judge) {collection_s(base):.2f} s, trainer (train + sync) {trainer_s(base):.2f} s; "
        f"limit of overlap (c + t) / max(c, t) = {limit(base):.2f}x")
  for k, r in sorted(results.items()):
    shown = "  ".join(f"{label} {r.get(tag, 0):{fmt}}" for label, tag, fmt in _SHOWN)
    print(f"run {run}, k={k}: {3600 / r['s_per_step']:5.0f} steps/h ({r['s_per_step']:.2f} "
          f"s/step)  {shown}")
  for k, r in sorted(results.items()):
    if k != peer:
      print(f"run {run}, ratio k={k} / k={peer}: {base['s_per_step'] / r['s_per_step']:.2f}x "
            f"(limit {limit(base):.2f}x; workload-matched {matched(base, r):.2f}x)")


def summarize(runs: list[dict[int, dict]], ks: list[int]) -> None:
  """Per k over runs: steps/h, and the ratio to the peer paired by run (mean +- s.e.)."""
  def mean_se(xs: list[float], fmt: str = ".2f") -> str:
    return f"{statistics.mean(xs):{fmt}} +- {statistics.stdev(xs) / len(xs) ** 0.5:{fmt}}"
  limits = [limit(run[ks[0]]) for run in runs]
  print(f"over {len(runs)} runs: limit {mean_se(limits)}x "
        f"({', '.join(f'{x:.2f}' for x in limits)})")
  for k in ks:
    rates = [3600 / run[k]["s_per_step"] for run in runs]
    line = f"k={k}: steps/h {mean_se(rates, '.0f')}"
    if k != ks[0]:
      ratios = [run[ks[0]]["s_per_step"] / run[k]["s_per_step"] for run in runs]
      line += f"; ratio to k={ks[0]} {mean_se(ratios)}x ({', '.join(f'{x:.2f}' for x in ratios)})"
      fair = [matched(run[ks[0]], run[k]) for run in runs]
      line += f"; workload-matched {mean_se(fair)}x ({', '.join(f'{x:.2f}' for x in fair)})"
    print(line)


if __name__ == "__main__":
  main()
