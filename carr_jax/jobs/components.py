"""Builds the trainer's parts from an ml_collections config: one function per part.

Each dataclass config comes from one section of the config (`carr_common.sections.
from_section`): field `f` of the dataclass is the key `<section>.<f>`, except the fields its
builder computes, which the builder names with their reason. The field's default is the key's
one default: configs/base.py adds the key from the field (`add_fields`;
tests/repo/test_config_single_source.py).

A builder reads its own section (engine and tokenizer: rollout; tool_backend: tools) and, where
named here, other keys for a stated reason:
  output_vocab     rollout.engine, rollout.tokenizer_dir, data.source and the source's
                   section: model.output_vocab="task" needs the in-process engine and an
                   in-process task source, whose output ids it collects
  step_config      rollout.temperature: the loss divides logits by the sampling temperature;
                   loss.old_logprobs: "trainer" is the on-policy step; model.routing_replay;
                   loss.kl_coef and the model's router aux loss: skip_zero_gradient needs
                   neither
  packing_config   model.routing_replay (RL only): the routes' shape, from the model
  pipeline_config  loss.*: rollouts ahead of training need a correction for stale tokens
  engine           seed: the in-process sampler's PRNG seed; rollout.concurrency, .max_context_
                   tokens: what an engine must serve; batch.prefix_multiple: the shared prefix
Arguments, not keys, give the rest: the mesh and vocabulary size (packing_config), the model
(engine), the restricted output vocabulary (step configs, engine: `output_vocab` builds it
once per run) and the run directory (judge_config).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

from carr_common.sections import from_section
from carr_jax.jobs.pipeline import PipelineConfig
from carr_jax.model import sharding
from carr_jax.model.config import ARCHITECTURE, Qwen3Config, get_preset
from carr_jax.model.restricted_vocab import RestrictedVocab
from carr_jax.rl import loss as loss_lib
from carr_jax.rl import optim
from carr_jax.rl import packing
from carr_jax.rl import rewards
from carr_jax.rl import train_step as ts
from carr_jax.runs import checkpointing as ckpt_lib

ENGINES = ("jax", "sglang")


@dataclasses.dataclass(frozen=True)
class EngineConfig:
  """The rollout engine and what runs beside it (the `rollout` section)."""
  engine: str = "jax"  # "jax" (in-process sampler) | "sglang" (HTTP server(s))
  sglang_urls: str = ""  # comma-separated SGLang base URLs (engine=sglang)
  sglang_idle_timeout: float = 120.0  # s a weight sync waits for idle to flush the old cache
  sync_dir: str = ""  # HF exports for SGLang, latest kept ("" = workdir/sync)
  tokenizer_dir: str = ""  # Qwen3 tokenizer dir ("" = carr_jax.fetch_tokenizer's cache)
  max_batch: int = 64  # in-process engine: requests generated together
  engine_dtype: str = ""  # in-process engine: compute dtype ("" = model.compute_dtype;
  # "bfloat16" samples at a serving engine's precision against a float32 trainer)

  def __post_init__(self):
    if self.engine not in ENGINES:
      raise ValueError(f"rollout.engine must be one of {ENGINES}, got {self.engine!r}")
    if self.engine == "sglang" and not self.urls:
      raise ValueError("rollout.sglang_urls is required with rollout.engine='sglang'")
    if self.max_batch < 1:
      raise ValueError(f"rollout.max_batch must be >= 1, got {self.max_batch}")
    if self.engine_dtype not in ("", "float32", "bfloat16"):
      raise ValueError("rollout.engine_dtype must be '', 'float32' or 'bfloat16', got "
                       f"{self.engine_dtype!r}")
    if self.engine_dtype and self.engine != "jax":
      raise ValueError("rollout.engine_dtype sets the in-process engine's precision; an SGLang "
                       "server's is set where it is launched")

  @property
  def urls(self) -> list[str]:
    return [u.strip() for u in self.sglang_urls.split(",") if u.strip()]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """The RL loop's length and held-out evaluations (the `train` section)."""
  num_steps: int = 100  # optimizer steps (capped by data.epochs)
  eval_every: int = 20  # evaluate on the held-out split every N steps (0 = never)
  eval_questions: int = 32  # held-out questions per evaluation
  eval_samples: int = 1  # samples per eval question
  text_samples: int = 2  # rendered trajectories written as TensorBoard text per eval

  def __post_init__(self):
    if self.num_steps < 0 or self.eval_every < 0 or self.text_samples < 0:
      raise ValueError("train.num_steps, .eval_every and .text_samples must be >= 0")
    if self.eval_every and min(self.eval_questions, self.eval_samples) < 1:
      raise ValueError(f"train.eval_every={self.eval_every} needs train.eval_questions and "
                       f".eval_samples >= 1")


