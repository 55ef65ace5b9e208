"""The SFT step: token-mean cross-entropy on the tokens the policy generates, jitted and sharded.

    step = make_sft_step(cfg, SFTStepConfig(), tx, mesh, shardings)
    batch, stats = make_batch(examples, pack_cfg, loss_multiple, step_cfg.vocab)
    state, metrics = step(state, batch)

Objective: token-mean cross-entropy over the tokens the policy generates (loss mask 1, the
RL mask semantics), normalized by the number of such tokens in the WHOLE global batch, like
the C-GRPO loss (so micro-batches and devices change nothing; tests/lab/test_sft.py). Logits are
built only at the loss positions (`packing.loss_positions`, `batch.loss_positions_multiple`,
`train_step.target_logprobs`), which is the whole unembedding saving for trajectories where
most tokens are tool observations. With a restricted output vocabulary (`SFTStepConfig.vocab`,
carr_jax/model/restricted_vocab.py) every batch's loss tokens must lie in it (`make_batch`
checks).
The step is the RL step's machinery (`train_step.Objective`): sharded state, micro-batches,
the optimizer of `optim.make_optimizer` (paper SFT: lr 4e-5).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from carr_jax.model import restricted_vocab
from carr_jax.model.config import Qwen3Config
from carr_jax.model.restricted_vocab import RestrictedVocab
from carr_jax.rl import packing
from carr_jax.rl import train_step as ts

SFT_BATCH_KEYS = ("tokens", "positions", "segment_ids", "targets", "loss_index", "loss_valid")


@dataclasses.dataclass(frozen=True)
class SFTStepConfig:
  micro_batches: int = 1  # as StepConfig's (the same key, batch.micro_batches)
  logprob_chunk: int = 1024  # as StepConfig's (the same key, batch.logprob_chunk)
  shared_prefix: bool = False  # as StepConfig's: the batch holds prefix_tokens
  vocab: RestrictedVocab | None = None  # the loss's output vocabulary (None: all ids)


def sft_batch_keys(step_cfg: SFTStepConfig) -> tuple[str, ...]:
  """The batch keys the SFT step reads."""
  return SFT_BATCH_KEYS + (ts.PREFIX_KEYS if step_cfg.shared_prefix else ())


def loss_sums(params, cfg: Qwen3Config, step_cfg: SFTStepConfig, batch: dict):
  """(summed NLL, loss tokens, summed entropy, `moe.RouterOut`) of one (micro-)batch.

  batch: tokens / positions / segment_ids / targets [R, S]; loss_index [R, K] positions of
  the loss tokens in each row, loss_valid [R, K] 1.0 on real entries (0 on padding).
  """
  logp, entropy, aux = ts.target_logprobs(params, cfg, batch, 1.0, step_cfg.logprob_chunk,
                                          gather=True, vocab=step_cfg.vocab)  # [R, K] each
  valid = batch["loss_valid"]
  return (-jnp.sum(logp * valid), jnp.sum(valid), jnp.sum(entropy * valid), aux)


def sft_objective(cfg: Qwen3Config, step_cfg: SFTStepConfig) -> ts.Objective:
  """Token-mean cross-entropy over the loss tokens of the whole global batch."""
  def sums(params, mb):
    nll, tokens, entropy, aux = loss_sums(params, cfg, step_cfg, mb)
    return nll, {"nll": nll, "tokens": tokens, "entropy": entropy}, aux

  def metrics(stats, total):
    return {"loss": stats["nll"] / total, "tokens": stats["tokens"],
            "entropy": stats["entropy"] / total}
  return ts.Objective(
      sums=sums, total=lambda b: jnp.maximum(jnp.sum(b["loss_valid"]), 1.0),
      empty=lambda: {k: jnp.zeros((), jnp.float32) for k in ("nll", "tokens", "entropy")},
      combine=lambda a, b: jax.tree.map(jnp.add, a, b), metrics=metrics)


def sft_step_fn(cfg: Qwen3Config, step_cfg: SFTStepConfig, tx):
  """The pure step `(state, batch) -> (state, metrics)`: the RL trainer's step
  (`train_step.objective_step_fn`) on the SFT objective; `make_sft_step` jits it."""
  return ts.objective_step_fn(sft_objective(cfg, step_cfg), tx, step_cfg.micro_batches)


def make_sft_step(cfg: Qwen3Config, step_cfg: SFTStepConfig, tx, mesh, shardings):
  """The jitted SFT step, built as the RL one (`train_step.make_step`: explicit shardings,
  the state donated, host batches assembled into global arrays on every process)."""
  return ts.make_step(sft_step_fn(cfg, step_cfg, tx), mesh, shardings, sft_batch_keys(step_cfg))


def make_batch(examples, pack_cfg: packing.PackingConfig, loss_multiple: int = 128,
               vocab: RestrictedVocab | None = None) -> tuple[dict, dict]:
  """Packs examples into [R, S] rows plus loss positions. Returns (batch, packing stats).

  `loss_multiple` 0 means K = S (still only the loss slots, padded to the row length). With
  a restricted `vocab`, every packed loss token must be in it (ValueError). With
  `pack_cfg.prefix_multiple` the rows' shared prefix is cut off into "prefix_tokens"
  (`packing.split_shared_prefix`).
  """
  records = [{"token_ids": e["token_ids"], "loss_mask": e["loss_mask"],
              "rollout_logprobs": [0.0] * len(e["token_ids"])} for e in examples]
  packed = packing.pack_trajectories(records, np.ones(len(records)), pack_cfg)
  arrays = packed.arrays()
  restricted_vocab.check_scored(vocab, arrays["targets"], arrays["loss_mask"])
  if pack_cfg.prefix_multiple:
    arrays = packing.split_shared_prefix(arrays, pack_cfg.prefix_multiple)
  index, valid = packing.loss_positions(arrays["loss_mask"],
                                        loss_multiple or arrays["loss_mask"].shape[1])
  keys = ("tokens", "positions", "segment_ids", "targets", "prefix_tokens")
  batch = {k: arrays[k] for k in keys if k in arrays}
  batch.update(loss_index=index, loss_valid=valid)
  return batch, {**packed.stats(), "prefix": len(arrays.get("prefix_tokens", ()))}
