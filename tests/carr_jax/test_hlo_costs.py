"""Collective and HBM bytes per chip read from compiled HLO (`carr_jax.jobs.hlo_costs`):
real CPU compiles on the 8 fake devices (conftest) checked against hand arithmetic, and a
hand-written module in TPU's dialect (no trip-count annotation, VMEM layouts, async pairs)."""
import re

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from carr_jax.jobs import hlo_costs


def mesh_4x2() -> Mesh:
  return Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("a", "b"))


def test_a_sharded_matmul_all_gathers_the_column_blocks():
  """x [64, 128] split by rows over a (4 chips), w [128, 256] split by columns over a, the
  product split by rows: each chip gathers the 3 column blocks of w it lacks."""
  mesh = mesh_4x2()
  x = jax.ShapeDtypeStruct((64, 128), jnp.float32, sharding=NamedSharding(mesh, P("a", None)))
  w = jax.ShapeDtypeStruct((128, 256), jnp.float32, sharding=NamedSharding(mesh, P(None, "a")))
  matmul = jax.jit(lambda x, w: x @ w, out_shardings=NamedSharding(mesh, P("a", None)))
  compiled = matmul.lower(x, w).compile()
  costs = hlo_costs.program_costs(compiled.as_text())
  block = 128 * (256 // 4) * 4  # one chip's column block of w, f32: 32 KiB
  assert costs.ici_bytes == {"all-gather": (4 - 1) * block}
  assert costs.ici_ops == {"all-gather": 1}
  # No loop: XLA's own count of bytes accessed is right here, and ours agrees with it.
  assert costs.hbm_bytes == compiled.cost_analysis()["bytes accessed"]
  assert costs.unknown_loops == 0


def test_collectives_in_nested_loops_count_once_per_trip():
  """A psum over a (4 chips) of each chip's [16, 128] f32 block, in a 5-step scan inside a
  3-step fori_loop: 15 all-reduces of 2 (4 - 1) / 4 x 8 KiB each, with XLA's trip-count
  annotation and without it (TPU's HLO has none; the loop condition is read instead)."""
  mesh = mesh_4x2()

  def per_chip(x):  # [16, 128]
    def step(x, _):
      return x + 0.5 * jax.lax.psum(x, "a"), None
    return jax.lax.fori_loop(0, 3, lambda _, x: jax.lax.scan(step, x, None, length=5)[0], x)

  loops = jax.jit(jax.shard_map(per_chip, mesh=mesh, in_specs=P("a"), out_specs=P("a")))
  x = jax.ShapeDtypeStruct((64, 128), jnp.float32, sharding=NamedSharding(mesh, P("a", None)))
  text = loops.lower(x).compile().as_text()
  assert text.count(" while(") == 2  # still two loops after optimization
  once = 2 * (4 - 1) / 4 * 16 * 128 * 4
  for hlo in (text, re.sub(r'"known_trip_count":\{"n":"\d+"\}', "", text)):
    costs = hlo_costs.program_costs(hlo)
    assert costs.ici_ops == {"all-reduce": 3 * 5}
    assert costs.ici_bytes == {"all-reduce": 3 * 5 * once}
    assert costs.unknown_loops == 0


def test_group_size_in_each_replica_group_notation():
  mesh = "replica_groups=mesh['axis_0'=4,'axis_1'=2,'axis_2'=8] {'axis_0','axis_2'}"
  assert hlo_costs.group_size(mesh, 64) == 32
  assert hlo_costs.group_size("replica_groups=mesh['axis_0'=4,'axis_1'=2], x=1", 64) == 8
  assert hlo_costs.group_size("replica_groups=[16,4]<=[64]", 64) == 4
  assert hlo_costs.group_size("replica_groups=[8,8]<=[8,8]T(1,0)", 64) == 8
  assert hlo_costs.group_size("replica_groups={{0,2},{1,3}}", 4) == 2
  assert hlo_costs.group_size("replica_groups={}", 4) == 4


def test_collective_bytes_follow_the_ring_formulas():
  assert hlo_costs.collective_bytes("all-gather", 4, 100) == 300
  assert hlo_costs.collective_bytes("reduce-scatter", 4, 100) == 75
  assert hlo_costs.collective_bytes("all-to-all", 4, 100) == 75
  assert hlo_costs.collective_bytes("all-reduce", 4, 100) == 150
  assert hlo_costs.collective_bytes("collective-permute", 4, 100) == 100


# A 6-layer loop in TPU's dialect: the body slices layer i of stacked bf16 weights in a fusion,
# all-reduces the activations over pairs of chips into VMEM (S(1)) and writes them into row i
# of a stack in place; after the loop an async all-gather over 4 chips. No known_trip_count.
TPU_STYLE = """HloModule layers, num_partitions=4

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}

%slice_layer (p0: bf16[6,64,128], p1: s32[]) -> bf16[64,128] {
  %p0 = bf16[6,64,128]{2,1,0:T(8,128)(2,1)} parameter(0)
  %p1 = s32[]{:T(128)} parameter(1)
  %zero = s32[]{:T(128)} constant(0)
  %ds = bf16[1,64,128]{2,1,0:T(8,128)(2,1)} dynamic-slice(%p0, %p1, %zero, %zero), dynamic_slice_sizes={1,64,128}
  ROOT %b = bf16[64,128]{1,0:T(8,128)(2,1)} bitcast(%ds)
}

%store_row (p0: f32[6,32,128], p1: f32[32,128], p2: s32[]) -> f32[6,32,128] {
  %p0 = f32[6,32,128]{2,1,0:T(8,128)} parameter(0)
  %p1 = f32[32,128]{1,0:T(8,128)S(1)} parameter(1)
  %p2 = s32[]{:T(128)} parameter(2)
  %zero = s32[]{:T(128)} constant(0)
  %row = f32[1,32,128]{2,1,0:T(8,128)S(1)} bitcast(%p1)
  ROOT %dus = f32[6,32,128]{2,1,0:T(8,128)} dynamic-update-slice(%p0, %row, %p2, %zero, %zero)
}

%body (param: (s32[], f32[32,128], bf16[6,64,128], f32[6,32,128])) -> (s32[], f32[32,128], bf16[6,64,128], f32[6,32,128]) {
  %param = (s32[]{:T(128)}, f32[32,128]{1,0:T(8,128)}, bf16[6,64,128]{2,1,0:T(8,128)(2,1)}, f32[6,32,128]{2,1,0:T(8,128)}) parameter(0)
  %i = s32[]{:T(128)} get-tuple-element(%param), index=0
  %x = f32[32,128]{1,0:T(8,128)} get-tuple-element(%param), index=1
  %w = bf16[6,64,128]{2,1,0:T(8,128)(2,1)} get-tuple-element(%param), index=2
  %acts = f32[6,32,128]{2,1,0:T(8,128)} get-tuple-element(%param), index=3
  %w_i = bf16[64,128]{1,0:T(8,128)(2,1)} fusion(%w, %i), kind=kLoop, calls=%slice_layer
  %ar = f32[32,128]{1,0:T(8,128)S(1)} all-reduce(%x), channel_id=1, replica_groups=mesh['axis_0'=2,'axis_1'=2] {'axis_1'}, use_global_device_ids=true, to_apply=%add
  %stored = f32[6,32,128]{2,1,0:T(8,128)} fusion(%acts, %ar, %i), kind=kLoop, calls=%store_row
  %one = s32[]{:T(128)} constant(1)
  %next = s32[]{:T(128)} add(%i, %one)
  ROOT %out = (s32[]{:T(128)}, f32[32,128]{1,0:T(8,128)}, bf16[6,64,128]{2,1,0:T(8,128)(2,1)}, f32[6,32,128]{2,1,0:T(8,128)}) tuple(%next, %ar, %w, %stored)
}

%cond (param: (s32[], f32[32,128], bf16[6,64,128], f32[6,32,128])) -> pred[] {
  %param = (s32[]{:T(128)}, f32[32,128]{1,0:T(8,128)}, bf16[6,64,128]{2,1,0:T(8,128)(2,1)}, f32[6,32,128]{2,1,0:T(8,128)}) parameter(0)
  %layers = s32[]{:T(128)} constant(6)
  %i = s32[]{:T(128)} get-tuple-element(%param), index=0
  ROOT %lt = pred[]{:T(512)} compare(%i, %layers), direction=LT
}

ENTRY %main (a: f32[32,128], w: bf16[6,64,128]) -> f32[24,32,128] {
  %a = f32[32,128]{1,0:T(8,128)} parameter(0)
  %w = bf16[6,64,128]{2,1,0:T(8,128)(2,1)} parameter(1)
  %zero = s32[]{:T(128)} constant(0)
  %start = s32[]{:T(128)} copy(%zero)
  %zero_f = f32[]{:T(128)} constant(0)
  %acts = f32[6,32,128]{2,1,0:T(8,128)} broadcast(%zero_f), dimensions={}
  %init = (s32[]{:T(128)}, f32[32,128]{1,0:T(8,128)}, bf16[6,64,128]{2,1,0:T(8,128)(2,1)}, f32[6,32,128]{2,1,0:T(8,128)}) tuple(%start, %a, %w, %acts)
  %loop = (s32[]{:T(128)}, f32[32,128]{1,0:T(8,128)}, bf16[6,64,128]{2,1,0:T(8,128)(2,1)}, f32[6,32,128]{2,1,0:T(8,128)}) while(%init), condition=%cond, body=%body
  %stack = f32[6,32,128]{2,1,0:T(8,128)} get-tuple-element(%loop), index=3
  %gather = (f32[6,32,128]{2,1,0:T(8,128)}, f32[24,32,128]{2,1,0:T(8,128)}) all-gather-start(%stack), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}
  ROOT %gathered = f32[24,32,128]{2,1,0:T(8,128)} all-gather-done(%gather)
}
"""


def test_tpu_style_loop_slices_updates_and_vmem_by_hand():
  costs = hlo_costs.program_costs(TPU_STYLE)
  activations = 32 * 128 * 4  # f32 [32, 128]: 16 KiB
  stack = 6 * activations  # f32 [6, 32, 128]
  assert costs.ici_ops == {"all-reduce": 6, "all-gather": 1}  # trip count 6 read off %cond
  assert costs.ici_bytes == {"all-reduce": 6 * 2 * (2 - 1) / 2 * activations,
                             "all-gather": (4 - 1) * stack}
  body = (64 * 128 * 2 + 4 + 64 * 128 * 2  # one layer's slice (not all 6) + index; written
          + activations  # the all-reduce reads x from HBM and writes into VMEM
          + 4 + activations  # the in-place row update: index, and one row written
          + 4 + 4 + 4)  # the counter's add
  condition = 4 + 4 + 1
  entry = (4 + 4  # copy of the counter's start
           + 4 + stack  # broadcast of zeros
           + stack + 4 * stack)  # the all-gather's start reads the stack, writes 4 stacks
  assert costs.hbm_bytes == entry + 6 * (body + condition)
  assert costs.unknown_loops == 0


def test_a_loop_with_an_unreadable_trip_count_counts_once():
  text = TPU_STYLE.replace("%start = s32[]{:T(128)} copy(%zero)",
                           "%start = s32[]{:T(128)} partition-id()")
  costs = hlo_costs.program_costs(text)
  assert costs.unknown_loops == 1
  assert costs.ici_ops == {"all-reduce": 1, "all-gather": 1}


def test_tpu_kernels_count_once_per_loop_trip():
  """A Pallas kernel (a `tpu_custom_call`, named after the kernel) in the 6-layer body runs 6
  times; another custom call is no kernel."""
  kernel = ('  %splash_mha_fwd_segmented_residuals.3 = f32[32,128]{1,0:T(8,128)} custom-call(%x), '
            'custom_call_target="tpu_custom_call", backend_config={"custom_call_config":{}}\n'
            '  %buffer.1 = f32[32,128]{1,0:T(8,128)} custom-call(), '
            'custom_call_target="AllocateBuffer"\n')
  text = TPU_STYLE.replace("  %one = s32[]{:T(128)} constant(1)\n",
                           kernel + "  %one = s32[]{:T(128)} constant(1)\n")
  assert hlo_costs.program_costs(text).kernels == {"splash_mha_fwd_segmented_residuals": 6}
  assert hlo_costs.program_costs(TPU_STYLE).kernels == {}


# One trip of a TPU windowed matmul (XLA's loop for an FSDP weight, sharded on the contracting
# dim): a nested fusion pads the activations x [4, 1, 1024] to [4, 2, 1024] two ways and
# dynamic-slices one 128-wide window of each, a dot with the two weight shards adds into the
# accumulator. Only the two windows of x are read, not all of x.
WINDOWED = """HloModule window, num_partitions=16

%two_windows (p0: s32[], p1: bf16[4,1,1024], p2: s32[]) -> bf16[4,2,128] {
  %p1 = bf16[4,1,1024]{2,1,0:T(8,128)(2,1)} parameter(1)
  %ninf = bf16[]{:T(256)} constant(-inf)
  %zero = s32[]{:T(128)} constant(0)
  %p0 = s32[]{:T(128)S(6)} parameter(0)
  %low = bf16[4,2,1024]{2,1,0:T(8,128)(2,1)} pad(%p1, %ninf), padding=0_0x0_1x0_0
  %a = bf16[4,2,128]{2,1,0:T(8,128)(2,1)} dynamic-slice(%low, %zero, %zero, %p0), dynamic_slice_sizes={4,2,128}
  %p2 = s32[]{:T(128)S(6)} parameter(2)
  %high = bf16[4,2,1024]{2,1,0:T(8,128)(2,1)} pad(%p1, %ninf), padding=0_0x1_0x0_0
  %b = bf16[4,2,128]{2,1,0:T(8,128)(2,1)} dynamic-slice(%high, %zero, %zero, %p2), dynamic_slice_sizes={4,2,128}
  ROOT %both = bf16[4,2,128]{2,1,0:T(8,128)(2,1)} maximum(%a, %b)
}

%window_matmul (p0: s32[], p1: bf16[4,1,1024], p2: s32[], p3: bf16[2,128,256], p4: bf16[4,256]) -> bf16[4,256] {
  %p0 = s32[]{:T(128)S(6)} parameter(0)
  %p1 = bf16[4,1,1024]{2,1,0:T(8,128)(2,1)} parameter(1)
  %p2 = s32[]{:T(128)S(6)} parameter(2)
  %window = bf16[4,2,128]{2,1,0:T(8,128)(2,1)} fusion(%p0, %p1, %p2), kind=kLoop, calls=%two_windows
  %p3 = bf16[2,128,256]{2,1,0:T(8,128)(2,1)} parameter(3)
  %dot = bf16[4,256]{1,0:T(8,128)(2,1)} dot(%window, %p3), lhs_contracting_dims={1,2}, rhs_contracting_dims={0,1}
  %p4 = bf16[4,256]{1,0:T(8,128)(2,1)} parameter(4)
  ROOT %sum = bf16[4,256]{1,0:T(8,128)(2,1)} add(%p4, %dot)
}

ENTRY %main (x: bf16[4,1,1024], w: bf16[2,128,256], acc: bf16[4,256], i: s32[], j: s32[]) -> bf16[4,256] {
  %x = bf16[4,1,1024]{2,1,0:T(8,128)(2,1)} parameter(0)
  %w = bf16[2,128,256]{2,1,0:T(8,128)(2,1)} parameter(1)
  %acc = bf16[4,256]{1,0:T(8,128)(2,1)} parameter(2)
  %i = s32[]{:T(128)S(6)} parameter(3)
  %j = s32[]{:T(128)S(6)} parameter(4)
  ROOT %out = bf16[4,256]{1,0:T(8,128)(2,1)} fusion(%i, %x, %j, %w, %acc), kind=kOutput, calls=%window_matmul
}
"""


def test_a_window_sliced_through_a_pad_in_a_nested_fusion_reads_only_the_window():
  costs = hlo_costs.program_costs(WINDOWED)
  window = 4 * 1 * 128 * 2  # the part of x [4, 1, 1024] bf16 in one [4, 2, 128] window: 1 KiB
  weights, accumulator = 2 * 128 * 256 * 2, 4 * 256 * 2
  # Read: two windows (not all 8 KiB of x), the weights and the accumulator (the indices
  # are in S(6), on chip); written: the accumulator.
  assert costs.hbm_bytes == 2 * window + weights + accumulator + accumulator
