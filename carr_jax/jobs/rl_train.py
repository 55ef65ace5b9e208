"""The C-GRPO training loop: `train_and_evaluate(config, workdir)`.

One step: next questions -> G rollouts each (engine + browser tools) -> CaRR judge ->
C-GRPO rewards and group advantages -> packed [R, S] rows -> old (and reference) log-probs
-> jitted sharded train step -> weight sync to the engine (`rollout.engines.weight_sync`) ->
metrics, progress line and checkpoint (`carr_jax.jobs.run_setup`, as in SFT). With
`rollout.max_staleness` = k >= 1 the collections (rollouts and judge calls) of the next k steps
run while a step trains (`carr_jax.jobs.pipeline`: staleness bound, partial rollouts, what
resume keeps); k = 0 is the paper's synchronous step. Every
`train.eval_every` steps (and before the first step and after the last) an evaluation on
held-out questions writes accuracy, rubric satisfaction, rendered trajectories (TEXT) and an
evidence graph (IMAGES), the task source's own measures (`tasks.source_evaluation`), and keeps
per-question accuracy (`carr_jax.evaluation.heldout`).
The run ends with a summary: what was trained, held-out accuracy at the start and the end,
output paths.

Resume order (carr_jax.runs.checkpointing): the workdir's latest checkpoint (state, data-loader
position, step), else `checkpoint.init_dir`, else `model.hf_path`, else random init. A
resumed run continues with the same parameters, optimizer state, step and questions, and
with the in-process engine at k = 0 it samples the same episodes as the uninterrupted run
(request seeds hash the episode's rid and the weight version, not the arrival order; SGLang's
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
from carr_jax.jobs import pipeline
from carr_jax.jobs import run_setup
from carr_jax.jobs import tasks as data_lib
from carr_jax.model import restricted_vocab
from carr_jax.rl import packing
from carr_jax.rl import rewards
from carr_jax.rl import step_stats
from carr_jax.rl import train_step as ts
from rollout import routes as routes_lib
from rollout.engines.weight_sync import weight_sync

logger = logging.getLogger(__name__)


_BATCH_DTYPES = {"tokens": np.int32, "targets": np.int32, "loss_mask": np.float32,
                 "rollout_logprobs": np.float32, "advantages": np.float32,
                 "segment_ids": np.int32, "positions": np.int32, "routes": np.int32,
                 "prefix_tokens": np.int32, "loss_total": np.float32}
_MAX_RANK = 4  # routes [R, S, layers, k]


def batch_keys(pack_cfg: packing.PackingConfig, step_cfg: ts.StepConfig) -> tuple[str, ...]:
  """The keys of a packed batch (`Trainer.build_batch`), known alike on every process."""
  return (packing.array_keys(bool(pack_cfg.routes))
          + (("prefix_tokens",) if pack_cfg.prefix_multiple else ())
          + (("loss_total",) if step_cfg.skip_zero_gradient else ()))


def share_batch(batch: dict | None, keys: tuple[str, ...]) -> dict | None:
  """Process 0's packed batch (or None) on every process: each of `keys` (`batch_keys`), whose
  shapes go first (a shared prefix's length varies per step); identity on a single process."""
  if jax.process_count() == 1:
    return batch
  from jax.experimental import multihost_utils
  lead = jax.process_index() == 0
  shapes = np.full((len(keys), _MAX_RANK + 1), -1, np.int64)  # [keys, rank + dims], -1: none
  if lead and batch is not None:
    for i, k in enumerate(keys):
      dims = np.shape(batch[k])
      shapes[i, 0], shapes[i, 1:1 + len(dims)] = len(dims), dims
  shapes = multihost_utils.broadcast_one_to_all(shapes)
  if shapes[0, 0] < 0:
    return None
  dims = {k: tuple(int(n) for n in row[1:1 + row[0]]) for k, row in zip(keys, shapes)}
  template = {k: (np.asarray(batch[k], _BATCH_DTYPES[k]) if lead
                  else np.zeros(dims[k], _BATCH_DTYPES[k])) for k in keys}
  return multihost_utils.broadcast_one_to_all(template)


def trained_groups(usable: np.ndarray, zero_gradient: np.ndarray, skip: bool) -> np.ndarray:
  """[P, G] the `usable` [P, G] rollouts a step trains on: all of them, or with `skip`
  (`batch.skip_zero_gradient`) those of groups whose `zero_gradient` [P] is False; when every
  usable group is zero-gradient, the first of them, so the optimizer steps as it would."""
  if not skip:
    return usable
  trained = usable & ~zero_gradient[:, None]
  if trained.any() or not usable.any():
    return trained
  first = np.zeros_like(usable)
  first[int(np.argmax(usable.any(axis=1)))] = True
  return usable & first


class Trainer:
  """Holds the parts of a run; `run()` is the loop. Built by `train_and_evaluate`."""

  def __init__(self, config, workdir: str):
    self.config, self.workdir = config, os.path.abspath(workdir)
    os.makedirs(self.workdir, exist_ok=True)
    self.loss_cfg = components.loss_config(config)
    self.reward_cfg = components.reward_config(config)
    train, self.eval_records, corpus = data_lib.load_tasks(config)
    self.data_cfg, self.train_cfg = data_lib.data_config(config), \
        components.train_config(config)
    self.loader = data_lib.TaskLoader(train, self.data_cfg.prompts_per_step, config.seed,
                                      self.data_cfg.epochs)
    self.num_steps = min(self.train_cfg.num_steps, self.loader.total_steps)
    self.lead = jax.process_index() == 0  # drives rollouts, judging, metrics and exports
    self.pipe_cfg, self.engine_cfg = components.pipeline_config(config), \
        components.engine_config(config)
    self.max_staleness = self.pipe_cfg.max_staleness
    if jax.process_count() > 1 and self.engine_cfg.engine == "jax":
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
    self.engine = components.engine(config, self.served(self.state.params), self.cfg,
                                     weight_version=str(self.start_step), vocab=run.vocab)
    self.weight_sync = weight_sync(
        self.engine_cfg.engine, self.engine, export=self.export_hf, lead=self.lead,
        export_dir=self.engine_cfg.sync_dir or os.path.join(self.workdir, "sync"))
    self.log = run_setup.RunLog(config, self.workdir, run.checkpointer, self.start_step,
                                self.num_steps)
    self.loop = pipeline.LoopThread()  # rollouts, judge and syncs; its own thread
    self.loop.run(self.weight_sync.start(self.state.params, str(self.start_step)))

  def served(self, params):
    """The params the in-process engine samples with: a copy while its rollouts overlap the
    train step, which donates (frees) the state's buffers. SGLang loads an export."""
    overlap = self.max_staleness and self.engine_cfg.engine == "jax"
    return jax.tree.map(jax.numpy.copy, params) if overlap else params

  def export_hf(self, params, path: str) -> None:
    """The policy as an HF directory at `path`, with the tokenizer (what SGLang loads)."""
    from carr_jax.model.hf_io import save_hf
    save_hf(params, self.cfg, path, overwrite=True,
            tokenizer_dir=getattr(self.fmt.tokenizer, "name_or_path", None))

  # ------------------------------------------------------------------ phases of a step

  async def collect(self, records, group_size: int, progress: bool = True):
    """Rollouts then judging (on the run's loop). Returns ([P][G] trajs, breakdowns, times)."""
    from rollout.agent import rollout_groups
    start = time.perf_counter()
    groups = await rollout_groups(self.engine, self.fmt, self.tools, records, group_size,
                                  self.rollout_cfg, progress=progress)
    t_rollout = time.perf_counter()
    pairs = [(traj, rec) for rec, group in zip(records, groups) for traj in group]
    breakdowns = await self.judge.score_batch(pairs)
    times = {"perf/rollout_s": t_rollout - start, "perf/judge_s": time.perf_counter() - t_rollout}
    return groups, breakdowns, times

  def submit_collection(self, records, step: int):
    """Starts step `step`'s collection on the loop; a future of `collect`'s result."""
    del step  # the engine's seeds follow each episode's rid and weight version

    async def tracked():
      self.pipe.idle.busy()
      try:
        return await self.collect(records, self.data_cfg.group_size,
                                  progress=not self.max_staleness)  # one bar at a time
      finally:
        self.pipe.idle.done()
    return self.loop.submit(tracked())

  def build_batch(self, groups, breakdowns, fresh: np.ndarray):
    """Advantages per group, failed groups and those not `fresh` [P, 1] (too stale) dropped,
    packed rows. Returns (batch, metrics)."""
    p, g = len(groups), len(groups[0])
    flat = [t for group in groups for t in group]
    outcome = np.array([b.outcome_reward for b in breakdowns], np.float64).reshape(p, g)
    rubric = np.array([b.rubric_reward for b in breakdowns], np.float64).reshape(p, g)
    status = np.array([t["status"] for t in flat]).reshape(p, g)
    adv = rewards.compute_group_advantages(outcome, rubric, status == "completed",
                                           self.reward_cfg)
    unroutable = self.route_failures(flat).reshape(p, g)  # [P, G]
    usable = ~((status == "failed") | unroutable).any(axis=1, keepdims=True) & adv.keep & fresh
    trained = trained_groups(usable, adv.zero_gradient, self.step_cfg.skip_zero_gradient)
    keep = [i for i in range(p * g) if trained.reshape(-1)[i]]
    metrics = {**step_stats.reward_metrics(adv),
               "rollout/dropped_groups": float(np.mean(~usable.any(axis=1)))}
    if self.pack_cfg.routes:
      metrics["rollout/route_failures"] = float(unroutable.sum())
    if not keep:
      return None, metrics
    packed = packing.pack_trajectories([flat[i] for i in keep],
                                       adv.advantages.reshape(-1)[keep], self.pack_cfg)
    metrics.update({f"train/packing_{k}": float(v) for k, v in packed.stats().items()})
    batch = packed.arrays()
    restricted_vocab.check_scored(self.step_cfg.vocab, batch["targets"], batch["loss_mask"])
    if self.pack_cfg.prefix_multiple:
      batch = packing.split_shared_prefix(batch, self.pack_cfg.prefix_multiple)
    metrics["train/packing_prefix"] = float(len(batch.get("prefix_tokens", ())))
    batch["loss_mask"] = batch["loss_mask"].astype(np.float32)
    if self.step_cfg.skip_zero_gradient:  # the packed loss tokens and the left-out groups'
      left_out = (usable & ~trained).reshape(-1)
      batch["loss_total"] = np.float32(batch["loss_mask"].sum() + packing.loss_token_count(
          [flat[i] for i in range(p * g) if left_out[i]], self.pack_cfg))
      metrics["train/left_out_groups"] = float(np.mean(usable.any(axis=1) & ~trained.any(axis=1)))
    return batch, metrics

  def route_failures(self, flat) -> np.ndarray:
    """[N] trajectories whose routes cannot be replayed (`model.routing_replay`), each logged
    with its one-line reason (rollout/routes.py check); their groups are dropped, counted."""
    if not self.pack_cfg.routes:
      return np.zeros(len(flat), bool)
    layers, k = self.pack_cfg.routes
    reasons = [routes_lib.check(t, layers, k, self.cfg.num_experts) for t in flat]
    for t, reason in zip(flat, reasons):
      if reason:
        logger.warning("trajectory %s/%s not trained: %s", t.get("prompt_id"),
                       t.get("sample_index"), reason)
    return np.array([r is not None for r in reasons], bool)

  def update(self, batch):
    """Old log-probs (with `loss.old_logprobs="rollout"`) and reference log-probs (with a KL
    term), then the train step. Returns step metrics.

    Runs on every process (after `share_batch`), so each derives the loss positions itself.
    """
    positions = {}
    if self.step_cfg.loss_positions:
      batch["loss_index"], batch["loss_valid"] = packing.loss_positions(
          batch["loss_mask"] > 0, self.pack_cfg.loss_positions_multiple)
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
    n = min(self.train_cfg.eval_questions, len(self.eval_records))
    if not n or not self.lead:
      return {}
    records, k = self.eval_records[:n], self.train_cfg.eval_samples
    groups, breakdowns, _ = self.loop.run(self.collect(records, k))
    flat = [t for group in groups for t in group]
    accuracy = heldout.per_question_accuracy(breakdowns, n)
    source_metrics, per_question = data_lib.source_evaluation(self.config, records, breakdowns)
    metrics = {**step_stats.rollout_metrics(flat, "eval/"),
               **step_stats.judge_metrics(breakdowns, self.reward_cfg.shortcut_threshold,
                                          "eval/"),
               **source_metrics, "eval/accuracy": float(np.mean(accuracy))}
    heldout.save(self.workdir, step, accuracy, k, metrics, per_question)
    for i in range(min(self.train_cfg.text_samples, len(flat))):
      self.log.writer.text(step, f"eval/trajectory_{i}",
                           step_stats.render_trajectory_markdown(flat[i], breakdowns[i]))
    best = max(range(len(flat)), key=lambda i: breakdowns[i].rubric_reward)
    rubrics = records[best // k]["metadata"]["remote_env_info"]["rubrics"]
    self.log.writer.image(step, "eval/evidence_graph",
                          render_evidence_graph(breakdowns[best], rubrics))
    return metrics

  def dump(self, step: int, groups, breakdowns) -> None:
    if not self.pipe_cfg.dump_trajectories or jax.process_index() != 0:
      return
    directory = os.path.join(self.workdir, "trajectories")
    os.makedirs(directory, exist_ok=True)
    flat = [t for group in groups for t in group]
    with open(os.path.join(directory, f"step_{step}.jsonl"), "w", encoding="utf-8") as f:
      for traj, b in zip(flat, breakdowns):
        f.write(json_line({**traj, "judge": b.to_dict()}))  # never raises on a lone surrogate

  def judged(self, step: int, groups, breakdowns, metrics: dict):
    """The lead's view of step `step`'s collection: dump, rollout, judge and staleness
    metrics, the packed batch of its fresh groups. Returns (batch or None, metrics)."""
    self.dump(step + 1, groups, breakdowns)  # numbered like the console, TB, checkpoints
    flat = [t for group in groups for t in group]
    metrics.update(step_stats.rollout_metrics(flat))
    metrics.update(step_stats.judge_metrics(breakdowns, self.reward_cfg.shortcut_threshold))
    stale = pipeline.staleness(groups, step)  # [P, G]
    fresh = pipeline.fresh_groups(stale, self.max_staleness)  # [P, 1]
    metrics.update(pipeline.staleness_metrics(stale, fresh, groups))
    self.log.writer.histogram(step + 1, "rollout/staleness", stale[fresh[:, 0]],
                              limits=np.arange(self.max_staleness + 1) + 0.5)
    batch, batch_metrics = self.build_batch(groups, breakdowns, fresh)
    metrics.update(batch_metrics)
    rollout_s = max(metrics["perf/rollout_s"], 1e-9)
    metrics["perf/rollout_tokens_per_s"] = sum(len(t["token_ids"]) for t in flat) / rollout_s
    metrics["perf/sampled_tokens_per_s"] = sum(sum(t["loss_mask"]) for t in flat) / rollout_s
    return batch, metrics

  def run(self) -> dict:
    if self.start_step == 0 and self.train_cfg.eval_every:  # where held-out accuracy starts
      self.log.writer.scalars(0, self.evaluate(0))
    metrics: dict[str, Any] = {}
    self.first_metrics: dict[str, Any] = {}  # this process's first step, for the summary
    self.pipe = pipeline.Pipeline(self.loader, self.submit_collection, start=self.start_step,
                                  max_staleness=self.max_staleness, lead=self.lead)
    try:
      for step in range(self.start_step, self.num_steps):
        metrics = self.step(step)
    finally:
      self.pipe.cancel()
    return metrics

  def step(self, step: int) -> dict:
    """Step `step` (0-based): its collection (started up to k steps ago), the update, the
    weight push, an evaluation when due, metrics and checkpoint. Returns its metrics."""
    t0 = time.perf_counter()
    self.pipe.launch_through(min(step + self.max_staleness, self.num_steps - 1))
    collected, waited = self.pipe.take(step)  # every process drew the questions
    metrics, batch = {}, None
    if self.lead:
      batch, metrics = self.judged(step, *collected)
      metrics["perf/trainer_idle_s"] = waited
    batch = share_batch(batch, batch_keys(self.pack_cfg, self.step_cfg))
    t1 = time.perf_counter()
    if batch is not None:
      metrics.update(self.update(batch))
    else:
      logger.warning("step %d: no usable trajectory; optimizer step skipped", step)
    metrics["train/skipped"] = float(batch is None)
    t2 = time.perf_counter()
    self.loop.run(self.weight_sync.push(self.served(self.state.params), str(step + 1)))
    t3 = time.perf_counter()
    every, last = self.train_cfg.eval_every, step + 1 == self.num_steps
    if every and ((step + 1) % every == 0 or last):
      metrics.update(self.evaluate(step + 1))
    if self.lead:
      metrics.update({**run_setup.perf_metrics(metrics, t2 - t1, t3 - t0), "perf/sync_s": t3 - t2,
                      "perf/rollout_idle_s": self.pipe.idle.take(),
                      **self.judge.in_flight_peaks()})
      self.first_metrics = self.first_metrics or dict(metrics)
    self.log.end_step(step + 1, metrics, self.state, self.pipe.position)
    return metrics

  def close(self) -> None:
    self.log.close()
    self.loop.run(self._aclose())
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
    trained = (f"trained {components.model_source(config).preset} with reward.mode="
               f"{trainer.reward_cfg.mode} for {trainer.num_steps} steps on data.source="
               f"{trainer.data_cfg.source}")
    print("\n".join(heldout.closing_summary(trained, trainer.workdir, metrics,
                                           trainer.first_metrics,
                                           data_lib.source_summary_names(config))), flush=True)
  return metrics
