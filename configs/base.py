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
from carr_jax.jobs.components import EngineConfig
from carr_jax.jobs.pipeline import PipelineConfig
from carr_jax.jobs.tasks import task_source
from carr_jax.model.config import ARCHITECTURE, Qwen3Config
from carr_jax.rl.loss import LossConfig
from carr_jax.rl.optim import OptimConfig
from carr_jax.rl.packing import PackingConfig
from carr_jax.rl.rewards import RewardConfig
from carr_jax.rl.train_step import StepConfig
from judge.config import JudgeConfig
from rollout.agent import RolloutConfig
from rollout.tools.web import WebConfig


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0  # PRNG seed of init, data order and sampling

  c.model = ml_collections.ConfigDict()
  c.model.preset = "tiny_dense"  # carr_jax.model.config preset name
  c.model.hf_path = ""  # HF directory to initialise from ("" = random init / checkpoint)
  # "full" | "task": the softmax over the ids the in-process task source's tasks can need only
  # (its output_ids)
  c.model.output_vocab = "full"
  # RL of a mixture of experts: the trainer's MoE layers use the experts the rollout engine
  # chose per token (rollout/routes.py, carr_jax.rl.train_step); SFT and evaluation never do
  c.model.routing_replay = False
  # carr_jax/model/config.py (its fields but the architecture, which the preset gives):
  # moe_impl, attention, param_dtype, compute_dtype, remat
  add_fields(c.model, Qwen3Config, skip=ARCHITECTURE)

  c.checkpoint = ml_collections.ConfigDict()
  c.checkpoint.init_dir = ""  # orbax checkpoint to initialise params from (e.g. after SFT)
  c.checkpoint.every = 50  # save every N steps (and at the last step)
  c.checkpoint.keep = 3  # checkpoints kept on disk
  c.checkpoint.hf_export_every = 0  # also write an HF directory every N steps (0 = never)

  # Named mesh axes (carr_jax.model.sharding); one may be -1 (all remaining devices).
  c.mesh = ml_collections.ConfigDict()
  c.mesh.data = -1
  c.mesh.fsdp = 1
  c.mesh.expert = 1
  c.mesh.tensor = 1
  c.mesh.target_devices = 0  # device count this config is written for (0 = any); checked

  c.data = ml_collections.ConfigDict()
  # "jsonl" (CaRR records) | a task source module making tasks in-process (carr_jax/jobs/tasks.py
  # task_source), set with its own config section by `use_task_source`
  c.data.source = "jsonl"
  c.data.train_path = ""  # CaRR-format jsonl (source=jsonl)
  c.data.eval_path = ""  # held-out jsonl, same format (optional)
  c.data.corpus_path = ""  # offline corpus jsonl for tools.backend=corpus (a task source: its own)
  c.data.prompts_per_step = 16  # questions per step (paper: 16)
  c.data.group_size = 8  # rollouts per question, G (paper: 8)
  c.data.epochs = 3  # passes over the training questions (paper: 3); bounds num_steps

  c.rollout = ml_collections.ConfigDict()
  # rollout/agent.py: temperature, top_p, top_k, max_turn_tokens, max_context_tokens,
  # max_tool_calls, stop_on_ill_formed, concurrency, tool_timeout_s, system_prompt;
  # carr_jax/jobs/components.py (EngineConfig): engine, sglang_urls, sglang_idle_timeout,
  # sync_dir, tokenizer_dir, max_batch; carr_jax/jobs/pipeline.py (PipelineConfig):
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
  # filter_zero_gradient
  add_fields(c.reward, RewardConfig)
  c.reward.shortcut_threshold = 0.5  # correct answers with rubric reward below this = shortcut

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
  # prefix_multiple
  # (the skipped fields carr_jax.jobs.components computes from other keys)
  add_fields(c.batch, StepConfig, SFTStepConfig, PackingConfig,
             skip=("temperature", "loss_positions", "on_policy", "shared_prefix", "vocab",
                   "row_multiple", "vocab_size", "routing_replay", "routes"))
  # Logits only at the slots with loss (generated tokens), gathered per row into a [R, K]
  # index with K a multiple of this (coarsely bucketed: few compiled shapes); 0 = logits at
  # every slot (RL only; SFT always gathers). carr_jax.rl.packing.loss_positions.
  c.batch.loss_positions_multiple = 1024

  c.train = ml_collections.ConfigDict()
  c.train.num_steps = 100  # optimizer steps (capped by data.epochs)
  c.train.eval_every = 20  # evaluate on the held-out split every N steps (0 = never)
  c.train.eval_questions = 32  # held-out questions per evaluation
  c.train.eval_samples = 1  # samples per eval question
  c.train.text_samples = 2  # rendered trajectories written as TensorBoard text per eval
  return c


def sft_section() -> ml_collections.ConfigDict:
  """The `sft` section (the SFT job, carr_jax/jobs/sft_train.py), which SFT configs add as
  `c.sft = base.sft_section()`."""
  s = ml_collections.ConfigDict()
  # comma-separated trajectory JSONL files, or "expert": the scripted episodes of the in-process
  # task source (data.source; the laboratory's expert takes its keys from lab.configs.sft_section)
  s.data = "expert"
  s.epochs = 3  # passes over the examples (paper: 3)
  s.batch_size = 16  # trajectories per optimizer step (paper: 16)
  s.num_steps = 0  # stop after this many steps (0 = all epochs)
  s.min_outcome = 0.0  # keep dumped rollouts whose judge outcome is >= this (0 = all)
  s.default_tools = True  # records without tools get the browser schemas in their prompt
  return s


def use_task_source(c: ml_collections.ConfigDict, source: str) -> None:
  """Makes `source`, a task source module (carr_jax/jobs/tasks.py task_source), the config's
  data and adds the config section it owns: `<source>.SECTION`, at `<source>.config_section()`.
  The module is imported by name (the CPU laboratory's is "lab.tasks", section `world`)."""
  c.data.source = source
  module = task_source(c.data)
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
