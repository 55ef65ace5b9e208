"""Every config key of carr_jax, each documented once; experiments override a few.

Not a runnable experiment by itself (its defaults are the paper's 4B hyper-parameters with a
tiny model); see lab/configs/lookup_cpu.py for the CPU main job and configs/cgrpo_*.py for the
paper. Override any key on the command line: `--config.rollout.temperature=0.8`.

Each key's default is written once. A section that carr_jax.jobs.components builds into a
dataclass config takes those keys from the dataclass (`add_fields`): key `<section>.<field>`,
its default and its documentation the field's, in the module named beside it below. The other
keys are written and documented here. SFT configs add the `sft` section (sft_section below).
"""
import dataclasses
import typing

import ml_collections
from ml_collections.config_dict import placeholder

from carr_jax.coldstart.step import SFTStepConfig
from carr_jax.jobs.components import EngineConfig, ModelSource, SFTConfig, TrainConfig
from carr_jax.jobs.pipeline import PipelineConfig
from carr_jax.jobs.tasks import DataConfig, data_config, task_source
from carr_jax.model.config import ARCHITECTURE, Qwen3Config
from carr_jax.model.sharding import MeshConfig
from carr_jax.rl.loss import LossConfig
from carr_jax.rl.optim import OptimConfig
from carr_jax.rl.packing import PackingConfig
from carr_jax.rl.rewards import RewardConfig
from carr_jax.rl.train_step import StepConfig
from carr_jax.runs.checkpointing import CheckpointConfig
from judge.config import JudgeConfig
from rollout.agent import RolloutConfig
from rollout.tools.web import WebConfig


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0  # PRNG seed of init, data order and sampling

  c.model = ml_collections.ConfigDict()
  # carr_jax/jobs/components.py (ModelSource): preset, hf_path, output_vocab, routing_replay;
  # carr_jax/model/config.py (its fields but the architecture, which the preset gives):
  # moe_impl, attention, param_dtype, compute_dtype, remat
  add_fields(c.model, ModelSource)
  add_fields(c.model, Qwen3Config, skip=ARCHITECTURE)

  c.checkpoint = ml_collections.ConfigDict()
  # carr_jax/runs/checkpointing.py: init_dir, every, keep, hf_export_every
  add_fields(c.checkpoint, CheckpointConfig)

  c.mesh = ml_collections.ConfigDict()
  # carr_jax/model/sharding.py: data, fsdp, expert, tensor, target_devices
  add_fields(c.mesh, MeshConfig)

  c.data = ml_collections.ConfigDict()
  # carr_jax/jobs/tasks.py: source, train_path, eval_path, corpus_path, prompts_per_step,
  # group_size, epochs
  add_fields(c.data, DataConfig)

  c.rollout = ml_collections.ConfigDict()
  # rollout/agent.py: temperature, top_p, top_k, max_turn_tokens, max_context_tokens,
  # max_tool_calls, stop_on_ill_formed, concurrency, tool_timeout_s, system_prompt;
  # carr_jax/jobs/components.py (EngineConfig): engine, sglang_urls, sglang_idle_timeout,
  # sync_dir, tokenizer_dir, max_batch, engine_dtype; carr_jax/jobs/pipeline.py (PipelineConfig):
  # max_staleness, dump_trajectories
  add_fields(c.rollout, RolloutConfig, EngineConfig, PipelineConfig)

  c.tools = ml_collections.ConfigDict()
  c.tools.backend = "corpus"  # "corpus" (offline BM25) | "web" (search + reader APIs)
  # backend=web, rollout/tools/web.py: search_url, reader_url, search_key_env, reader_key_env,
  # timeout_s, attempts, backoff_s, backoff_max_s, max_concurrency, allow_private, cache_dir,
  # cache_pages, cache_searches, trust_env, max_redirects
  add_fields(c.tools, WebConfig)

  c.judge = ml_collections.ConfigDict()
  # judge/config.py: backend, base_url, model, api_key_env, concurrency, timeout, retries,
  # backoff_base, backoff_max, max_reasks, use_cache, temperature, max_tokens, max_citations,
  # accept_plain_links, require_connected, max_response_chars, max_tool_output_chars,
  # max_context_chars, max_body_bytes, max_rubrics, max_history_messages, max_json_depth,
  # max_json_values, body_timeout_s, deadline_s
  add_fields(c.judge, JudgeConfig, skip=("cache_path",))
  c.judge.cache_path = ""  # sqlite judge cache ("" = workdir/judge_cache.sqlite)

  c.reward = ml_collections.ConfigDict()
  # carr_jax/rl/rewards.py: mode, alpha, scale_by_std, std_ddof, eps, equal_tol,
  # filter_zero_gradient, shortcut_threshold
  add_fields(c.reward, RewardConfig)

  c.loss = ml_collections.ConfigDict()
  # carr_jax/rl/loss.py: eps_low, eps_high, log_ratio_clamp, importance_sampling, is_low,
  # is_high, kl_coef, kl_estimator, old_logprobs
  add_fields(c.loss, LossConfig)

  c.optim = ml_collections.ConfigDict()
  # carr_jax/rl/optim.py: learning_rate, warmup_steps, decay_from, decay_steps, b1, b2,
  # eps, weight_decay, grad_clip_norm
  add_fields(c.optim, OptimConfig)

  c.batch = ml_collections.ConfigDict()
  # carr_jax/rl/train_step.py, carr_jax/coldstart/step.py, carr_jax/rl/packing.py:
  # micro_batches, logprob_chunk, skip_zero_gradient, row_lengths, coarse_rows, overflow, pad_id,
  # loss_positions_multiple, prefix_multiple
  # (the skipped fields carr_jax.jobs.components computes from other keys)
  add_fields(c.batch, StepConfig, SFTStepConfig, PackingConfig,
             skip=("temperature", "loss_positions", "on_policy", "shared_prefix", "vocab",
                   "row_multiple", "vocab_size", "routing_replay", "routes"))

  c.train = ml_collections.ConfigDict()
  # carr_jax/jobs/components.py (TrainConfig): num_steps, eval_every, eval_questions,
  # eval_samples, text_samples
  add_fields(c.train, TrainConfig)
  return c


