"""TPU compile check on any machine: compile a config's real train step for a TPU topology.

    .venv-tpu/bin/python -m carr_jax.aot --config configs/cgrpo_qwen3_4b.py:tpu \\
        --topology v5p:4x4x4

Needs libtpu, which only the separate TPU virtualenv has (`requirements-tpu.txt`;
scripts/setup_tpu_venv.sh builds it); no TPU is needed. Topologies use libtpu's names:
`<chip>:<chips per axis>`, e.g. v5p:4x4x4 (64 chips, a "v5p-128" slice) or v5p:2x2x1.

What it compiles, deviceless (`jax.experimental.topologies`), on abstract inputs only
(`jax.ShapeDtypeStruct` with shardings; no parameter is ever allocated):
- the train step of the config (RL: `train_step.train_step_fn`; SFT: `sft_step.sft_step_fn`),
  jitted as the trainers jit it (`train_step.jit_step`: shardings, donated state);
- RL with a KL term only: the reference policy's log-prob pass (`train_step.jit_logprob_fn`;
  the old log-probs come from the train step's own forward, `StepConfig.on_policy`, or
  from the engine).
The batch is the config's worst case: its longest row length, every trajectory of a step
(prompts x group size, or the SFT batch) filling a row of its own, rounded as the packer
rounds rows, and a loss at every slot. `model.attention=auto` resolves for the topology's
platform (splash on TPU).

Per chip it prints memory (arguments, temporaries, outputs, donated bytes aliased into the
outputs, their total against the chip's HBM) and compile time; then a roofline per function,
three lower bounds on its time, of which the step takes at least the largest (`bound s`, `by`):
- compute: executed FLOPs (the model's arithmetic, `carr_jax.model.flops`, recomputation
  included) / (chips x the chip's bf16 peak); `executed / model` is the recomputation's share;
- HBM: bytes each chip reads and writes in HBM / its HBM bandwidth;
- ICI: bytes each chip sends in collectives / its ICI bandwidth (all links, one way). A
  collective over one mesh axis uses only that axis's links (2 of a v5p chip's 6), so the
  real time can be a few times this.
The step equals its largest bound only when the other two hide under it completely.
Both byte counts come from the compiled HLO with every loop body counted as often as it runs
(`carr_jax.jobs.hlo_costs`, whose docstring has the formulas; XLA's `cost_analysis()` counts
loop bodies once), and so do the runs of each TPU kernel it prints: splash attention's forward
runs once per layer and micro-batch, twice under a remat policy that recomputes the core.
The chips' bandwidths and their sources: `CHIPS`.
Exit status 1 when a function does not fit: its compile runs out of HBM, or its total
exceeds (1 - --headroom) of the HBM. Flags: --help.
"""
from __future__ import annotations

import dataclasses
import math
import re
import time

from carr_jax.jobs import hlo_costs


GIB = 1024 ** 3


@dataclasses.dataclass(frozen=True)
class Chip:
  hbm_bytes: float  # per chip
  peak_flops: float  # dense bf16 FLOP/s per chip
  hbm_bandwidth: float  # bytes/s per chip
  ici_bandwidth: float  # bytes/s one chip sends over all its ICI links at once (one way)


# Google Cloud's TPU pages (cloud.google.com/tpu/docs/v5p, /v5e, /v6e, /v4), read 2026-11:
# v5p 459 TFLOP/s bf16, HBM 2,765 GB/s, ICI 4,800 Gbps per chip (the page's newer table:
# 1,200 GB/s bidirectional, i.e. 600 GB/s each way); v5e 197 TFLOP/s, 819 GB/s, 1,600 Gbps
# (400 GB/s bidirectional); v6e 918 TFLOP/s, 1,638 GB/s, 800 GB/s bidirectional; v4
# 275 TFLOP/s, 1,200 GB/s, and no per-chip ICI figure (nan: no collective bound). The ICI
# figure is per chip, all links together, one way: 4,800 Gbps / 8 = 600e9 bytes/s; the ICI
# bound is the bytes a chip sends in collectives over it, as if every link were busy at once.
# v5p's HBM size is what XLA reports as available to a program ("exceeds available HBM
# (95.74G)").
CHIPS = {"v5p": Chip(95.74 * GIB, 459e12, 2765e9, 600e9),
         "v4": Chip(32 * GIB, 275e12, 1200e9, float("nan")),
         "v5e": Chip(16 * GIB, 197e12, 819e9, 200e9),
         "v6e": Chip(32 * GIB, 918e12, 1638e9, 400e9)}