@dataclasses.dataclass(frozen=True)
class SFTConfig:
  """The SFT job's data and length (the `sft` section, which only SFT configs have)."""
  data: str = "expert"  # comma-separated trajectory JSONL files, or "expert": the scripted
  # episodes of the in-process task source (data.source; the laboratory's expert takes its keys
  # from lab.configs.sft_section)
  epochs: int = 3  # passes over the examples (paper: 3)
  batch_size: int = 16  # trajectories per optimizer step (paper: 16)
  num_steps: int = 0  # stop after this many steps (0 = all epochs)
  min_outcome: float = 0.0  # keep dumped rollouts whose judge outcome is >= this (0 = all)
  default_tools: bool = True  # records without tools get the browser schemas in their prompt

  def __post_init__(self):
    if self.epochs < 1 or self.batch_size < 1 or self.num_steps < 0:
      raise ValueError(f"sft.epochs and .batch_size must be >= 1 and .num_steps >= 0, got "
                       f"{self.epochs}, {self.batch_size}, {self.num_steps}")


def sft_config(config: Any) -> SFTConfig:
  return from_section(SFTConfig, config.sft)


def train_config(config: Any) -> TrainConfig:
  return from_section(TrainConfig, config.train)


def checkpoint_config(config: Any) -> ckpt_lib.CheckpointConfig:
  return from_section(ckpt_lib.CheckpointConfig, config.checkpoint)


def mesh_config(config: Any) -> sharding.MeshConfig:
  return from_section(sharding.MeshConfig, config.mesh)


OUTPUT_VOCABS = ("full", "task")


@dataclasses.dataclass(frozen=True)
class ModelSource:
  """Where the model comes from and how its outputs are used (the `model` section's keys that
  are no Qwen3Config field)."""
  preset: str = "tiny_dense"  # carr_jax.model.config preset name
  hf_path: str = ""  # HF directory to initialise from ("" = random init / checkpoint)
  output_vocab: str = "full"  # "full" | "task": the softmax over the ids the in-process task
  # source's tasks can need only (its output_ids)
  routing_replay: bool = False  # RL of a mixture of experts: the trainer's MoE layers use the
  # experts the rollout engine chose per token (rollout/routes.py, carr_jax.rl.train_step);
  # SFT and evaluation never do

  def __post_init__(self):
    if self.output_vocab not in OUTPUT_VOCABS:
      raise ValueError(f"model.output_vocab must be 'full' or 'task', got {self.output_vocab!r}")


def model_source(config: Any) -> ModelSource:
  return from_section(ModelSource, config.model)