def sft_section() -> ml_collections.ConfigDict:
  """The `sft` section (the SFT job, carr_jax/jobs/sft_train.py), which SFT configs add as
  `c.sft = base.sft_section()`."""
  s = ml_collections.ConfigDict()
  # carr_jax/jobs/components.py (SFTConfig): data, epochs, batch_size, num_steps, min_outcome,
  # default_tools
  add_fields(s, SFTConfig)
  return s


def use_task_source(c: ml_collections.ConfigDict, source: str) -> None:
  """Makes `source`, a task source module (carr_jax/jobs/tasks.py task_source), the config's
  data and adds the config section it owns: `<source>.SECTION`, at `<source>.config_section()`.
  The module is imported by name (the CPU laboratory's is "lab.tasks", section `world`)."""
  c.data.source = source
  module = task_source(data_config(c))
  c[module.SECTION] = module.config_section()


def add_fields(section: ml_collections.ConfigDict, *classes: type, skip=(),
               renamed: dict | None = None) -> None:
  """Adds to `section` a key for each field with a default of the dataclasses `classes` but
  `skip`: the field's name (or `renamed[name]`), its default the field's, None as a placeholder
  of the field's type (so an override type-checks). A field two classes share must agree."""
  renamed = renamed or {}
  for cls in classes:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
      default = _default(f)
      if f.name in skip or default is dataclasses.MISSING:
        continue
      key = renamed.get(f.name, f.name)
      if key in section and section[key] != default:
        raise ValueError(f"{cls.__name__}.{f.name}: default {default!r}, but another class of "
                         f"the section has {section[key]!r}")
      section[key] = placeholder(_declared_type(hints[f.name])) if default is None else default


def _default(field: dataclasses.Field):
  """The field's default, or dataclasses.MISSING where it has none."""
  if field.default_factory is not dataclasses.MISSING:
    return field.default_factory()
  return field.default


def _declared_type(hint) -> type:
  """`str | None` -> str: the type a None default's placeholder takes."""
  args = [a for a in typing.get_args(hint) if a is not type(None)]
  return args[0] if len(args) == 1 else hint
