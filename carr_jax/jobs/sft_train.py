"""Cold-start SFT on multi-turn trajectories: the job behind `python -m carr_jax.sft`.

    history = train_sft(config, workdir)   # runs (or resumes) SFT; metrics of each step run

Data (`sft.data`): comma-separated JSONL files of trajectories in any shape
`carr_jax.coldstart.examples` accepts (our rollouts or expert episodes, judge-format
histories, HF chat messages, DeepDive `conversations`), or "expert": the in-process task
source of `data.source` makes them (`expert_trajectories`; the CPU laboratory's scripted
expert solves the synthetic world's training questions).

The step and its objective are `carr_jax.coldstart.step`. The rest is shared with the RL job:
the epoch-shuffled resumable loader (`carr_jax.jobs.tasks.TaskLoader`, `sft.batch_size`
trajectories per step), and the run set-up and bookkeeping of `carr_jax.jobs.run_setup`: the
resume order of `carr_jax.runs.checkpointing`, TensorBoard metrics (`train/`, `perf/`, named as
in RL), the progress line, checkpoints with the redacted config.
"""
from __future__ import annotations

import logging
import os
import time

import jax

from carr_jax.coldstart import examples as sft_data
from carr_jax.coldstart.step import make_batch, make_sft_step
from carr_jax.jobs import components
from carr_jax.jobs import run_setup
from carr_jax.jobs import tasks as data_lib
from carr_jax.rl import packing

logger = logging.getLogger(__name__)


def sft_examples(config, fmt, workdir: str) -> list[dict]:
  """SFT examples from `sft.data` (files, or "expert": the task source's scripted episodes)."""
  s = components.sft_config(config)
  if s.data == "expert":
    from rollout.trajectory import write_jsonl
    trajs = data_lib.task_source(data_lib.data_config(config)).expert_trajectories(config, fmt)
    if jax.process_index() == 0:
      write_jsonl(os.path.join(workdir, "expert_trajectories.jsonl"), trajs)
    return [{"id": t["prompt_id"], "token_ids": t["token_ids"], "loss_mask": t["loss_mask"]}
            for t in trajs]
  if not s.data.strip():
    raise sft_data.SFTDataError("sft.data is empty: name trajectory JSONL files "
                                "(--config.sft.data=FILE[,FILE]) or 'expert'")
  examples = []
  for path in (p.strip() for p in s.data.split(",") if p.strip()):
    found, skipped = sft_data.load_examples(path, fmt, min_outcome=s.min_outcome,
                                            default_tools=s.default_tools)
    logger.info("%s: %d examples, %d filtered out", path, len(found), skipped)
    examples += found
  if not examples:
    raise sft_data.SFTDataError(f"sft.data={s.data!r} gave no example with a loss token")
  return examples


def check_examples_fit(examples: list[dict], pack_cfg: packing.PackingConfig) -> None:
  """Every example fits the longest packed row, unless batch.overflow="truncate" (cut them)."""
  slots = max(pack_cfg.row_lengths)
  over = [i for i, e in enumerate(examples) if len(e["token_ids"]) - 1 > slots]
  if over and pack_cfg.overflow != "truncate":
    raise sft_data.SFTDataError(
        f"{len(over)} of {len(examples)} SFT examples are longer than the longest of "
        f"batch.row_lengths ({slots} slots; example {over[0]} has "
        f"{len(examples[over[0]]['token_ids'])} tokens): lengthen the rows, or set "
        "batch.overflow='truncate' to cut them")


class SFTTrainer:
  """The parts of an SFT run; `run()` is the loop. Built by `train_sft`."""

  def __init__(self, config, workdir: str):
    from rollout.chat import ChatFormat
    self.config, self.workdir = config, os.path.abspath(workdir)
    os.makedirs(self.workdir, exist_ok=True)
    fmt = ChatFormat(components.tokenizer(config))
    examples = sft_examples(config, fmt, self.workdir)
    s = components.sft_config(config)
    if not 1 <= s.batch_size <= len(examples):
      raise sft_data.SFTDataError(f"sft.batch_size={s.batch_size} must be in [1, "
                                  f"{len(examples)}] (the number of examples)")
    self.loader = data_lib.TaskLoader(examples, s.batch_size, config.seed, s.epochs)
    self.num_steps = (self.loader.total_steps if s.num_steps <= 0
                      else min(s.num_steps, self.loader.total_steps))
    run = run_setup.setup_run(config, self.workdir)
    check_examples_fit(examples, run.pack_cfg)
    self.cfg, self.pack_cfg = run.cfg, run.pack_cfg
    self.state, self.start_step = run.state, run.start_step
    if run.data is not None:
      self.loader.position = run.data["loader"]
    self.step_cfg = components.sft_step_config(config, run.vocab)
    self.step = make_sft_step(self.cfg, self.step_cfg, run.tx, run.mesh, run.shardings)
    self.log = run_setup.RunLog(config, self.workdir, run.checkpointer, self.start_step,
                                self.num_steps)
    logger.info("SFT: %d examples, %d steps of %d (from step %d)", len(examples),
                self.num_steps, s.batch_size, self.start_step)

  def run(self) -> list[dict]:
    history = []
    for step in range(self.start_step, self.num_steps):
      t0 = time.perf_counter()
      batch, stats = make_batch(self.loader.next(), self.pack_cfg,
                                self.pack_cfg.loss_positions_multiple, self.step_cfg.vocab)
      t1 = time.perf_counter()
      self.state, out = self.step(self.state, batch)
      metrics = run_setup.train_metrics(out, step + 1)
      t2 = time.perf_counter()
      metrics.update({f"train/packing_{k}": float(v) for k, v in stats.items()})
      metrics.update(run_setup.perf_metrics(metrics, t2 - t1, t2 - t0))
      self.log.end_step(step + 1, metrics, self.state, self.loader.position)
      history.append(metrics)
    return history

  def close(self) -> None:
    self.log.close()


def train_sft(config, workdir: str) -> list[dict]:
  """Runs (or resumes) SFT in `workdir`; returns the metrics of the steps run."""
  trainer = SFTTrainer(config, workdir)
  try:
    return trainer.run()
  finally:
    trainer.close()
