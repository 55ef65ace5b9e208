"""The C-GRPO training loop: `train_and_evaluate(config, workdir)`.

One step: next questions -> G rollouts each (engine + browser tools) -> CaRR judge ->
C-GRPO rewards and group advantages -> packed [R, S] rows -> old (and reference) log-probs
-> jitted sharded train step -> weight sync to the engine (`rollout.engines.weight_sync`) ->
metrics, progress line and checkpoint (`carr_jax.jobs.run_setup`, as in SFT); every
`train.eval_every` steps (and before the first step and after the last) an evaluation on
held-out questions writes accuracy, rubric satisfaction, rendered trajectories (TEXT) and an
evidence graph (IMAGES), and keeps per-question accuracy (`carr_jax.evaluation.heldout`).
The run ends with a summary: what was trained, held-out accuracy at the start and the end,
output paths.

Resume order (carr_jax.runs.checkpointing): the workdir's latest checkpoint (state, data-loader
position, step), else `checkpoint.init_dir`, else `model.hf_path`, else random init. A
resumed run continues with the same parameters, optimizer state, step and questions, and
with the in-process engine it samples the same episodes as the uninterrupted run (request
seeds hash the episode's rid and the weight version, not the arrival order; SGLang's
sampling is seeded server-side and is not reproduced).

Failure policy: a rollout the engine failed (after its retries) is never trained on; its
whole group is dropped (its advantages would be biased) and counted in `rollout/failed`.
Judge errors score 0 with a reason and are counted in `judge/errors`. A non-finite loss or
gradient norm stops the run with an error naming the metric.

Multi-host: every process runs this function and the jitted steps. Rollouts, judging and
evaluation run on process 0 only (against SGLang servers; the in-process engine is
single-host); the packed batch is broadcast to every process and assembled into one global
array (`train_step.global_batch`). Only process 0 writes metrics, dumps and HF exports.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import jax
import numpy as np

from carr_common.safe_text import json_line
from carr_jax.evaluation import heldout
from carr_jax.evaluation.evidence_plot import render_evidence_graph
from carr_jax.jobs import components
from carr_jax.jobs import run_setup
from carr_jax.jobs import tasks as data_lib
from carr_jax.model import restricted_vocab
from carr_jax.rl import packing
from carr_jax.rl import rewards
from carr_jax.rl import step_stats
from carr_jax.rl import train_step as ts
from rollout.engines.weight_sync import weight_sync

logger = logging.getLogger(__name__)


_BATCH_DTYPES = {"tokens": np.int32, "targets": np.int32, "loss_mask": np.float32,
                 "rollout_logprobs": np.float32, "advantages": np.float32,
                 "segment_ids": np.int32, "positions": np.int32}


def share_batch(batch: dict | None) -> dict | None:
  """Process 0's packed batch (or None) on every process; identity on a single process."""
  if jax.process_count() == 1:
    return batch
  from jax.experimental import multihost_utils
  lead = jax.process_index() == 0
  shape = multihost_utils.broadcast_one_to_all(
      np.array(batch["tokens"].shape if lead and batch is not None else (0, 0), np.int64))
  if not shape.all():
    return None
  template = ({k: np.asarray(batch[k], d) for k, d in _BATCH_DTYPES.items()} if lead else
              {k: np.zeros(tuple(shape), d) for k, d in _BATCH_DTYPES.items()})
  return multihost_utils.broadcast_one_to_all(template)


