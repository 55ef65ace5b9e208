"""Cold-start SFT on multi-turn trajectories: `python -m carr_jax.sft --config ... --workdir DIR`.

    python -m carr_jax.sft --config configs/sft_demo_cpu.py --workdir workdir/sft
    python -m carr_jax.train --config configs/demo_cpu.py --workdir workdir/rl \\
        --config.checkpoint.init_dir=workdir/sft/checkpoints        # RL from the SFT policy

Data (`sft.data`): comma-separated JSONL files of trajectories in any shape
`carr_jax.sft_data` accepts (our rollouts or expert episodes, judge-format histories, HF chat
messages, DeepDive `conversations`), or "expert": the scripted expert (`carr_jax.expert`)
solves the training questions of `config.data` (the synthetic world) in-process.

Objective: token-mean cross-entropy over the tokens the policy generates (loss mask 1, the
RL mask semantics), normalized by the number of such tokens in the WHOLE global batch, like
the C-GRPO loss (so micro-batches and devices change nothing; tests/test_sft.py). Logits are
built only at the loss positions (`packing.loss_positions`, `batch.loss_positions_multiple`,
`train_step.target_logprobs`), which is the whole unembedding saving for trajectories where
most tokens are tool observations. With a restricted output vocabulary (`model.output_vocab`,
carr_jax/output_vocab.py) every batch's loss tokens must lie in it (`make_batch` checks).

Everything else is the RL trainer's machinery: model, optimizer (`train_step.make_optimizer`,
paper SFT: lr 4e-5), sharded state (`train_step.create_train_state`), packing into bucketed
[R, S] rows (`carr_jax.packing`, `batch.row_lengths`), the epoch-shuffled resumable loader
(`carr_jax.data.TaskLoader`, `sft.batch_size` trajectories per step), checkpoints with the
resume order of `carr_jax.checkpointing`, TensorBoard metrics (`train/`, `perf/`).
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from carr_jax import cli
from carr_jax import components
from carr_jax import data as data_lib
from carr_jax import metrics as metrics_lib
from carr_jax import output_vocab
from carr_jax import packing
from carr_jax import sft_data
from carr_jax import train_step as ts
from carr_jax.model_config import Qwen3Config

logger = logging.getLogger(__name__)

SFT_BATCH_KEYS = ("tokens", "positions", "segment_ids", "targets", "loss_index", "loss_valid")


@dataclasses.dataclass(frozen=True)
class SFTStepConfig:
  micro_batches: int = 1  # slices of the global batch run one after another in the step
  logprob_chunk: int = 1024  # loss positions per chunk of the fused unembed + log-softmax


def loss_sums(params, cfg: Qwen3Config, step_cfg: SFTStepConfig, batch: dict):
  """(summed NLL, loss tokens, summed entropy, router aux loss) of one (micro-)batch.

  batch: tokens / positions / segment_ids / targets [R, S]; loss_index [R, K] positions of
  the loss tokens in each row, loss_valid [R, K] 1.0 on real entries (0 on padding).
  """
  logp, entropy, aux = ts.target_logprobs(params, cfg, batch, 1.0, step_cfg.logprob_chunk,
                                          gather=True)  # [R, K] each
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
  return ts.make_step(sft_step_fn(cfg, step_cfg, tx), mesh, shardings, SFT_BATCH_KEYS)


def make_batch(examples, pack_cfg: packing.PackingConfig, loss_multiple: int = 128,
               cfg: Qwen3Config | None = None) -> tuple[dict, dict]:
  """Packs examples into [R, S] rows plus loss positions. Returns (batch, packing stats).

  `loss_multiple` 0 means K = S (still only the loss slots, padded to the row length). With
  `cfg`, every packed loss token must be in its restricted output vocabulary (ValueError).
  """
  records = [{"token_ids": e["token_ids"], "loss_mask": e["loss_mask"],
              "rollout_logprobs": [0.0] * len(e["token_ids"])} for e in examples]
  packed = packing.pack_trajectories(records, np.ones(len(records)), pack_cfg)
  arrays = packed.arrays()
  if cfg is not None:
    output_vocab.check_output_vocab(cfg, arrays["targets"], arrays["loss_mask"])
  index, valid = packing.loss_positions(arrays["loss_mask"],
                                        loss_multiple or arrays["loss_mask"].shape[1])
  batch = {k: arrays[k] for k in ("tokens", "positions", "segment_ids", "targets")}
  batch.update(loss_index=index, loss_valid=valid)
  return batch, packed.stats()


def sft_examples(config, fmt, workdir: str) -> list[dict]:
  """SFT examples from `sft.data` (files, or "expert" on the configured synthetic world)."""
  s = config.sft
  if s.data == "expert":
    from carr_jax.expert import ExpertConfig, expert_trajectories
    from rollout.tools.corpus import CorpusBackend
    from rollout.trajectory import write_jsonl
    train, _, corpus = data_lib.load_tasks(config.data)
    train = [r for r in train if r["metadata"]["gold"]["hops"] <= s.expert_max_hops]
    trajs = asyncio.run(expert_trajectories(
        train, CorpusBackend.from_records(corpus), fmt,
        ExpertConfig(search_results=s.expert_search_results, use_find=s.expert_find,
                     answer=s.expert_answer, known_fraction=s.expert_known_fraction),
        s.expert_samples))
    if jax.process_index() == 0:
      write_jsonl(os.path.join(workdir, "expert_trajectories.jsonl"), trajs)
    return [{"id": t["prompt_id"], "token_ids": t["token_ids"], "loss_mask": t["loss_mask"]}
            for t in trajs]
  examples = []
  for path in (p.strip() for p in s.data.split(",") if p.strip()):
    found, skipped = sft_data.load_examples(path, fmt, min_outcome=s.min_outcome,
                                            default_tools=s.default_tools)
    logger.info("%s: %d examples, %d filtered out", path, len(found), skipped)
    examples += found
  if not examples:
    raise sft_data.SFTDataError(f"sft.data={s.data!r} gave no example with a loss token")
  return examples


class SFTTrainer:
  """The parts of an SFT run; `run()` is the loop. Built by `train_sft`."""

  def __init__(self, config, workdir: str):
    from carr_jax.trainer import setup_run  # the RL trainer's set-up and resume order
    from rollout.chat import ChatFormat
    self.config, self.workdir = config, os.path.abspath(workdir)
    os.makedirs(self.workdir, exist_ok=True)
    fmt = ChatFormat(components.tokenizer(config))
    examples = sft_examples(config, fmt, self.workdir)
    s = config.sft
    if not 1 <= s.batch_size <= len(examples):
      raise sft_data.SFTDataError(f"sft.batch_size={s.batch_size} must be in [1, "
                                  f"{len(examples)}] (the number of examples)")
    self.loader = data_lib.TaskLoader(examples, s.batch_size, config.seed, s.epochs)
    self.num_steps = (self.loader.total_steps if s.num_steps <= 0
                      else min(s.num_steps, self.loader.total_steps))
    run = setup_run(config, self.workdir)
    self.cfg, self.pack_cfg, self.checkpointer = run.cfg, run.pack_cfg, run.checkpointer
    self.state, self.start_step = run.state, run.start_step
    if run.data is not None:
      self.loader.position = run.data["loader"]
    self.step = make_sft_step(self.cfg, SFTStepConfig(config.batch.micro_batches,
                                                      config.batch.logprob_chunk),
                              run.tx, run.mesh, run.shardings)
    self.writer = metrics_lib.MetricsWriter(os.path.join(self.workdir, "tb"))
    logger.info("SFT: %d examples, %d steps of %d (from step %d)", len(examples),
                self.num_steps, s.batch_size, self.start_step)

  def run(self) -> list[dict]:
    if self.start_step == 0:
      self.writer.hparams(self.config.to_dict())
    history = []
    progress = metrics_lib.Progress(self.start_step, self.num_steps)
    for step in range(self.start_step, self.num_steps):
      t0 = time.perf_counter()
      batch, stats = make_batch(self.loader.next(), self.pack_cfg,
                                self.config.batch.loss_positions_multiple, self.cfg)
      self.state, out = self.step(self.state, batch)
      metrics = {f"train/{k}": float(v) for k, v in jax.device_get(out).items()}
      metrics_lib.check_finite(metrics, step + 1, ["train/loss", "train/grad_norm"])
      elapsed = time.perf_counter() - t0
      metrics.update({f"train/packing_{k}": float(v) for k, v in stats.items()})
      # Loss tokens per second, as in RL (carr_jax/trainer.py); packed slots: train/packing_*.
      metrics.update({"perf/step_time_s": elapsed,
                      "perf/train_tokens_per_s": stats["loss_tokens"] / elapsed})
      self.writer.scalars(step + 1, metrics)
      self.writer.flush()
      print(progress.line(step + 1, metrics), flush=True)
      self.checkpointer.save(step + 1, self.state, data={"loader": self.loader.position},
                             meta={"config": self.config.to_dict(), "weight_version": step + 1},
                             force=step + 1 == self.num_steps)
      history.append(metrics)
    return history

  def close(self) -> None:
    self.checkpointer.close()
    self.writer.close()


def train_sft(config, workdir: str) -> list[dict]:
  """Runs (or resumes) SFT in `workdir`; returns the metrics of the steps run."""
  trainer = SFTTrainer(config, workdir)
  try:
    return trainer.run()
  finally:
    trainer.close()


def parser() -> argparse.ArgumentParser:
  p = cli.parser("python -m carr_jax.sft", __doc__.split("\n")[0],
                 config="SFT config, e.g. configs/sft_demo_cpu.py or "
                 "configs/sft_qwen3_4b.py:tpu.")
  p.add_argument("--workdir", required=True,
                 help="run directory (checkpoints, TensorBoard, HF exports); a rerun resumes")
  p.add_argument("--multihost", action="store_true",
                 help="call jax.distributed.initialize() first (one process per host)")
  return p


def closing_summary(history: list[dict], workdir: str) -> list[str]:
  """The lines an SFT run ends with: steps run, loss at both ends, where the outputs are."""
  lines = [f"sft: {len(history)} steps run by this process"]
  if history:
    lines.append(f"loss: first step {history[0]['train/loss']:.4f} -> last step "
                 f"{history[-1]['train/loss']:.4f}")
  return lines + metrics_lib.output_lines(workdir)


def _train(args: argparse.Namespace) -> None:
  if args.multihost or os.environ.get("JAX_COORDINATOR_ADDRESS"):
    jax.distributed.initialize()
  history = train_sft(args.config, args.workdir)
  if jax.process_index() == 0:
    print("\n".join(closing_summary(history, os.path.abspath(args.workdir))), flush=True)


def main(argv: list[str] | None = None) -> int:
  return cli.run(_train, parser(), argv)


if __name__ == "__main__":
  sys.exit(main())
