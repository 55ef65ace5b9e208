"""The C-GRPO training loop: `train_and_evaluate(config, workdir)`.

One step: next questions -> G rollouts each (engine + browser tools) -> CaRR judge ->
C-GRPO rewards and group advantages -> packed [R, S] rows -> old (and reference) log-probs
-> jitted sharded train step -> weight sync to the engine -> metrics -> checkpoint; every
`train.eval_every` steps (and before the first step and after the last) an evaluation on
held-out questions writes accuracy, rubric satisfaction, rendered trajectories (TEXT) and an
evidence graph (IMAGES), and keeps per-question accuracy (`carr_jax.heldout`). The run ends
with a summary: what was trained, held-out accuracy at the start and the end, output paths.

Resume order (carr_jax.checkpointing): the workdir's latest checkpoint (state, data-loader
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
import dataclasses
import logging
import os
import shutil
import time
from typing import Any

import jax
import numpy as np

from carr_jax import checkpointing as ckpt_lib
from carr_jax import components
from carr_jax import data as data_lib
from carr_jax import heldout
from carr_jax import metrics as metrics_lib
from carr_jax import output_vocab
from carr_jax import packing
from carr_jax import rewards
from carr_jax import sharding
from carr_jax import step_stats
from carr_jax import train_step as ts
from carr_jax.evidence_plot import render_evidence_graph
from carr_jax.safe_text import json_line

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


def initial_state(config, workdir, cfg, tx, mesh, checkpointer):
  """(state, shardings, restored data position or None, start step)."""
  source = ckpt_lib.resolve_init_source(workdir, config)
  abstract, shardings = ts.abstract_train_state(cfg, tx, mesh)
  logger.info("init source: %s", source.value)
  if source == ckpt_lib.InitSource.WORKDIR_CHECKPOINT:
    restored = checkpointer.restore(ckpt_lib.with_shardings(abstract, shardings))
    return restored.state, shardings, restored.data, restored.step
  params = None
  if source == ckpt_lib.InitSource.INIT_CHECKPOINT:
    params = ckpt_lib.restore_params(config.checkpoint.init_dir,
                                     ckpt_lib.with_shardings(abstract.params, shardings.params))
  elif source == ckpt_lib.InitSource.HF_WEIGHTS:
    from carr_jax.hf_io import load_hf_params
    params = load_hf_params(config.model.hf_path, cfg, shardings.params)
  state, shardings = ts.create_train_state(cfg, tx, mesh, config.seed, params)
  return state, shardings, None, 0


def hf_export_fn(config, cfg, workdir: str):
  """The checkpointer's hook: HF weights (SGLang, transformers) every hf_export_every steps."""
  every = config.checkpoint.hf_export_every
  if not every:
    return None
  from carr_jax.hf_io import save_hf

  def export(step, params):  # on every process: each takes part in save_hf's gather
    if step % every == 0:
      save_hf(params, cfg, os.path.join(workdir, "hf", f"step_{step}"), overwrite=True)
  return export


@dataclasses.dataclass
class RunSetup:
  """What the RL and SFT trainers build alike from a config (`setup_run`)."""
  mesh: Any
  cfg: Any  # Qwen3Config
  tx: Any  # optax transformation
  pack_cfg: packing.PackingConfig
  checkpointer: ckpt_lib.TrainCheckpointer
  state: ts.TrainState
  shardings: ts.TrainState
  data: dict | None  # restored data-loader position, None on a fresh start
  start_step: int


def setup_run(config, workdir: str) -> RunSetup:
  """Mesh, model config, optimizer, packing, checkpointer, and the state (resume order)."""
  mesh = sharding.mesh_from_config(config.mesh)
  cfg = components.model_config(config)
  tx = ts.make_optimizer(components.optim_config(config))
  checkpointer = ckpt_lib.TrainCheckpointer(
      ckpt_lib.checkpoint_dir(workdir), save_every=config.checkpoint.every,
      keep=config.checkpoint.keep, export_fn=hf_export_fn(config, cfg, workdir),
      export_params=lambda s: s.params)
  state, shardings, data, start_step = initial_state(config, workdir, cfg, tx, mesh,
                                                     checkpointer)
  return RunSetup(mesh, cfg, tx, components.packing_config(config, mesh, cfg.vocab_size),
                  checkpointer, state, shardings, data, start_step)


