"""Builds the trainer's parts from an ml_collections config: one function per part.

Each builder reads only its own config section, so the mapping from documented keys
(configs/base.py) to the dataclass configs of the rooms lives in one place.
"""
from __future__ import annotations

import os
from typing import Any

from carr_jax import loss as loss_lib
from carr_jax import packing
from carr_jax import rewards
from carr_jax import train_step as ts
from carr_jax.model_config import Qwen3Config, get_preset


def model_config(config: Any) -> Qwen3Config:
  m = config.model
  cfg = get_preset(m.preset, param_dtype=m.param_dtype, compute_dtype=m.compute_dtype,
                   remat=m.remat, moe_impl=m.moe_impl, attention=m.attention)
  if m.hf_path:  # the HF directory's architecture wins; our dtype/remat policy is kept
    from carr_jax.hf_config import read_hf_config
    cfg = read_hf_config(m.hf_path, param_dtype=m.param_dtype, compute_dtype=m.compute_dtype,
                         remat=m.remat, moe_impl=m.moe_impl, attention=m.attention)
  return cfg.replace(output_ids=output_ids(config))


def output_ids(config: Any) -> tuple[int, ...]:
  """`model.output_vocab` -> `Qwen3Config.output_ids` (carr_jax.output_vocab); () = full."""
  vocab = config.model.output_vocab
  if vocab == "full":
    return ()
  if vocab != "world":
    raise ValueError(f"model.output_vocab must be 'full' or 'world', got {vocab!r}")
  if config.rollout.engine != "jax":
    raise ValueError(f"model.output_vocab={vocab!r} needs rollout.engine='jax' (SGLang samples "
                     "from the full vocabulary)")
  if config.data.source != "world":
    raise ValueError(f"model.output_vocab={vocab!r} needs data.source='world'")
  from carr_jax import data as data_lib
  from carr_jax.output_vocab import world_output_ids
  from rollout.chat import ChatFormat
  fmt, ids = ChatFormat(tokenizer(config)), set()
  data_cfg = config.data.copy_and_resolve_references()
  for k in range(1 + config.model.output_vocab_worlds):  # the same ids for SFT and RL
    data_cfg.world_seed = config.data.world_seed + k
    ids.update(world_output_ids(*data_lib.load_tasks(data_cfg), fmt))
  return tuple(sorted(ids))


def optim_config(config: Any) -> ts.OptimConfig:
  o = config.optim
  return ts.OptimConfig(learning_rate=o.learning_rate, warmup_steps=o.warmup_steps, b1=o.b1,
                        b2=o.b2, eps=o.eps, weight_decay=o.weight_decay,
                        grad_clip_norm=o.grad_clip_norm)


def loss_config(config: Any) -> loss_lib.LossConfig:
  lc = config.loss
  if lc.old_logprobs not in ("trainer", "rollout"):
    raise ValueError(f"loss.old_logprobs must be 'trainer' or 'rollout', got {lc.old_logprobs!r}")
  if lc.old_logprobs == "rollout" and lc.importance_sampling != "none":
    raise ValueError("loss.importance_sampling compares trainer and rollout log-probs; it "
                     "needs loss.old_logprobs='trainer'")
  return loss_lib.LossConfig(eps_low=lc.eps_low, eps_high=lc.eps_high,
                             importance_sampling=lc.importance_sampling, is_low=lc.is_low,
                             is_high=lc.is_high, kl_coef=lc.kl_coef,
                             kl_estimator=lc.kl_estimator)


def step_config(config: Any) -> ts.StepConfig:
  return ts.StepConfig(micro_batches=config.batch.micro_batches,
                       temperature=config.rollout.temperature or 1.0,
                       logprob_chunk=config.batch.logprob_chunk,
                       loss_positions=config.batch.loss_positions_multiple > 0)


def reward_config(config: Any) -> rewards.RewardConfig:
  r = config.reward
  return rewards.RewardConfig(mode=r.mode, alpha=r.alpha, scale_by_std=r.scale_by_std,
                              filter_zero_gradient=r.filter_zero_gradient)


def packing_config(config: Any, mesh: Any, vocab_size: int) -> packing.PackingConfig:
  shards = mesh.shape["data"] * mesh.shape["fsdp"] * mesh.shape["expert"]
  return packing.PackingConfig(row_lengths=tuple(config.batch.row_lengths),
                               row_multiple=shards * config.batch.micro_batches,
                               overflow=config.batch.overflow, vocab_size=vocab_size)


def tokenizer(config: Any):
  """The Qwen3 tokenizer: `rollout.tokenizer_dir`, else fetched by carr_jax.fetch_tokenizer."""
  from transformers import AutoTokenizer

  from carr_jax.fetch_tokenizer import ensure_tokenizer
  directory = config.rollout.tokenizer_dir or str(ensure_tokenizer())
  return AutoTokenizer.from_pretrained(directory)


def rollout_config(config: Any):
  from rollout.agent import RolloutConfig
  r = config.rollout
  return RolloutConfig(temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
                       max_turn_tokens=r.max_turn_tokens, max_context_tokens=r.max_context_tokens,
                       max_tool_calls=r.max_tool_calls, stop_on_ill_formed=r.stop_on_ill_formed,
                       concurrency=r.concurrency)


def engine(config: Any, params: Any, cfg: Qwen3Config, weight_version: str):
  """The rollout engine: in-process JAX sampler, or SGLang server(s) over HTTP."""
  r = config.rollout
  if r.engine == "jax":
    from rollout.engines.jax_engine import JaxEngine
    return JaxEngine(params, cfg, weight_version=weight_version, max_batch=r.max_batch,
                     seed=config.seed, max_total_len=r.max_context_tokens)
  if r.engine == "sglang":
    if cfg.output_ids:
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
      raise ValueError("tools.backend='corpus' needs pages: set data.corpus_path (or use the "
                       "synthetic world)")
    return CorpusBackend.from_records(corpus)
  if t.backend == "web":
    from rollout.tools.web import WebBackend, WebConfig
    endpoints = {k: getattr(t, k) for k in ("search_url", "reader_url") if getattr(t, k)}
    return WebBackend(WebConfig(search_key_env=t.search_key_env, reader_key_env=t.reader_key_env,
                                allow_private=t.allow_private, **endpoints))
  raise ValueError(f"tools.backend must be 'corpus' or 'web', got {t.backend!r}")


def judge(config: Any, workdir: str):
  from judge import Judge, JudgeConfig
  j = config.judge
  cache = j.cache_path or os.path.join(workdir, "judge_cache.sqlite")
  return Judge(JudgeConfig(backend=j.backend, base_url=j.base_url, model=j.model,
                           api_key_env=j.api_key_env, concurrency=j.concurrency,
                           timeout=j.timeout, retries=j.retries, max_reasks=j.max_reasks,
                           cache_path=cache))