@dataclasses.dataclass
class Report:
  name: str
  arguments: float = 0.0  # bytes per chip
  temporaries: float = 0.0
  outputs: float = 0.0
  aliased: float = 0.0  # donated argument bytes reused for outputs
  compile_s: float = 0.0
  flops: float = 0.0  # executed FLOPs of the whole step (all chips), remat included
  model_flops: float = 0.0  # the model's FLOPs (no recomputation), all chips
  costs: hlo_costs.Costs | None = None  # HBM and ICI bytes per chip, from the compiled HLO
  error: str = ""  # the compiler's out-of-memory message, if any

  @property
  def total(self) -> float:
    return self.arguments + self.temporaries + self.outputs - self.aliased


@dataclasses.dataclass(frozen=True)
class Roofline:
  """Lower bounds on one step's time in seconds; the step takes at least the largest."""
  compute: float  # executed FLOPs over all chips at the bf16 peak
  hbm: float  # HBM bytes per chip at the HBM bandwidth
  collective: float  # collective bytes per chip at the ICI bandwidth

  @property
  def bound(self) -> float:
    times = (self.compute, self.hbm, self.collective)
    return float("nan") if any(math.isnan(t) for t in times) else max(times)

  @property
  def limit(self) -> str:
    """Which of the three is the bound."""
    times = {"compute": self.compute, "HBM": self.hbm, "ICI": self.collective}
    return "?" if math.isnan(self.bound) else max(times, key=times.get)


def roofline(report: Report, chip: Chip, chips: int) -> Roofline:
  """The bounds of a compiled function (`report.costs` set)."""
  return Roofline(report.flops / (chips * chip.peak_flops),
                  report.costs.hbm_bytes / chip.hbm_bandwidth,
                  report.costs.ici_total / chip.ici_bandwidth)


def chip_of(topology: str) -> Chip:
  name = topology.split(":")[0]
  if name not in CHIPS:
    raise ValueError(f"unknown TPU chip {name!r} in {topology!r}; known: {sorted(CHIPS)}")
  return CHIPS[name]


def topology_devices(topology: str) -> list:
  from jax.experimental import topologies
  return list(topologies.get_topology_desc(topology_name=topology, platform="tpu").devices)


def abstract(tree, shardings):
  """ShapeDtypeStructs of `tree` carrying `shardings` (same structure)."""
  import jax
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      tree, shardings)


def abstract_batch(mesh, keys, rows: int, row_length: int, loss_positions: int,
                   routes: tuple[int, int] = (0, 0)) -> dict:
  """[rows, row_length] arrays ([rows, loss_positions] for the loss index; [rows, row_length,
  layers, k] for replayed `routes`), split by rows; a shared prefix of no tokens (the worst
  case: nothing shared)."""
  import jax
  import jax.numpy as jnp
  from carr_jax.rl import train_step as ts
  ints = {"tokens", "positions", "segment_ids", "targets", "loss_index", "prefix_tokens",
          "routes"}
  width = {"loss_index": loss_positions, "loss_valid": loss_positions}
  shape = lambda k: ((0,) if k in ts.PREFIX_KEYS else () if k in ts.TOTAL_KEYS  # noqa: E731
                     else (rows, row_length, *routes) if k in ts.ROUTE_KEYS
                     else (rows, width.get(k, row_length)))
  return {k: jax.ShapeDtypeStruct(shape(k), jnp.int32 if k in ints else jnp.float32,
                                  sharding=ts.key_sharding(mesh, k, len(shape(k))))
          for k in keys}