class Trainer:
  """Holds the parts of a run; `run()` is the loop. Built by `train_and_evaluate`."""

  def __init__(self, config, workdir: str):
    self.config, self.workdir = config, os.path.abspath(workdir)
    os.makedirs(self.workdir, exist_ok=True)
    self.loss_cfg = components.loss_config(config)
    self.reward_cfg = components.reward_config(config)
    train, self.eval_records, corpus = data_lib.load_tasks(config)
    self.loader = data_lib.TaskLoader(train, config.data.prompts_per_step, config.seed,
                                      config.data.epochs)
    self.num_steps = min(config.train.num_steps, self.loader.total_steps)
    self.lead = jax.process_index() == 0  # drives rollouts, judging, metrics and exports
    if jax.process_count() > 1 and config.rollout.engine == "jax":
      raise ValueError("rollout.engine='jax' is single-host; use SGLang servers on a pod")
    run = run_setup.setup_run(config, self.workdir)
    self.mesh, self.cfg, self.tx, self.pack_cfg = run.mesh, run.cfg, run.tx, run.pack_cfg
    self.step_cfg = components.step_config(config, run.vocab)
    self.state, self.shardings = run.state, run.shardings
    self.start_step = run.start_step
    if run.data is not None:
      self.loader.position = run.data["loader"]
    self.train_step = ts.make_train_step(self.cfg, self.loss_cfg, self.step_cfg, self.tx,
                                         self.mesh, self.shardings)
    self.ref_params = self.ref_logprob_fn = None
    if self.loss_cfg.kl_coef:  # a frozen copy of the initial policy, only when it is used
      self.ref_params = jax.tree.map(lambda x: x.copy(), self.state.params)
      self.ref_logprob_fn = ts.make_logprob_fn(self.cfg, self.step_cfg, self.mesh,
                                               self.shardings.params)
    from rollout.chat import ChatFormat
    self.fmt = ChatFormat(components.tokenizer(config))
    self.rollout_cfg = components.rollout_config(config)
    self.tools = components.tool_backend(config, corpus)
    self.judge = components.judge(config, self.workdir)
    self.engine = components.engine(config, self.state.params, self.cfg,
                                     weight_version=str(self.start_step), vocab=run.vocab)
    self.weight_sync = weight_sync(
        config.rollout.engine, self.engine, export=self.export_hf, lead=self.lead,
        export_dir=config.rollout.sync_dir or os.path.join(self.workdir, "sync"))
    self.log = run_setup.RunLog(config, self.workdir, run.checkpointer, self.start_step,
                                self.num_steps)
    self.loop = asyncio.new_event_loop()
    self.loop.run_until_complete(self.weight_sync.start(self.state.params,
                                                        str(self.start_step)))

  def export_hf(self, params, path: str) -> None:
    """The policy as an HF directory at `path`, with the tokenizer (what SGLang loads)."""
    from carr_jax.model.hf_io import save_hf
    save_hf(params, self.cfg, path, overwrite=True,
            tokenizer_dir=getattr(self.fmt.tokenizer, "name_or_path", None))

  # ------------------------------------------------------------------ phases of a step

  def collect(self, records, group_size: int, step: int):
    """Rollouts then judging, in the run's event loop. Returns ([P][G] trajs, breakdowns)."""
    from rollout.agent import rollout_groups

    async def run():
      groups = await rollout_groups(self.engine, self.fmt, self.tools, records, group_size,
                                    self.rollout_cfg, progress=True)
      t_rollout = time.perf_counter()
      pairs = [(traj, rec) for rec, group in zip(records, groups) for traj in group]
      breakdowns = await self.judge.score_batch(pairs)
      return groups, breakdowns, t_rollout
    start = time.perf_counter()
    groups, breakdowns, t_rollout = self.loop.run_until_complete(run())
    times = {"perf/rollout_s": t_rollout - start, "perf/judge_s": time.perf_counter() - t_rollout}
    return groups, breakdowns, times

  def build_batch(self, groups, breakdowns):
    """Advantages per group, failed groups dropped, packed rows. Returns (batch, metrics)."""
    p, g = len(groups), len(groups[0])
    flat = [t for group in groups for t in group]
    outcome = np.array([b.outcome_reward for b in breakdowns], np.float64).reshape(p, g)
    rubric = np.array([b.rubric_reward for b in breakdowns], np.float64).reshape(p, g)
    status = np.array([t["status"] for t in flat]).reshape(p, g)
    adv = rewards.compute_group_advantages(outcome, rubric, status == "completed",
                                           self.reward_cfg)
    usable = ~(status == "failed").any(axis=1, keepdims=True) & adv.keep  # [P, G]
    keep = [i for i in range(p * g) if usable.reshape(-1)[i]]
    metrics = {**step_stats.reward_metrics(adv),
               "rollout/dropped_groups": float(np.mean(~usable.any(axis=1)))}
    if not keep:
      return None, metrics
    packed = packing.pack_trajectories([flat[i] for i in keep],
                                       adv.advantages.reshape(-1)[keep], self.pack_cfg)
    metrics.update({f"train/packing_{k}": float(v) for k, v in packed.stats().items()})
    batch = packed.arrays()
    restricted_vocab.check_scored(self.step_cfg.vocab, batch["targets"], batch["loss_mask"])
    batch["loss_mask"] = batch["loss_mask"].astype(np.float32)
    return batch, metrics

  def update(self, batch):
    """Old log-probs (with `loss.old_logprobs="rollout"`) and reference log-probs (with a KL
    term), then the train step. Returns step metrics.

    Runs on every process (after `share_batch`), so each derives the loss positions itself.
    """
    positions = {}
    if self.step_cfg.loss_positions:
      batch["loss_index"], batch["loss_valid"] = packing.loss_positions(
          batch["loss_mask"] > 0, self.config.batch.loss_positions_multiple)
      positions = {"train/packing_loss_positions": float(batch["loss_index"].shape[1])}
    if not self.step_cfg.on_policy:  # "trainer": the step's own log-probs (train_step)
      batch["old_logprobs"] = batch["rollout_logprobs"]
    if self.ref_params is not None:
      batch["ref_logprobs"] = self.ref_logprob_fn(self.ref_params, batch)
    self.state, out = self.train_step(self.state, batch)
    return {**run_setup.train_metrics(out, int(self.state.step)), **positions}

  # ------------------------------------------------------------------ loop

  def evaluate(self, step: int) -> dict:
    """The policy on the first `train.eval_questions` held-out questions; saved per question."""
    n = min(self.config.train.eval_questions, len(self.eval_records))
    if not n or not self.lead:
      return {}
    records, k = self.eval_records[:n], self.config.train.eval_samples
    groups, breakdowns, _ = self.collect(records, k, step)
    flat = [t for group in groups for t in group]
    threshold = self.config.reward.shortcut_threshold
    accuracy = heldout.per_question_accuracy(breakdowns, n)
    metrics = {**step_stats.rollout_metrics(flat, "eval/"),
               **step_stats.judge_metrics(breakdowns, threshold, "eval/"),
               **heldout.shortcut_subset_metrics(records, breakdowns, threshold),
               **heldout.evidence_subset_metrics(records, breakdowns),
               "eval/accuracy": float(np.mean(accuracy))}
    heldout.save(self.workdir, step, accuracy, k, metrics)
    for i in range(min(self.config.train.text_samples, len(flat))):
      self.log.writer.text(step, f"eval/trajectory_{i}",
                           step_stats.render_trajectory_markdown(flat[i], breakdowns[i]))
    best = max(range(len(flat)), key=lambda i: breakdowns[i].rubric_reward)
    rubrics = records[best // k]["metadata"]["remote_env_info"]["rubrics"]
    self.log.writer.image(step, "eval/evidence_graph",
                          render_evidence_graph(breakdowns[best], rubrics))
    return metrics

  def dump(self, step: int, groups, breakdowns) -> None:
    if not self.config.rollout.dump_trajectories or jax.process_index() != 0:
      return
    directory = os.path.join(self.workdir, "trajectories")
    os.makedirs(directory, exist_ok=True)
    flat = [t for group in groups for t in group]
    with open(os.path.join(directory, f"step_{step}.jsonl"), "w", encoding="utf-8") as f:
      for traj, b in zip(flat, breakdowns):
        f.write(json_line({**traj, "judge": b.to_dict()}))  # never raises on a lone surrogate

  def run(self) -> dict:
    if self.start_step == 0 and self.config.train.eval_every:  # where held-out accuracy starts
      self.log.writer.scalars(0, self.evaluate(0))
    metrics: dict[str, Any] = {}
    self.first_metrics: dict[str, Any] = {}  # this process's first step, for the summary
    g = self.config.data.group_size
    for step in range(self.start_step, self.num_steps):
      t0 = time.perf_counter()
      records = self.loader.next()  # every process advances, so checkpoints agree
      metrics, batch = {}, None
      if self.lead:
        groups, breakdowns, metrics = self.collect(records, g, step)
        self.dump(step + 1, groups, breakdowns)  # numbered like the console, TB, checkpoints
        flat = [t for group in groups for t in group]
        metrics.update(step_stats.rollout_metrics(flat))
        metrics.update(step_stats.judge_metrics(breakdowns,
                                                self.config.reward.shortcut_threshold))
        batch, batch_metrics = self.build_batch(groups, breakdowns)
        metrics.update(batch_metrics)
        rollout_tokens = sum(len(t["token_ids"]) for t in flat)  # prompts, turns, tool output
        sampled_tokens = sum(sum(t["loss_mask"]) for t in flat)
      batch = share_batch(batch)
      t1 = time.perf_counter()
      if batch is not None:
        metrics.update(self.update(batch))
      else:
        logger.warning("step %d: no usable trajectory; optimizer step skipped", step)
      metrics["train/skipped"] = float(batch is None)
      t2 = time.perf_counter()
      self.loop.run_until_complete(self.weight_sync.push(self.state.params, str(step + 1)))
      t3 = time.perf_counter()
      every, last = self.config.train.eval_every, step + 1 == self.num_steps
      if every and ((step + 1) % every == 0 or last):
        metrics.update(self.evaluate(step + 1))
      if self.lead:
        metrics.update({
            **run_setup.perf_metrics(metrics, t2 - t1, t3 - t0), "perf/sync_s": t3 - t2,
            "perf/rollout_tokens_per_s": rollout_tokens / max(metrics["perf/rollout_s"], 1e-9),
            "perf/sampled_tokens_per_s": sampled_tokens / max(metrics["perf/rollout_s"], 1e-9)})
        self.first_metrics = self.first_metrics or dict(metrics)
      self.log.end_step(step + 1, metrics, self.state, self.loader.position)
    return metrics

  def close(self) -> None:
    self.log.close()
    self.loop.run_until_complete(self._aclose())
    self.loop.close()

  async def _aclose(self) -> None:
    await self.engine.close()
    await self.judge.aclose()


def train_and_evaluate(config, workdir: str) -> dict:
  """Runs (or resumes) training in `workdir`; returns the last step's metrics."""
  trainer = Trainer(config, workdir)
  try:
    metrics = trainer.run()
  finally:
    trainer.close()
  if trainer.lead:
    print("\n".join(heldout.closing_summary(config, trainer.workdir, trainer.num_steps,
                                           metrics, trainer.first_metrics)), flush=True)
  return metrics
