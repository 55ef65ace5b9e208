"""One MoE layer's collectives on a TPU slice, compiled deviceless: which op XLA emits for each
collective of the layer's forward and gradient, and its bytes per chip.

The layer is `carr_jax.model.moe.MoE` of `--preset` (bf16 compute, fp32 parameters placed by
`sharding.PARAM_RULES`), on `--rows` rows of `--tokens` tokens split over the batch axes; the
program is the gradient of the sum of its output with respect to the weights and the input.
Bytes follow `carr_jax/jobs/hlo_costs.py` (an all-reduce 2 (n-1)/n b, a reduce-scatter
(n-1)/n b, an all-gather (n-1) b). Each printed op: GiB per chip, the operand's and result's
shapes per chip, n chips per group, and the ops that read its result (an all-reduce read by a
slice is a reduce-scatter XLA chose to run as an all-reduce).

    .venv-tpu/bin/python benchmarks/bench_moe_collectives.py [--topology v5p:4x4x4
        --mesh fsdp=16,expert=4 --preset qwen3_30b_a3b_thinking_2507 --impl ragged]
"""
from __future__ import annotations

import argparse
import collections
import re
import sys

from common import REPO

GIB = 2**30


def layer_hlo(args) -> tuple[str, int]:
  """The compiled gradient's HLO text and the slice's chip count."""
  import jax
  import jax.numpy as jnp
  from jax.sharding import NamedSharding, PartitionSpec as P

  from carr_jax.jobs.aot import topology_devices
  from carr_jax.model import moe, sharding
  from carr_jax.model.config import get_preset
  cfg = get_preset(args.preset, param_dtype="float32", compute_dtype="bfloat16",
                   moe_impl=args.impl)
  axes = {a: int(n) for a, n in (part.split("=") for part in args.mesh.split(","))}
  mesh = sharding.make_mesh(axes, topology_devices(args.topology))
  d, e, f = cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size
  shapes = {"router": (d, e), "gate_proj": (e, d, f), "up_proj": (e, d, f),
            "down_proj": (e, f, d)}
  params = {name: jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(
      mesh, P(*sharding.spec_for(f"layers/moe/{name}")[1:])))  # one layer: no L axis
            for name, shape in shapes.items()}
  rows = args.rows or mesh.size
  x = jax.ShapeDtypeStruct((rows, args.tokens, d), jnp.bfloat16,
                           sharding=sharding.batch_sharding(mesh, 3))
  segments = jax.ShapeDtypeStruct((rows, args.tokens), jnp.int32,
                                  sharding=sharding.batch_sharding(mesh, 2))

  def loss(params, x, segments):
    y, _, _ = moe.MoE(cfg).apply({"params": params}, x, segments)
    return jnp.sum(y.astype(jnp.float32))
  with jax.set_mesh(mesh):
    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    return grad.lower(params, x, segments).compile().as_text(), mesh.size


def _bare(shapes: str) -> str:
  """HLO shapes without their layouts: "bf16[8,128]{1,0:T(8,128)}" -> "bf16[8,128]"."""
  return re.sub(r"\{[^}]*\}", "", shapes)


def collectives(text: str, num_devices: int) -> tuple[collections.Counter, collections.Counter]:
  """({(kind, n, operands, result, readers): bytes per chip}, {same key: ops}) over the entry
  computation and what it calls (no loops in one layer's program)."""
  from carr_jax.jobs import hlo_costs
  module = hlo_costs.parse_module(text)
  found, ops = collections.Counter(), collections.Counter()

  def walk(name: str):
    comp = module.computations[name]
    for inst in comp.instructions.values():
      kind = hlo_costs.collective_kind(inst.opcode)
      if kind:
        operands = [comp.instructions[o].shape for o in inst.operands if o in comp.instructions]
        n = hlo_costs.group_size(inst.attributes, num_devices)
        readers = sorted({i.opcode for i in comp.instructions.values() if inst.name in i.operands})
        key = (kind, n, _bare(" ".join(operands)), _bare(inst.shape), ",".join(readers))
        found[key] += hlo_costs.collective_bytes(
            kind, n, sum(hlo_costs.array_bytes(s) for s in operands))
        ops[key] += 1
      for callee in hlo_costs.called(inst, "calls") or hlo_costs.called(inst, "to_apply"):
        walk(callee)
  walk(module.entry)
  return found, ops


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--topology", default="v5p:4x4x4")
  p.add_argument("--mesh", default="fsdp=16,expert=4", help="axis=size,... (sharding.AXES)")
  p.add_argument("--preset", default="qwen3_30b_a3b_thinking_2507")
  p.add_argument("--impl", default="ragged", help="Qwen3Config.moe_impl")
  p.add_argument("--rows", type=int, default=0, help="0: one per chip")
  p.add_argument("--tokens", type=int, default=512, help="tokens per row")
  args = p.parse_args(argv)
  sys.path.insert(0, REPO)
  found, ops = collectives(*layer_hlo(args))
  for key, size in sorted(found.items(), key=lambda kv: -kv[1]):
    kind, n, operands, result, readers = key
    print(f"{size / GIB:8.4f} GiB  {ops[key]} x {kind:14s} n={n:<3d} {operands} -> {result}  "
          f"read by {readers}")
  totals = collections.Counter()
  for key, size in found.items():
    totals[key[0]] += size
  print("per chip:", ", ".join(f"{k} {v / GIB:.3f} GiB" for k, v in sorted(totals.items())))
  return 0


if __name__ == "__main__":
  sys.exit(main())
