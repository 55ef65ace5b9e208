"""Builds the trainer's parts from an ml_collections config: one function per part.

Each dataclass config comes from one section of the config (`carr_common.sections.
from_section`): field `f` of the dataclass is the key `<section>.<f>`, except the fields its
builder computes, which the builder names with their reason. The field's default is the key's
one default: configs/base.py adds the key from the field (`add_fields`;
tests/repo/test_config_single_source.py).

A builder reads its own section (engine and tokenizer: rollout; tool_backend: tools) and, where
named here, other keys for a stated reason:
  output_vocab   rollout.engine, rollout.tokenizer_dir, data.source and the source's section:
                 model.output_vocab="task" needs the in-process engine and an in-process task
                 source, whose output ids it collects
  step_config    rollout.temperature: the loss divides logits by the sampling temperature
  engine         seed: the in-process sampler's PRNG seed
Arguments, not keys, give the rest: the mesh and vocabulary size (packing_config), the model
(engine), the restricted output vocabulary (step configs, engine: `output_vocab` builds it
once per run) and the run directory (judge_config).
"""
from __future__ import annotations

import os
from typing import Any

from carr_common.sections import from_section
from carr_jax.model.config import ARCHITECTURE, Qwen3Config, get_preset
from carr_jax.model.restricted_vocab import RestrictedVocab
from carr_jax.rl import loss as loss_lib
from carr_jax.rl import packing
from carr_jax.rl import rewards
from carr_jax.rl import train_step as ts

def model_config(config: Any) -> Qwen3Config:
  """The architecture of `model.preset`, or of the HF directory `model.hf_path` when set."""
  m = config.model
  if m.hf_path:
    from carr_jax.model.hf_config import read_hf_config
    arch = read_hf_config(m.hf_path)
  else:
    arch = get_preset(m.preset)
  cfg = from_section(Qwen3Config, m, **{name: getattr(arch, name) for name in ARCHITECTURE})
  if config.batch.prefix_multiple > 0 and cfg.is_moe:
    raise ValueError("batch.prefix_multiple > 0 (a shared prefix) is for dense models; this "
                     "model is a mixture of experts: set it to 0")
  return cfg


def output_vocab(config: Any) -> RestrictedVocab | None:
  """`model.output_vocab` -> the run's restricted output vocabulary (None = full): "task",
  the token ids the in-process task source's tasks can need (its `output_ids`)."""
  vocab = config.model.output_vocab
  if vocab == "full":
    return None
  if vocab != "task":
    raise ValueError(f"model.output_vocab must be 'full' or 'task', got {vocab!r}")
  if config.rollout.engine != "jax":
    raise ValueError(f"model.output_vocab={vocab!r} needs rollout.engine='jax' (SGLang samples "
                     "from the full vocabulary)")
  if config.data.source == "jsonl":
    raise ValueError(f"model.output_vocab={vocab!r} needs an in-process data.source, not jsonl")
  from carr_jax.jobs import tasks as data_lib
  from rollout.chat import ChatFormat
  source = data_lib.task_source(config.data)  # the same ids for SFT and RL
  return RestrictedVocab(source.output_ids(config, ChatFormat(tokenizer(config))))


def optim_config(config: Any) -> ts.OptimConfig:
  return from_section(ts.OptimConfig, config.optim)


def loss_config(config: Any) -> loss_lib.LossConfig:
  lc = config.loss
  if lc.old_logprobs not in ("trainer", "rollout"):
    raise ValueError(f"loss.old_logprobs must be 'trainer' or 'rollout', got {lc.old_logprobs!r}")
  if lc.old_logprobs == "rollout" and lc.importance_sampling != "none":
    raise ValueError("loss.importance_sampling compares trainer and rollout log-probs; it "
                     "needs loss.old_logprobs='trainer'")
  return from_section(loss_lib.LossConfig, lc)


def step_config(config: Any, vocab: RestrictedVocab | None = None) -> ts.StepConfig:
  return from_section(
      ts.StepConfig, config.batch,
      temperature=config.rollout.temperature or 1.0,  # greedy sampling (0) is read as 1
      loss_positions=config.batch.loss_positions_multiple > 0,
      on_policy=config.loss.old_logprobs == "trainer",
      shared_prefix=config.batch.prefix_multiple > 0, vocab=vocab)


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
  return from_section(packing.PackingConfig, config.batch, vocab_size=vocab_size,
                      row_multiple=shards * config.batch.micro_batches)


def tokenizer(config: Any):
  """The Qwen3 tokenizer: `rollout.tokenizer_dir`, else fetched by carr_jax.model.tokenizer."""
  from transformers import AutoTokenizer

  from carr_jax.model.tokenizer import ensure_tokenizer
  directory = config.rollout.tokenizer_dir or str(ensure_tokenizer())
  return AutoTokenizer.from_pretrained(directory)


def rollout_config(config: Any):
  from rollout.agent import RolloutConfig
  return from_section(RolloutConfig, config.rollout)


def engine(config: Any, params: Any, cfg: Qwen3Config, weight_version: str,
           vocab: RestrictedVocab | None = None):
  """The rollout engine: in-process JAX sampler (over `vocab`'s ids when given), or SGLang
  server(s) over HTTP."""
  r = config.rollout
  if r.engine == "jax":
    from carr_jax.model.engine import JaxEngine
    return JaxEngine(params, cfg, weight_version=weight_version, max_batch=r.max_batch,
                     seed=config.seed, max_total_len=r.max_context_tokens, vocab=vocab,
                     prefix_multiple=config.batch.prefix_multiple)
  if r.engine == "sglang":
    if vocab is not None:
      raise ValueError("model.output_vocab must be 'full' with rollout.engine='sglang'")
    if not r.sglang_urls:
      raise ValueError("rollout.sglang_urls is required with rollout.engine='sglang'")
    from rollout.engines.sglang import SGLangEngine
    # An episode has at most one request in flight: the engine must not cap episodes below
    # rollout.concurrency.
    return SGLangEngine([u.strip() for u in r.sglang_urls.split(",") if u.strip()],
                        vocab_size=cfg.vocab_size, max_concurrency=r.concurrency,
                        idle_timeout=r.sglang_idle_timeout)
  raise ValueError(f"rollout.engine must be 'jax' or 'sglang', got {r.engine!r}")


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