class Trainer:
  """Holds the parts of a run; `run()` is the loop. Built by `train_and_evaluate`."""

  def __init__(self, config, workdir: str):
    self.config, self.workdir = config, os.path.abspath(workdir)
    os.makedirs(self.workdir, exist_ok=True)
    self.loss_cfg = components.loss_config(config)
    self.step_cfg = components.step_config(config)
    self.reward_cfg = components.reward_config(config)
    train, self.eval_records, corpus = data_lib.load_tasks(config.data)
    self.loader = data_lib.TaskLoader(train, config.data.prompts_per_step, config.seed,
                                      config.data.epochs)
    self.num_steps = min(config.train.num_steps, self.loader.total_steps)
    self.lead = jax.process_index() == 0  # drives rollouts, judging, metrics and exports
    if jax.process_count() > 1 and config.rollout.engine == "jax":
      raise ValueError("rollout.engine='jax' is single-host; use SGLang servers on a pod")
    run = setup_run(config, self.workdir)
    self.mesh, self.cfg, self.tx, self.pack_cfg = run.mesh, run.cfg, run.tx, run.pack_cfg
    self.checkpointer, self.state, self.shardings = run.checkpointer, run.state, run.shardings
    self.start_step = run.start_step
    if run.data is not None:
      self.loader.position = run.data["loader"]
    self.train_step = ts.make_train_step(self.cfg, self.loss_cfg, self.step_cfg, self.tx,
                                         self.mesh, self.shardings)
    self.logprob_fn = ts.make_logprob_fn(self.cfg, self.step_cfg, self.mesh,
                                         self.shardings.params)
    self.ref_params = None
    if self.loss_cfg.kl_coef:  # a frozen copy of the initial policy, only when it is used
      self.ref_params = jax.tree.map(lambda x: x.copy(), self.state.params)
    from rollout.chat import ChatFormat
    self.fmt = ChatFormat(components.tokenizer(config))
    self.rollout_cfg = components.rollout_config(config)
    self.tools = components.tool_backend(config, corpus)
    self.judge = components.judge(config, self.workdir)
    self.engine = components.engine(config, self.state.params, self.cfg,
                                     weight_version=str(self.start_step))
    self.writer = metrics_lib.MetricsWriter(os.path.join(self.workdir, "tb"))
    self.loop = asyncio.new_event_loop()
    self.served_export: str | None = None  # the HF export SGLang last loaded (this run's)
    if config.rollout.engine != "jax":  # the server must serve exactly this policy first
      self.sync_weights(str(self.start_step))

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
    output_vocab.check_output_vocab(self.cfg, batch["targets"], batch["loss_mask"])
    batch["loss_mask"] = batch["loss_mask"].astype(np.float32)
    return batch, metrics

  def update(self, batch):
    """Old / reference log-probs, then the train step. Returns step metrics.

    Runs on every process (after `share_batch`), so each derives the loss positions itself.
    """
    positions = {}
    if self.step_cfg.loss_positions:
      batch["loss_index"], batch["loss_valid"] = packing.loss_positions(
          batch["loss_mask"] > 0, self.config.batch.loss_positions_multiple)
      positions = {"train/packing_loss_positions": float(batch["loss_index"].shape[1])}
    if self.config.loss.old_logprobs == "trainer":
      batch["old_logprobs"] = self.logprob_fn(self.state.params, batch)
    else:
      batch["old_logprobs"] = batch["rollout_logprobs"]
    if self.ref_params is not None:
      batch["ref_logprobs"] = self.logprob_fn(self.ref_params, batch)
    self.state, metrics = self.train_step(self.state, batch)
    metrics = {f"train/{k}": float(v) for k, v in jax.device_get(metrics).items()}
    metrics_lib.check_finite(metrics, int(self.state.step), ["train/loss", "train/grad_norm"])
    return {**metrics, **positions}

  def sync_weights(self, version: str) -> None:
    """Pushes the new policy to the engine (in memory, or HF export + SGLang reload)."""
    async def run():
      if self.config.rollout.engine == "jax":
        await self.engine.update_weights(self.state.params, version)
        return
      from carr_jax.hf_io import save_hf
      sync_dir = self.config.rollout.sync_dir or os.path.join(self.workdir, "sync")
      path = os.path.join(sync_dir, f"v{version}")
      save_hf(self.state.params, self.cfg, path, overwrite=True,  # every process gathers
              tokenizer_dir=getattr(self.fmt.tokenizer, "name_or_path", None))
      if self.lead:
        await self.engine.update_weights_from_disk(path, version)
        # The server holds the weights in memory now: drop the export it replaced (a 4B
        # policy is 8 GB a step). Only this run's own exports are removed.
        if self.served_export not in (None, path):
          shutil.rmtree(self.served_export, ignore_errors=True)
        self.served_export = path
    self.loop.run_until_complete(run())

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
               "eval/accuracy": float(np.mean(accuracy))}
    heldout.save(self.workdir, step, accuracy, k, metrics)
    for i in range(min(self.config.train.text_samples, len(flat))):
      self.writer.text(step, f"eval/trajectory_{i}",
                       step_stats.render_trajectory_markdown(flat[i], breakdowns[i]))
    best = max(range(len(flat)), key=lambda i: breakdowns[i].rubric_reward)
    rubrics = records[best // k]["metadata"]["remote_env_info"]["rubrics"]
    self.writer.image(step, "eval/evidence_graph",
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
    if self.start_step == 0:
      self.writer.hparams(self.config.to_dict())
      if self.config.train.eval_every:  # where held-out accuracy starts
        self.writer.scalars(0, self.evaluate(0))
    metrics: dict[str, Any] = {}
    self.first_metrics: dict[str, Any] = {}  # this process's first step, for the summary
    g = self.config.data.group_size
    progress = metrics_lib.Progress(self.start_step, self.num_steps)
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
      self.sync_weights(str(step + 1))
      t3 = time.perf_counter()
      every, last = self.config.train.eval_every, step + 1 == self.num_steps
      if every and ((step + 1) % every == 0 or last):
        metrics.update(self.evaluate(step + 1))
      if self.lead:
        metrics.update({
            "perf/train_s": t2 - t1, "perf/sync_s": t3 - t2, "perf/step_time_s": t3 - t0,
            "perf/rollout_tokens_per_s": rollout_tokens / max(metrics["perf/rollout_s"], 1e-9),
            "perf/sampled_tokens_per_s": sampled_tokens / max(metrics["perf/rollout_s"], 1e-9),
            "perf/train_tokens_per_s": metrics.get("train/packing_loss_tokens", 0.0)
            / max(t2 - t1, 1e-9)})
        self.writer.scalars(step + 1, metrics)
        self.writer.flush()
        print(progress.line(step + 1, metrics), flush=True)
        self.first_metrics = self.first_metrics or dict(metrics)
      self.checkpointer.save(step + 1, self.state, data={"loader": self.loader.position},
                             meta={"config": self.config.to_dict(), "weight_version": step + 1},
                             force=step + 1 == self.num_steps)
    return metrics

  def close(self) -> None:
    self.checkpointer.close()
    self.writer.close()
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
