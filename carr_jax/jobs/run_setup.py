"""What the RL loop (carr_jax/jobs/rl_train.py) and the SFT loop (carr_jax/jobs/sft_train.py) share.

`setup_run` builds a run from its config: mesh, model config, output vocabulary, optimizer,
packing, checkpointer (with the HF export hook) and the train state, following the resume order of
`carr_jax.runs.checkpointing`. `RunLog` is the bookkeeping after each step: TensorBoard scalars in
`<workdir>/tb` (the config as hparams on a fresh start), the console progress line, and the
checkpoint with the data-loader position and the config snapshot (the checkpointer redacts
secrets). `train_metrics` and `perf_metrics` name a step's numbers the same way in both:

  train/<name>             the jitted step's outputs (loss, grad_norm, ...), checked finite
  perf/train_s             seconds in the train step (and, in RL, the log-prob passes)
  perf/step_time_s         seconds of the whole step
  perf/train_tokens_per_s  loss tokens (train/packing_loss_tokens) per second of perf/train_s
"""
from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from typing import Any

import jax

from carr_jax.jobs import components
from carr_jax.model import sharding
from carr_jax.rl import optim
from carr_jax.rl import packing
from carr_jax.rl import train_step as ts
from carr_jax.runs import checkpointing as ckpt_lib
from carr_jax.runs import metrics as metrics_lib

logger = logging.getLogger(__name__)

MUST_BE_FINITE = ("train/loss", "train/grad_norm")  # a step that breaks these stops the run


def initial_state(config, workdir, cfg, tx, mesh, checkpointer):
  """(state, shardings, restored data position or None, start step)."""
  ckpt_cfg = components.checkpoint_config(config)
  hf_path = components.model_source(config).hf_path
  source = ckpt_lib.resolve_init_source(workdir, ckpt_cfg.init_dir, hf_path)
  abstract, shardings = ts.abstract_train_state(cfg, tx, mesh)
  logger.info("init source: %s", source.value)
  if source == ckpt_lib.InitSource.WORKDIR_CHECKPOINT:
    restored = checkpointer.restore(ckpt_lib.with_shardings(abstract, shardings))
    return restored.state, shardings, restored.data, restored.step
  params = None
  if source == ckpt_lib.InitSource.INIT_CHECKPOINT:
    params = ckpt_lib.restore_params(ckpt_cfg.init_dir,
                                     ckpt_lib.with_shardings(abstract.params, shardings.params))
  elif source == ckpt_lib.InitSource.HF_WEIGHTS:
    from carr_jax.model.hf_io import load_hf_params
    params = load_hf_params(hf_path, cfg, shardings.params)
  state, shardings = ts.create_train_state(cfg, tx, mesh, config.seed, params)
  return state, shardings, None, 0


def hf_export_fn(every: int, cfg, workdir: str):
  """The checkpointer's hook: HF weights (SGLang, transformers) every `every` steps
  (checkpoint.hf_export_every; 0: None, never)."""
  if not every:
    return None
  from carr_jax.model.hf_io import save_hf

  def export(step, params):  # on every process: each takes part in save_hf's gather
    if step % every == 0:
      save_hf(params, cfg, os.path.join(workdir, "hf", f"step_{step}"), overwrite=True)
  return export


@dataclasses.dataclass
class RunSetup:
  """What the RL and SFT trainers build alike from a config (`setup_run`)."""
  mesh: Any
  cfg: Any  # Qwen3Config
  vocab: Any  # RestrictedVocab | None: the output vocabulary of the loss and the sampler
  tx: Any  # optax transformation
  pack_cfg: packing.PackingConfig
  checkpointer: ckpt_lib.TrainCheckpointer
  state: ts.TrainState
  shardings: ts.TrainState
  data: dict | None  # restored data-loader position, None on a fresh start
  start_step: int


def setup_run(config, workdir: str) -> RunSetup:
  """Mesh, model config, output vocabulary, optimizer, packing, checkpointer, and the state
  (resume order)."""
  mesh = sharding.mesh_from_config(components.mesh_config(config))
  cfg, vocab = components.model_config(config), components.output_vocab(config)
  if vocab is not None:
    vocab.check_fits(cfg.vocab_size)
  tx = optim.make_optimizer(components.optim_config(config))
  ckpt_cfg = components.checkpoint_config(config)
  checkpointer = ckpt_lib.TrainCheckpointer(
      ckpt_lib.checkpoint_dir(workdir), save_every=ckpt_cfg.every, keep=ckpt_cfg.keep,
      export_fn=hf_export_fn(ckpt_cfg.hf_export_every, cfg, workdir),
      export_params=lambda s: s.params)
  state, shardings, data, start_step = initial_state(config, workdir, cfg, tx, mesh,
                                                     checkpointer)
  return RunSetup(mesh, cfg, vocab, tx, components.packing_config(config, mesh, cfg.vocab_size),
                  checkpointer, state, shardings, data, start_step)


def train_metrics(step_out: Mapping[str, Any], step: int) -> dict[str, float]:
  """The jitted step's outputs as `train/<name>` floats; raises NonFiniteError if the loss or
  the gradient norm of step `step` (1-based) is NaN or inf."""
  metrics = {f"train/{k}": float(v) for k, v in jax.device_get(step_out).items()}
  metrics_lib.check_finite(metrics, step, MUST_BE_FINITE)
  return metrics


def perf_metrics(metrics: Mapping[str, Any], train_s: float, step_s: float) -> dict[str, float]:
  """perf/train_s, perf/step_time_s and perf/train_tokens_per_s of a step with `metrics`."""
  return {"perf/train_s": train_s, "perf/step_time_s": step_s,
          "perf/train_tokens_per_s": metrics.get("train/packing_loss_tokens", 0.0)
          / max(train_s, 1e-9)}


def checkpoint_meta(config, step: int) -> dict:
  """The meta of checkpoint `step`: the config snapshot (the checkpointer redacts it) and
  the weight version the step's params are served under."""
  return {"config": config.to_dict(), "weight_version": step}


class RunLog:
  """A run's bookkeeping: TensorBoard metrics, progress line and checkpoint after each step.

  Only process 0 writes metrics and prints; every process calls `end_step`, since each takes
  part in the checkpoint.
  """

  def __init__(self, config, workdir: str, checkpointer: ckpt_lib.TrainCheckpointer,
               start_step: int, num_steps: int):
    self.config, self.checkpointer, self.num_steps = config, checkpointer, num_steps
    self.lead = jax.process_index() == 0
    self.writer = metrics_lib.MetricsWriter(os.path.join(workdir, "tb"))
    self.progress = metrics_lib.Progress(start_step, num_steps)
    if start_step == 0:
      self.writer.hparams(config.to_dict())

  def end_step(self, step: int, metrics: Mapping[str, Any], state: Any,
               loader_position: Any) -> None:
    """Step `step` (1-based) is done: its metrics written and printed, its checkpoint saved
    when due (always after the last step)."""
    if self.lead:
      self.writer.scalars(step, metrics)
      self.writer.flush()
      print(self.progress.line(step, metrics), flush=True)
    self.checkpointer.save(step, state, data={"loader": loader_position},
                           meta=checkpoint_meta(self.config, step),
                           force=step == self.num_steps)

  def close(self) -> None:
    """Waits for the last checkpoint write and closes the event file."""
    self.checkpointer.close()
    self.writer.close()
