"""A mixture of experts from a dense checkpoint: the routing replay study's policy.

    python -m lab.upcycle --dense DENSE_CKPT --out OUT_DIR [--preset demo_moe]
        [--router-std 0.001] [--expert-noise 0.01] [--seed 0]

Sparse upcycling (Komatsuzaki et al., arXiv 2212.05055): every expert of each layer starts as
that layer's dense MLP and the router as small random weights; everything else is copied.
With identical experts and `norm_topk_prob` the layer's output is the dense MLP's whatever
the routes, so the MoE starts as the trained dense policy (a test checks it). `--expert-noise`
multiplies each expert's weights by (1 + noise * N(0, 1)) so that experts differ from the start,
and a near-tied router (`--router-std` small) makes routes that a bfloat16 engine and a float32
trainer often choose differently: the case routing replay (`model.routing_replay`) exists for.
The output is a checkpoint `checkpoint.init_dir` reads (its params only).
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import jax
import jax.numpy as jnp

from carr_jax.model import qwen3
from carr_jax.model.config import Qwen3Config, get_preset
from carr_jax.runs import checkpointing as ckpt_lib


def dense_twin(moe_cfg: Qwen3Config) -> Qwen3Config:
  """The dense config whose MLP each expert copies (intermediate size = the experts')."""
  return moe_cfg.replace(num_experts=0, num_experts_per_tok=0,
                         intermediate_size=moe_cfg.moe_intermediate_size)


def _experts(w: jax.Array, num_experts: int, noise: float, rng: jax.Array) -> jax.Array:
  """w [L, A, B] -> [L, E, A, B]: E copies, each scaled by (1 + noise * N(0, 1)) entrywise."""
  tiled = jnp.repeat(w[:, None], num_experts, axis=1)
  if not noise:
    return tiled
  return tiled * (1.0 + noise * jax.random.normal(rng, tiled.shape, tiled.dtype))


def upcycle(dense: dict, moe_cfg: Qwen3Config, rng: jax.Array, router_std: float,
            expert_noise: float) -> dict:
  """Dense params -> `moe_cfg`'s params: experts from `layers.mlp`, a normal(router_std)
  router [L, D, E], every other leaf as it is."""
  if not moe_cfg.is_moe or not moe_cfg.norm_topk_prob:
    raise ValueError("upcycling keeps the dense output only for an MoE with norm_topk_prob")
  layers = dict(dense["layers"])
  mlp = layers.pop("mlp")
  if mlp["gate_proj"].shape[-1] != moe_cfg.moe_intermediate_size:
    raise ValueError(f"the dense MLP's width {mlp['gate_proj'].shape[-1]} is not the experts' "
                     f"{moe_cfg.moe_intermediate_size}")
  r_router, *r_experts = jax.random.split(rng, 4)
  num_layers, d, e = moe_cfg.num_layers, moe_cfg.hidden_size, moe_cfg.num_experts
  layers["moe"] = {
      "router": router_std * jax.random.normal(r_router, (num_layers, d, e),
                                               mlp["gate_proj"].dtype),
      **{name: _experts(mlp[name], e, expert_noise, r)
         for name, r in zip(("gate_proj", "up_proj", "down_proj"), r_experts)}}
  return {**dense, "layers": layers}


def _check_tree(params: Any, cfg: Qwen3Config) -> None:
  want = jax.tree.map(lambda x: (x.shape, x.dtype), qwen3.abstract_params(cfg))
  got = jax.tree.map(lambda x: (x.shape, x.dtype), params)
  if want != got:
    raise ValueError(f"upcycled params do not match the {cfg} layout")


def run(dense_dir: str, out_dir: str, moe_cfg: Qwen3Config, router_std: float,
        expert_noise: float, seed: int) -> None:
  """Reads the dense params of `dense_dir`, writes `moe_cfg`'s into a checkpoint at out_dir."""
  abstract = qwen3.abstract_params(dense_twin(moe_cfg))
  one_device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  dense = ckpt_lib.restore_params(dense_dir, ckpt_lib.with_shardings(
      abstract, jax.tree.map(lambda _: one_device, abstract)))
  params = upcycle(dense, moe_cfg, jax.random.key(seed), router_std, expert_noise)
  _check_tree(params, moe_cfg)
  with ckpt_lib.TrainCheckpointer(out_dir, save_every=1, keep=1, async_save=False) as ckpt:
    ckpt.save(0, {"params": params}, force=True, data={},
              meta={"upcycled_from": dense_dir, "router_std": router_std,
                    "expert_noise": expert_noise, "seed": seed})
  print(f"upcycled {dense_dir} -> {out_dir} ({moe_cfg.num_experts} experts, router std "
        f"{router_std}, expert noise {expert_noise}, seed {seed})")


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser("python -m lab.upcycle", description=__doc__.split("\n")[0])
  p.add_argument("--dense", required=True, help="the dense run's checkpoint root or step dir")
  p.add_argument("--out", required=True, help="directory of the MoE checkpoint")
  p.add_argument("--preset", default="demo_moe", help="the MoE's model preset")
  p.add_argument("--router-std", type=float, default=1e-3, help="router weights' std")
  p.add_argument("--expert-noise", type=float, default=0.0,
                 help="relative std of each expert's perturbation")
  p.add_argument("--seed", type=int, default=0)
  args = p.parse_args(argv)
  run(args.dense, args.out, get_preset(args.preset), args.router_std, args.expert_noise,
      args.seed)
  return 0


if __name__ == "__main__":
  sys.exit(main())
