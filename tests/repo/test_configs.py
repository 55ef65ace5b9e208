"""Every config in configs/ resolves, is locked, and its model + mesh pass shape/sharding checks.

For each config (and each variant argument it documents) the model is built only abstractly
(`jax.eval_shape`) and every parameter must match a sharding rule whose axes divide it on the
mesh the config declares for its target device count.
"""
import asyncio
import importlib
import math

import jax
import pytest
from jax.sharding import AbstractMesh

from carr_jax.jobs import components
from carr_jax.model import qwen3 as model_lib
from carr_jax.model import sharding

CONFIGS = [("configs.base", None)] + [
    (f"lab.configs.{name}", arg) for name, args in (
        ("demo_cpu", (None, "sft")), ("named_cpu", (None, "sft", "copy")), ("kinds_cpu", (None,)),
        ("lookup_cpu", (None, "sft", "main", "stale", "moe")), ("chain_cpu", (None, "sft", "main")))
    for arg in args] + [
    (f"configs.{name}", arg) for name in ("cgrpo_qwen3_4b", "cgrpo_qwen3_30b_a3b")
    for arg in ("tpu", "gpu", "tiny", "tpu,grpo")] + [
    ("configs.cgrpo_qwen3_4b", arg) for arg in ("tpu,sft", "gpu,sft", "tiny,sft")]


def load(name, arg):
  module = importlib.import_module(name)
  config = module.get_config(arg) if arg is not None else module.get_config()
  config.lock()
  return config


@pytest.mark.parametrize("name,arg", CONFIGS)
def test_config_resolves_and_shards(name, arg):
  config = load(name, arg)
  cfg = components.model_config(config)
  components.loss_config(config)
  components.reward_config(config)
  devices = config.mesh.target_devices or 8  # 8 = the fake CPU devices of the test suite
  sizes = sharding.mesh_shape({a: config.mesh[a] for a in sharding.AXES}, devices)
  mesh = AbstractMesh(tuple(sizes[a] for a in sharding.AXES), sharding.AXES)
  abstract = model_lib.abstract_params(cfg)
  specs = sharding.param_specs(abstract, mesh)  # raises on a missing rule / indivisible dim
  assert len(jax.tree.leaves(specs, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
             ) == len(jax.tree.leaves(abstract))
  components.packing_config(config, mesh, cfg.vocab_size)  # episodes fit the longest row
  rows = sizes["data"] * sizes["fsdp"] * sizes["expert"] * config.batch.micro_batches
  trajectories = config.data.prompts_per_step * config.data.group_size
  small = name in ("configs.base", "lab.configs.demo_cpu") or arg == "tiny"
  assert trajectories >= rows or small, "fewer trajectories per step than batch shards: idle"


def test_an_episode_longer_than_the_longest_row_fails_at_start_unless_cut_on_purpose():
  from lab.configs import lookup_cpu
  mesh = AbstractMesh(tuple(1 for _ in sharding.AXES), sharding.AXES)
  config = lookup_cpu.get_config()
  config.rollout.max_context_tokens = max(config.batch.row_lengths) + 1
  with pytest.raises(ValueError, match=r"rollout.max_context_tokens=641 exceeds the longest of "
                     r"batch.row_lengths \(640\).*batch.overflow='truncate'"):
    components.packing_config(config, mesh, 1000)
  config.batch.overflow = "truncate"
  assert components.packing_config(config, mesh, 1000).overflow == "truncate"


def test_paper_values_in_4b_config():
  c = load("configs.cgrpo_qwen3_4b", "tpu")
  assert (c.optim.learning_rate, c.optim.b1, c.optim.b2, c.optim.weight_decay) == (
      2e-6, 0.9, 0.98, 0.1)
  assert (c.loss.eps_low, c.loss.eps_high, c.loss.kl_coef) == (0.2, 0.28, 0.0)
  assert (c.data.prompts_per_step, c.data.group_size, c.reward.alpha) == (16, 8, 0.3)
  assert c.rollout.max_context_tokens == 65536 and c.rollout.max_tool_calls == 100
  params = model_lib.abstract_params(components.model_config(c))
  assert abs(sum(math.prod(x.shape) for x in jax.tree.leaves(params)) - 4.02e9) < 0.02e9
  assert load("configs.cgrpo_qwen3_4b", "tpu,grpo").reward.mode == "grpo"


def test_locked_config_rejects_unknown_keys_and_bad_variants():
  c = load("lab.configs.demo_cpu", None)
  with pytest.raises(AttributeError):
    c.rollout.temprature = 0.5  # typo
  with pytest.raises(ValueError, match="tpu, gpu or tiny"):
    load("configs.cgrpo_qwen3_4b", "cpu")
  with pytest.raises(ValueError, match="unknown config variant"):
    load("configs.cgrpo_qwen3_4b", "tpu,ppo")


def test_mesh_target_devices_is_checked():
  c = load("configs.cgrpo_qwen3_4b", "tpu")
  with pytest.raises(ValueError, match="written for 64 devices"):
    sharding.mesh_from_config(components.mesh_config(c))


def test_sglang_engine_takes_its_limits_from_the_rollout_section():
  c = load("configs.cgrpo_qwen3_4b", "tpu")
  with c.unlocked():
    c.rollout.engine = "sglang"
    c.rollout.sglang_urls = "http://127.0.0.1:30000, http://127.0.0.1:30001/"
    c.rollout.concurrency = 256
    c.rollout.sglang_idle_timeout = 45.0
  engine = components.engine(c, None, components.model_config(c), "0")
  try:
    assert engine.urls == ["http://127.0.0.1:30000", "http://127.0.0.1:30001"]
    assert engine.max_concurrency == 256  # episodes are not capped below rollout.concurrency
    assert engine.idle_timeout == 45.0
  finally:
    asyncio.run(engine.close())
  with c.unlocked():
    c.rollout.sglang_urls = ""
  with pytest.raises(ValueError, match="sglang_urls is required"):
    components.engine(c, None, components.model_config(c), "0")
