"""How far the trainer's log-probs are from the rollout engine's, with and without routing replay.

A mixture of experts (`--preset`, default tiny_moe over a `--vocab` of 512; random init, seeded;
each router's expert columns pulled toward its first, w_e <- w_0 + s (w_e - w_0) with s =
`--router_spread`: below 1 the logits differ by a fraction s of their size, so near-ties, and
routes that flip between precisions, are common) samples `--sequences` continuations with the
in-process engine in bfloat16 (the precision a serving engine runs at), recording the experts it
routed each position to. The trainer then recomputes the sampled tokens' log-probs in float32
twice: with its own routing (the peer: RL without replay) and replaying the engine's routes
(`model.routing_replay`). Per side, over the sampled tokens, with d = trainer log-prob - engine
log-prob (the train step's train/rollout_gap and train/rollout_k3): mean |d|,
k3 = mean(e^d - 1 - d) (KL(engine || trainer)), the share with |d| > ln 2, and the share of
(position, layer) routes where the trainer's own top-k set differs from the engine's. Last line:
the ratio peer / replay of k3 and of mean |d|.

    .venv/bin/python benchmarks/bench_routing_replay.py [--router_spread 0.01] [--sequences 32]
"""
from __future__ import annotations

import argparse
import asyncio
import sys

import numpy as np

from common import REPO

sys.path.insert(0, REPO)


def sample(params, cfg, prompts, new_tokens: int, seed: int) -> list[dict]:
  """Trajectory records sampled by a bf16 engine that records its routes."""
  from carr_jax.model.engine import JaxEngine
  from rollout.engines.base import SamplingParams
  engine_cfg = cfg.replace(compute_dtype="bfloat16")
  sampling = SamplingParams(temperature=1.0, max_new_tokens=new_tokens, stop_token_ids=())

  async def run():
    engine = JaxEngine(params, engine_cfg, max_batch=len(prompts), seed=seed, record_routes=True,
                       max_total_len=len(prompts[0]) + new_tokens)
    try:
      return await asyncio.gather(*(engine.generate(p, sampling, rid=f"s{i}", routes_from=0)
                                    for i, p in enumerate(prompts)))
    finally:
      await engine.close()
  records = []
  for prompt, result in zip(prompts, asyncio.run(run())):
    assert result.ok, result.error
    n = len(result.output_ids)
    records.append({"token_ids": prompt + result.output_ids,
                    "loss_mask": [0] * len(prompt) + [1] * n,
                    "rollout_logprobs": [0.0] * len(prompt) + list(result.logprobs),
                    "routed_experts": np.asarray(result.routed_experts)})
  return records


def side(cfg, params, batch: dict, replay: bool) -> dict[str, float]:
  """The fp32 trainer's gap to the engine on `batch`'s sampled tokens."""
  import jax

  from carr_jax.model import qwen3 as model_lib
  from carr_jax.model import sharding
  from carr_jax.rl import train_step as ts
  mesh = sharding.make_mesh({"data": 1}, jax.devices()[:1])
  shardings = sharding.param_shardings(model_lib.abstract_params(cfg), mesh)
  step_cfg = ts.StepConfig(routing_replay=replay)
  keys = ts.logprob_batch_keys(step_cfg)
  logp = np.asarray(ts.make_logprob_fn(cfg, step_cfg, mesh, shardings)(
      params, {k: batch[k] for k in keys}))
  mask = batch["loss_mask"] > 0
  d = (logp - batch["rollout_logprobs"])[mask]
  own = model_lib.Qwen3(cfg).apply({"params": params}, batch["tokens"], batch["positions"],
                                   batch["segment_ids"], method=model_lib.Qwen3.routes)
  own = np.sort(np.moveaxis(np.asarray(own), 0, 2), axis=-1)  # [R, S, layers, k] as sets
  used = own if not replay else np.sort(batch["routes"], axis=-1)
  valid = batch["segment_ids"] > 0
  differ = (used != np.sort(batch["routes"], axis=-1)).any(axis=-1)[valid]  # [slots, layers]
  return {"gap": float(np.abs(d).mean()), "k3": float(np.mean(np.exp(d) - 1.0 - d)),
          "over_ln2": float(np.mean(np.abs(d) > np.log(2.0))), "route_mismatch": float(
              differ.mean()), "tokens": int(mask.sum())}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--preset", default="tiny_moe")
  parser.add_argument("--vocab", type=int, default=512)
  parser.add_argument("--sequences", type=int, default=32)
  parser.add_argument("--prompt_tokens", type=int, default=16)
  parser.add_argument("--new_tokens", type=int, default=48)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--router_spread", type=float, default=1.0)
  args = parser.parse_args()
  import jax

  from carr_jax.model import qwen3 as model_lib
  from carr_jax.model.config import get_preset
  from carr_jax.rl import packing
  cfg = get_preset(args.preset, vocab_size=args.vocab)
  params = model_lib.init_params(cfg, jax.random.key(args.seed))
  moe = params["layers"]["moe"]
  first = moe["router"][..., :1]  # [layers, D, 1]
  params["layers"]["moe"] = {**moe, "router": first + args.router_spread * (moe["router"] - first)}
  rng = np.random.default_rng(args.seed)
  prompts = [rng.integers(0, args.vocab, args.prompt_tokens).tolist()
             for _ in range(args.sequences)]
  records = sample(params, cfg, prompts, args.new_tokens, args.seed)
  length = args.prompt_tokens + args.new_tokens
  batch = packing.pack_trajectories(records, np.zeros(len(records)), packing.PackingConfig(
      row_lengths=(length,), routes=(cfg.num_layers, cfg.num_experts_per_tok))).arrays()
  peer, replay = side(cfg, params, batch, False), side(cfg, params, batch, True)
  print(f"{args.preset}, router spread {args.router_spread}: {len(records)} sequences, "
        f"{peer['tokens']} sampled tokens; engine bfloat16, trainer float32")
  print("| trainer | mean abs d | k3 | abs d > ln 2 | routes differing |\n|---|---|---|---|---|")
  for name, s in (("own routing (peer)", peer), ("routing replay", replay)):
    print(f"| {name} | {s['gap']:.2e} | {s['k3']:.2e} | {s['over_ln2']:.4f} | "
          f"{s['route_mismatch']:.4f} |")
  print(f"peer / replay: k3 {peer['k3'] / max(replay['k3'], 1e-30):.1f}x, mean abs d "
        f"{peer['gap'] / max(replay['gap'], 1e-30):.1f}x")


if __name__ == "__main__":
  main()