def worst_case_rows(config, mesh, vocab_size: int, row_length: int) -> int:
  """Rows when every trajectory of a step fills a row of its own, rounded as the packer does."""
  from carr_jax.jobs import components
  from carr_jax.jobs import tasks as data_lib
  from carr_jax.rl import packing
  data_cfg = data_lib.data_config(config)
  trajectories = (components.sft_config(config).batch_size if "sft" in config
                  else data_cfg.prompts_per_step * data_cfg.group_size)
  pack_cfg = components.packing_config(config, mesh, vocab_size)
  return packing.choose_shape([row_length] * trajectories, pack_cfg)[2]


def compile_report(name: str, jitted, args, mesh, model_flops: float, flops: float) -> Report:
  """Lowers and compiles `jitted(*args)` under `mesh`; memory per chip from XLA, HBM and
  collective bytes per chip from the compiled HLO (`hlo_costs`)."""
  import jax
  report = Report(name, flops=flops, model_flops=model_flops)
  start = time.perf_counter()
  try:
    with jax.set_mesh(mesh):
      compiled = jitted.lower(*args).compile()
  except Exception as e:  # noqa: BLE001  the compiler's out-of-memory error is a result
    if "RESOURCE_EXHAUSTED" not in str(e):
      raise
    report.error = str(e).splitlines()[0][:300]
    found = re.search(r"temporaries \(([\d.]+)([GT])\)", str(e))  # XLA's GiB / TiB
    scale = {"G": GIB, "T": 1024 * GIB}
    report.temporaries = float(found.group(1)) * scale[found.group(2)] if found else float("nan")
    report.compile_s = time.perf_counter() - start
    return report
  report.compile_s = time.perf_counter() - start
  memory = compiled.memory_analysis()
  report.arguments = memory.argument_size_in_bytes
  report.temporaries = memory.temp_size_in_bytes
  report.outputs = memory.output_size_in_bytes
  report.aliased = memory.alias_size_in_bytes
  report.costs = hlo_costs.program_costs(compiled.as_text(), mesh.size)
  return report


def compile_config(config, devices, rows: int = 0, row_length: int = 0) -> tuple[list, dict]:
  """Compiles the config's step (and RL's log-prob function) for `devices`.

  Returns (reports, facts about the compiled shapes).
  """
  from carr_jax.model import attention
  from carr_jax.jobs import components
  from carr_jax.model import flops as flops_lib
  from carr_jax.model import sharding
  from carr_jax.rl import optim
  from carr_jax.rl import train_step as ts
  mesh = sharding.mesh_from_config(components.mesh_config(config), devices)
  cfg, vocab = components.model_config(config), components.output_vocab(config)
  tx = optim.make_optimizer(components.optim_config(config))
  row_length = row_length or max(components.packing_config(config, mesh,
                                                            cfg.vocab_size).row_lengths)
  rows = rows or worst_case_rows(config, mesh, cfg.vocab_size, row_length)
  state, shardings = ts.abstract_train_state(cfg, tx, mesh)
  state = abstract(state, shardings)
  model_flops, executed = flops_lib.train_step_flops(cfg, rows, row_length, row_length, vocab)
  if "sft" in config:
    from carr_jax.coldstart import step as sft_step
    sft_cfg = components.sft_step_config(config, vocab)
    step, keys = sft_step.sft_step_fn(cfg, sft_cfg, tx), sft_step.sft_batch_keys(sft_cfg)
    micro_batches = sft_cfg.micro_batches
  else:
    loss_cfg, step_cfg = components.loss_config(config), components.step_config(config, vocab)
    step = ts.train_step_fn(cfg, loss_cfg, step_cfg, tx)
    keys = ts.step_batch_keys(loss_cfg, step_cfg)
    micro_batches = step_cfg.micro_batches
  facts = {"mesh": dict(mesh.shape), "rows": rows, "row_length": row_length,
           "micro_batches": micro_batches, "model_flops": model_flops,
           "attention": attention.resolve(cfg.attention, devices[0].platform, cfg.compute_dtype)}
  batch = abstract_batch(mesh, keys, rows, row_length, row_length,
                         (cfg.num_layers, cfg.num_experts_per_tok))
  reports = [compile_report("train step", ts.jit_step(step, mesh, shardings, keys),
                            (state, batch), mesh, model_flops, executed)]
  if "sft" not in config and loss_cfg.kl_coef:
    logprob_keys = ts.logprob_batch_keys(step_cfg)
    logprobs = ts.jit_logprob_fn(cfg, step_cfg, mesh, shardings.params)
    forward = flops_lib.forward_flops(cfg, rows, row_length, row_length, vocab)
    reports.append(compile_report(
        "ref log-probs", logprobs, (state.params, {k: batch[k] for k in logprob_keys}), mesh,
        forward, forward))
  return reports, facts