def model_config(config: Any) -> Qwen3Config:
  """The architecture of `model.preset`, or of the HF directory `model.hf_path` when set."""
  m = model_source(config)
  if m.hf_path:
    from carr_jax.model.hf_config import read_hf_config
    arch = read_hf_config(m.hf_path)
  else:
    arch = get_preset(m.preset)
  cfg = from_section(Qwen3Config, config.model,
                     **{name: getattr(arch, name) for name in ARCHITECTURE})
  if config.batch.prefix_multiple > 0 and cfg.is_moe:
    raise ValueError("batch.prefix_multiple > 0 (a shared prefix) is for dense models; this "
                     "model is a mixture of experts: set it to 0")
  if m.routing_replay and not cfg.is_moe:
    raise ValueError("model.routing_replay replays a mixture of experts' routes; this model "
                     "is dense: set it to False")
  return cfg


def output_vocab(config: Any) -> RestrictedVocab | None:
  """`model.output_vocab` -> the run's restricted output vocabulary (None = full): "task",
  the token ids the in-process task source's tasks can need (its `output_ids`)."""
  vocab = model_source(config).output_vocab
  if vocab == "full":
    return None
  if engine_config(config).engine != "jax":
    raise ValueError(f"model.output_vocab={vocab!r} needs rollout.engine='jax' (SGLang samples "
                     "from the full vocabulary)")
  from carr_jax.jobs import tasks as data_lib
  from rollout.chat import ChatFormat
  data_cfg = data_lib.data_config(config)
  if data_cfg.source == "jsonl":
    raise ValueError(f"model.output_vocab={vocab!r} needs an in-process data.source, not jsonl")
  source = data_lib.task_source(data_cfg)  # the same ids for SFT and RL
  return RestrictedVocab(source.output_ids(config, ChatFormat(tokenizer(config))))


def optim_config(config: Any) -> optim.OptimConfig:
  return from_section(optim.OptimConfig, config.optim)


def loss_config(config: Any) -> loss_lib.LossConfig:
  return from_section(loss_lib.LossConfig, config.loss)


def pipeline_config(config: Any) -> PipelineConfig:
  """k = `rollout.max_staleness` >= 1 trains on tokens an older policy sampled: it needs a
  correction for them, the clipped ratio against the sampler's log-probs
  (`loss.old_logprobs="rollout"`) or "trainer" with `importance_sampling="icepop"`."""
  pipe, loss = from_section(PipelineConfig, config.rollout), loss_config(config)
  if pipe.max_staleness and loss.old_logprobs == "trainer" and loss.importance_sampling == "none":
    raise ValueError("rollout.max_staleness >= 1 trains on tokens an older policy sampled: set "
                     "loss.old_logprobs='rollout' (or loss.importance_sampling='icepop')")
  return pipe


def engine_config(config: Any) -> EngineConfig:
  return from_section(EngineConfig, config.rollout)


def step_config(config: Any, vocab: RestrictedVocab | None = None) -> ts.StepConfig:
  """batch.skip_zero_gradient keeps the gradient only when a zero-advantage token has none:
  no KL term (loss.kl_coef) and no router aux loss (the model's)."""
  step = from_section(
      ts.StepConfig, config.batch,
      temperature=config.rollout.temperature or 1.0,  # greedy sampling (0) is read as 1
      loss_positions=config.batch.loss_positions_multiple > 0,
      on_policy=loss_config(config).old_logprobs == "trainer",
      shared_prefix=config.batch.prefix_multiple > 0,
      routing_replay=model_source(config).routing_replay, vocab=vocab)
  if step.skip_zero_gradient:
    cfg = model_config(config)
    if loss_config(config).kl_coef or (cfg.is_moe and cfg.router_aux_loss_coef):
      raise ValueError("batch.skip_zero_gradient keeps the gradient only when zero-advantage "
                       "tokens have none: set loss.kl_coef=0 and no router aux loss")
  return step


def sft_step_config(config: Any, vocab: RestrictedVocab | None = None):
  from carr_jax.coldstart.step import SFTStepConfig
  return from_section(SFTStepConfig, config.batch, vocab=vocab,
                      shared_prefix=config.batch.prefix_multiple > 0)


def reward_config(config: Any) -> rewards.RewardConfig:
  return from_section(rewards.RewardConfig, config.reward)


