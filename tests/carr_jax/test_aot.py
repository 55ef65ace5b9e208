"""The TPU compile check's parts that run without libtpu: FLOPs from the model's arithmetic,
the worst-case batch, the fit verdict, and `compile_config` end to end on CPU devices (the
deviceless TPU compile itself is CI's step, in the TPU virtualenv)."""
import math

import jax
import pytest

from carr_jax.jobs import aot
from carr_jax.model import flops as F
from carr_jax.model.config import get_preset
from configs import cgrpo_qwen3_4b, cgrpo_qwen3_30b_a3b


def test_dense_flops_by_hand():
  """tiny_dense: D 64, 4 heads / 2 kv of 32, F 128, 2 layers, V 151,936; 2 rows of 8."""
  cfg = get_preset("tiny_dense")
  assert F.layer_matmul_weights(cfg) == 2 * 64 * 128 + 2 * 64 * 64 + 3 * 64 * 128  # 49,152
  layers = 2 * (2 * 16 * 49_152 + 4 * 4 * 32 * 2 * 36)  # matmuls + 36 causal pairs per row
  logits = 2 * 2 * 8 * 64 * 151_936
  assert F.forward_flops(cfg, rows=2, row_length=8, logit_positions=8) == layers + logits
  assert F.train_step_flops(cfg, 2, 8, 8) == (3 * (layers + logits),) * 2  # no remat
  # (each remat policy's executed FLOPs: tests/carr_jax/test_remat.py)


def test_moe_flops_count_the_router_and_top_k_experts_only():
  cfg = get_preset("tiny_moe")  # 8 experts, top 2, expert F 32
  assert F.layer_matmul_weights(cfg) == 2 * 64 * 128 + 2 * 64 * 64 + 64 * 8 + 2 * 3 * 64 * 32


@pytest.mark.parametrize("module,arg,rows", [(cgrpo_qwen3_4b, "tpu", 128),
                                             (cgrpo_qwen3_4b, "tpu,sft", 16)])
def test_worst_case_rows_give_every_trajectory_its_own_row(module, arg, rows):
  """RL: 16 prompts x 8 rollouts; SFT: a batch of 16; rounded to the packer's row multiple."""
  config = module.get_config(arg)
  mesh = {"data": 1, "fsdp": 16, "expert": 1, "tensor": 4}
  shaped = type("Mesh", (), {"shape": mesh})()
  assert aot.worst_case_rows(config, shaped, 151_936, 65_536) == rows


def test_fit_verdict_needs_headroom_and_no_compile_error():
  chip = aot.Chip(hbm_bytes=100.0, peak_flops=1.0, hbm_bandwidth=1.0, ici_bandwidth=1.0)
  assert aot.Report("s", arguments=50, temporaries=45, outputs=10, aliased=20).total == 85
  assert aot.fits(aot.Report("s", temporaries=89), chip, headroom=0.1)
  assert not aot.fits(aot.Report("s", temporaries=91), chip, headroom=0.1)
  assert not aot.fits(aot.Report("s", error="RESOURCE_EXHAUSTED"), chip, headroom=0.1)
  with pytest.raises(ValueError, match="unknown TPU chip"):
    aot.chip_of("v9z:2x2")


def test_roofline_bounds_and_the_largest_of_them():
  """8e12 FLOPs on 4 chips of 1e12 FLOP/s: 2 s; 3e9 HBM bytes per chip at 1e9 B/s: 3 s; 1e8
  collective bytes per chip at 1e8 B/s: 1 s. The step is HBM-bound at 3 s; with no ICI
  figure for the chip (v4) there is no bound."""
  chip = aot.Chip(hbm_bytes=100.0, peak_flops=1e12, hbm_bandwidth=1e9, ici_bandwidth=1e8)
  costs = aot.hlo_costs.Costs({"all-gather": 6e7, "all-reduce": 4e7}, {}, 3e9, 0)
  bounds = aot.roofline(aot.Report("s", flops=8e12, costs=costs), chip, chips=4)
  assert (bounds.compute, bounds.hbm, bounds.collective) == (2.0, 3.0, 1.0)
  assert (bounds.bound, bounds.limit) == (3.0, "HBM")
  v4 = aot.roofline(aot.Report("s", flops=8e12, costs=costs), aot.CHIPS["v4"], chips=4)
  assert math.isnan(v4.bound) and v4.limit == "?"


@pytest.mark.slow  # two compiles over the full 151,936-id vocabulary: ~1-2 min on 2 cores
def test_the_moe_config_compiles_with_its_replayed_routes():
  """The 30B-A3B config replays routes (its `tiny` variant here, 4 CPU devices): the train step
  takes routes [R, S, layers, k] int32, whose bytes per device are its argument bytes beyond the
  same step without replay."""
  config = cgrpo_qwen3_30b_a3b.get_config("tiny")
  assert config.model.routing_replay
  (step,), _ = aot.compile_config(config, jax.devices()[:4], rows=4, row_length=64)
  config.model.routing_replay = False
  (plain,), _ = aot.compile_config(config, jax.devices()[:4], rows=4, row_length=64)
  assert not step.error and not plain.error
  cfg = get_preset("tiny_moe")
  routes = 4 * 64 * cfg.num_layers * cfg.num_experts_per_tok * 4 / 4  # int32, rows over 4
  assert step.arguments - plain.arguments == routes


def test_compile_config_on_cpu_devices():
  """The same path as a TPU compile, for 4 CPU devices: both functions compile, memory is
  read back per device, donation aliases the state, and auto attention resolves to blockwise."""
  config = cgrpo_qwen3_4b.get_config("tiny")
  config.loss.kl_coef = 0.1  # the reference policy's log-prob pass compiles only for a KL term
  reports, facts = aot.compile_config(config, jax.devices()[:4], rows=4, row_length=256)
  assert [r.name for r in reports] == ["train step", "ref log-probs"]
  assert facts["attention"] == "blockwise" and facts["rows"] == 4
  step, logprobs = reports
  assert step.temporaries > 0 and step.aliased > 0 and not step.error
  assert (step.model_flops, step.flops) == F.train_step_flops(get_preset("tiny_dense"), 4, 256,
                                                               256)
  # Data parallel over 4 devices: the embedding's f32 gradient alone is all-reduced.
  assert step.costs.ici_total >= 2 * (4 - 1) / 4 * 151_936 * 64 * 4
  # (Blockwise attention's causal loop over key blocks runs as often as the query block's
  # index: no fixed trip count, so `costs.unknown_loops` is not 0 here; splash on TPU has none.)
  assert step.costs.hbm_bytes > 0
  assert logprobs.outputs == 4 * 256 * 4 / 4  # fp32 log-probs [R, S], rows over 4 devices