def fits(report: Report, chip: Chip, headroom: float) -> bool:
  return not report.error and report.total <= (1.0 - headroom) * chip.hbm_bytes


def format_table(reports: list, chip: Chip) -> str:
  """One line per compiled function; memory in GiB per chip."""
  head = (f"{'function':<14} {'args':>7} {'temp':>7} {'out':>7} {'alias':>7} {'total':>7} "
          f"{'of HBM':>7} {'compile s':>9}")
  lines = [head]
  for r in reports:
    gib = lambda x: f"{x / GIB:7.2f}"  # noqa: E731
    lines.append(f"{r.name:<14} {gib(r.arguments)} {gib(r.temporaries)} {gib(r.outputs)} "
                 f"{gib(r.aliased)} {gib(r.total)} {r.total / chip.hbm_bytes:7.0%} "
                 f"{r.compile_s:9.0f}")
    if r.error:
      lines.append(f"  does not fit: {r.error}")
  return "\n".join(lines)


def format_roofline(reports: list, chip: Chip, chips: int) -> str:
  """Per function: FLOPs, HBM and ICI bytes per chip, the three time bounds and their max."""
  head = (f"{'function':<14} {'FLOPs':>9} {'executed / model':>16} {'HBM GiB':>8} "
          f"{'ICI GiB':>8} {'compute s':>9} {'HBM s':>9} {'ICI s':>9} {'bound s':>9}  by")
  lines = [head]
  for r in reports:
    if r.error:
      continue
    bounds, costs = roofline(r, chip, chips), r.costs
    ratio = r.flops / r.model_flops if r.model_flops else float("nan")
    lines.append(f"{r.name:<14} {r.flops:9.3g} {ratio:16.2f} {costs.hbm_bytes / GIB:8.2f} "
                 f"{costs.ici_total / GIB:8.3f} {bounds.compute:9.3g} {bounds.hbm:9.3g} "
                 f"{bounds.collective:9.3g} {bounds.bound:9.3g}  {bounds.limit}")
    kinds = ", ".join(f"{k} {v / GIB:.3f} GiB ({costs.ici_ops[k]:,.0f} runs)"
                      for k, v in sorted(costs.ici_bytes.items()))
    lines.append(f"  collectives per chip: {kinds or 'none'}")
    if costs.kernels:  # e.g. splash attention's forward: once per layer, twice if recomputed
      runs = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(costs.kernels.items()))
      lines.append(f"  kernel runs per chip: {runs}")
    if costs.unknown_loops:
      lines.append(f"  {costs.unknown_loops} loop run(s) of unknown trip count counted once")
  return "\n".join(lines)