def packing_config(config: Any, mesh: Any, vocab_size: int) -> packing.PackingConfig:
  """RL: raises at start when an episode may not fit the longest row and cutting is not meant."""
  longest = max(config.batch.row_lengths)
  if ("sft" not in config and config.batch.overflow != "truncate"
      and config.rollout.max_context_tokens > longest):
    raise ValueError(f"rollout.max_context_tokens={config.rollout.max_context_tokens} exceeds the "
                     f"longest of batch.row_lengths ({longest}): lengthen the rows, or set "
                     "batch.overflow='truncate' to cut such episodes")
  shards = mesh.shape["data"] * mesh.shape["fsdp"] * mesh.shape["expert"]
  routes = None
  if model_source(config).routing_replay and "sft" not in config:
    cfg = model_config(config)
    routes = (cfg.num_layers, cfg.num_experts_per_tok)
  return from_section(packing.PackingConfig, config.batch, vocab_size=vocab_size,
                      row_multiple=shards * config.batch.micro_batches, routes=routes)


def tokenizer(config: Any):
  """The Qwen3 tokenizer: `rollout.tokenizer_dir`, else fetched by carr_jax.model.tokenizer."""
  from transformers import AutoTokenizer

  from carr_jax.model.tokenizer import ensure_tokenizer
  directory = engine_config(config).tokenizer_dir or str(ensure_tokenizer())
  return AutoTokenizer.from_pretrained(directory)


def rollout_config(config: Any):
  from rollout.agent import RolloutConfig
  return from_section(RolloutConfig, config.rollout)


def engine(config: Any, params: Any, cfg: Qwen3Config, weight_version: str,
           vocab: RestrictedVocab | None = None):
  """The rollout engine: in-process JAX sampler (over `vocab`'s ids when given), or SGLang
  server(s) over HTTP."""
  e, r = engine_config(config), config.rollout
  if e.engine == "jax":
    from carr_jax.model.engine import JaxEngine
    cfg = cfg.replace(compute_dtype=e.engine_dtype) if e.engine_dtype else cfg
    return JaxEngine(params, cfg, weight_version=weight_version, max_batch=e.max_batch,
                     seed=config.seed, max_total_len=r.max_context_tokens, vocab=vocab,
                     prefix_multiple=config.batch.prefix_multiple,
                     record_routes=model_source(config).routing_replay)
  if vocab is not None:
    raise ValueError("model.output_vocab must be 'full' with rollout.engine='sglang'")
  from rollout.engines.sglang import SGLangEngine
  # An episode has at most one request in flight: the engine must not cap episodes below
  # rollout.concurrency.
  replay = model_source(config).routing_replay
  return SGLangEngine(e.urls, vocab_size=cfg.vocab_size, max_concurrency=r.concurrency,
                      idle_timeout=e.sglang_idle_timeout,
                      route_shape=((cfg.num_layers, cfg.num_experts_per_tok, cfg.num_experts)
                                   if replay else None))


def tool_backend(config: Any, corpus: list[dict]):
  t = config.tools
  if t.backend == "corpus":
    from rollout.tools.corpus import CorpusBackend
    if not corpus:
      raise ValueError("tools.backend='corpus' needs pages: set data.corpus_path (or use an "
                       "in-process task source)")
    return CorpusBackend.from_records(corpus)
  if t.backend == "web":
    from rollout.tools.web import WebBackend, WebConfig
    return WebBackend(from_section(WebConfig, t))
  raise ValueError(f"tools.backend must be 'corpus' or 'web', got {t.backend!r}")


def judge_config(config: Any, workdir: str):
  from judge import JudgeConfig
  cache = config.judge.cache_path or os.path.join(workdir, "judge_cache.sqlite")
  return from_section(JudgeConfig, config.judge, cache_path=cache)


def judge(config: Any, workdir: str):
  from judge import Judge
  return Judge(judge_config(config, workdir))
