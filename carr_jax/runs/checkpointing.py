"""Checkpoints of a training run: a small wrapper over orbax `CheckpointManager`.

One checkpoint per saved step, under `<workdir>/checkpoints/<step>/`, with three named items:
  state  the sharded train state pytree (params, optimizer state, step, rng), saved from and
         restored into its mesh layout (orbax StandardSave / StandardRestore);
  data   JSON: where the data pipeline is (prompt cursor, epoch, ...), so a resumed run sees
         the prompts it has not trained on yet;
  meta   JSON: the run's config snapshot (secrets redacted) and the weight version.
Saves happen every `save_every` steps (or when forced), the newest `keep` are kept, and
writing is asynchronous: `save` returns once the arrays are copied off the devices, and
`close()` (or leaving the `with` block) waits for the last write before the process exits.

Resume order (`resolve_init_source` decides; the trainer acts on the answer):
  1. the workdir's own checkpoint, if one is finalized: the run was interrupted, resume it
     (state, data position and all);
  2. else `checkpoint.init_dir`: a checkpoint of another run (e.g. an SFT run), from
     which only the params are taken (`restore_params`); optimizer and data start fresh;
  3. else `model.hf_path`: HF safetensors weights (loaded by `carr_jax/model/hf_io.py`);
  4. else random init (tests, the CPU demo).
A configured init_dir that holds no checkpoint is an error, not a silent fall-through.

  ckpt = TrainCheckpointer(checkpoint_dir(workdir), save_every=50, keep=3)
  ckpt.save(step, state, data={"cursor": 123}, meta={"config": config, "weight_version": "7"})
  restored = ckpt.restore(with_shardings(jax.eval_shape(init_fn, rng), state_shardings))
  ckpt.close()
"""
from __future__ import annotations

import dataclasses
import enum
import json
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from orbax.checkpoint import checkpoint_managers as policies

from carr_jax.runs.metrics import redact

STATE, DATA, META = "state", "data", "meta"

ExportFn = Callable[[int, Any], None]


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
  """The config's `checkpoint` section."""
  init_dir: str = ""  # orbax checkpoint to initialise params from (e.g. after SFT)
  every: int = 50  # save every N steps (and at the last step)
  keep: int = 3  # checkpoints kept on disk
  hf_export_every: int = 0  # also write an HF directory every N steps (0 = never)

  def __post_init__(self):
    if self.every < 1 or self.keep < 1 or self.hf_export_every < 0:
      raise ValueError(f"checkpoint.every and .keep must be >= 1 and .hf_export_every >= 0, "
                       f"got {self.every}, {self.keep}, {self.hf_export_every}")


class InitSource(str, enum.Enum):
  """Where a run's initial weights come from, in resume-order priority."""
  WORKDIR_CHECKPOINT = "workdir_checkpoint"
  INIT_CHECKPOINT = "init_checkpoint"
  HF_WEIGHTS = "hf_weights"
  RANDOM = "random"


class CheckpointNotFoundError(FileNotFoundError):
  """The requested step (or any step) is not a finalized checkpoint in the directory."""


@dataclasses.dataclass(frozen=True)
class Restored:
  step: int
  state: Any
  data: dict
  meta: dict


def checkpoint_dir(workdir: str) -> str:
  return os.path.join(os.path.abspath(workdir), "checkpoints")


def finalized_steps(directory: str) -> list[int]:
  """Steps with a complete checkpoint; a write cut short by a kill is not listed."""
  return sorted(ocp.utils.checkpoint_steps(directory))


def resolve_init_source(workdir: str, init_dir: str = "", hf_path: str = "") -> InitSource:
  """Applies the resume order of the module docstring to `workdir`, `checkpoint.init_dir`
  and `model.hf_path`."""
  if finalized_steps(checkpoint_dir(workdir)):
    return InitSource.WORKDIR_CHECKPOINT
  if init_dir:
    _state_dir(init_dir)  # raises if it holds no checkpoint
    return InitSource.INIT_CHECKPOINT
  if hf_path:
    return InitSource.HF_WEIGHTS
  return InitSource.RANDOM


def with_shardings(shapes: Any, shardings: Any) -> Any:
  """jax.eval_shape output + a matching tree of shardings -> the abstract restore target."""
  return jax.tree.map(
      lambda s, sharding: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding),
      shapes, shardings)


def _check_abstract(abstract: Any) -> None:
  # Without a sharding orbax would pick a layout itself; the trainer needs the mesh layout.
  for path, leaf in jax.tree_util.tree_leaves_with_path(abstract):
    if getattr(leaf, "sharding", None) is None:
      raise ValueError(f"restore target {jax.tree_util.keystr(path)} has no sharding; build "
                       "the target with with_shardings(jax.eval_shape(...), shardings)")


def _json_default(value: Any) -> Any:
  if isinstance(value, (np.ndarray, np.generic, jax.Array)):
    return np.asarray(value).tolist()  # a NumPy/JAX cursor stays a number, not its text
  return str(value)  # enums, paths and the like


def _jsonable(tree: Any, item: str) -> dict:
  if not isinstance(tree, Mapping):
    raise TypeError(f"checkpoint item {item!r} must be a dict, got {type(tree).__name__}")
  # Through JSON here, so the caller gets plain types back on restore and nothing JSON
  # cannot hold reaches the background writer.
  return json.loads(json.dumps(tree, default=_json_default))


class TrainCheckpointer:
  """Saves and restores (state, data, meta) checkpoints of one run directory.

  Args:
    directory: checkpoint root, usually `checkpoint_dir(workdir)`.
    save_every: `save` writes when step % save_every == 0, when forced, or when the
      cluster has announced a preemption (all processes see it at the same step).
    keep: how many of the newest checkpoints to keep.
    async_save: write in a background thread (default) or block in `save`.
    export_fn: optional `export_fn(step, params)` called on EVERY process after each save
      with the state's (sharded) params, e.g. `hf_io.save_hf` writing HF safetensors for the
      rollout engine, in which every process takes part in the gather and process 0 writes.
    export_params: picks the tree to export from the state.
  """

  def __init__(self, directory: str, *, save_every: int, keep: int, async_save: bool = True,
               export_fn: ExportFn | None = None,
               export_params: Callable[[Any], Any] = lambda state: state["params"]):
    if save_every < 1 or keep < 1:
      raise ValueError(f"save_every ({save_every}) and keep ({keep}) must be >= 1")
    self.directory = os.path.abspath(directory)
    self._export_fn = export_fn
    self._export_params = export_params
    registry = ocp.handlers.DefaultCheckpointHandlerRegistry()
    registry.add(STATE, ocp.args.StandardSave, ocp.handlers.StandardCheckpointHandler)
    registry.add(STATE, ocp.args.StandardRestore, ocp.handlers.StandardCheckpointHandler)
    for item in (DATA, META):
      registry.add(item, ocp.args.JsonSave, ocp.handlers.JsonCheckpointHandler)
      registry.add(item, ocp.args.JsonRestore, ocp.handlers.JsonCheckpointHandler)
    self._manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=async_save, create=True,
            # Every `save_every` steps, plus when the cluster announces a preemption;
            # orbax's default would also save the first step of a fresh run.
            save_decision_policy=policies.AnySavePolicy([
                policies.FixedIntervalPolicy(save_every),
                policies.PreemptionCheckpointingPolicy()])),
        handler_registry=registry)

  def should_save(self, step: int) -> bool:
    return self._manager.should_save(step)

  def all_steps(self) -> list[int]:
    return sorted(self._manager.all_steps())

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def save(self, step: int, state: Any, *, data: Mapping[str, Any], meta: Mapping[str, Any],
           force: bool = False) -> bool:
    """Starts writing checkpoint `step` if it is due (or forced); True if it was started.

    Call on every process. `state` may be donated to the next train step as soon as this
    returns: orbax has copied it to host memory by then.
    """
    # meta holds the config: redacted. data is the loader's position, kept verbatim (a key
    # such as "token_offset" is not a secret and must survive the round trip).
    data_json, meta_json = _jsonable(data, DATA), _jsonable(redact(meta), META)
    saved = self._manager.save(
        step,
        args=ocp.args.Composite(**{
            STATE: ocp.args.StandardSave(state),
            DATA: ocp.args.JsonSave(data_json),
            META: ocp.args.JsonSave(meta_json)}),
        force=force)
    if saved:
      logging.info("checkpoint: step %d started in %s", step, self.directory)
      if self._export_fn is not None:
        self._export_fn(step, self._export_params(state))
    return saved

  def restore(self, abstract_state: Any, step: int | None = None) -> Restored:
    """Restores `step` (default: the latest) with arrays placed as `abstract_state` says.

    `abstract_state` is a tree of jax.ShapeDtypeStruct with shardings (see
    `with_shardings`); every array is read straight into its shards on the mesh.
    """
    _check_abstract(abstract_state)
    self._manager.wait_until_finished()  # a save of this very step may still be in flight
    steps = self.all_steps()
    if step is None:
      if not steps:
        raise CheckpointNotFoundError(f"no checkpoint in {self.directory}")
      step = steps[-1]
    if step not in steps:
      raise CheckpointNotFoundError(
          f"no checkpoint for step {step} in {self.directory}; available steps: {steps}")
    restored = self._manager.restore(
        step,
        args=ocp.args.Composite(**{
            STATE: ocp.args.StandardRestore(abstract_state),
            DATA: ocp.args.JsonRestore(),
            META: ocp.args.JsonRestore()}))
    return Restored(step=step, state=restored[STATE], data=restored[DATA],
                    meta=restored[META])

  def wait_until_finished(self) -> None:
    self._manager.wait_until_finished()

  def close(self) -> None:
    """Waits for pending writes and deletions, then releases the manager."""
    self._manager.wait_until_finished()
    self._manager.close()

  def __enter__(self) -> "TrainCheckpointer":
    return self

  def __exit__(self, *exc_info: Any) -> None:
    self.close()


def _state_dir(path: str, step: int | None = None) -> epath.Path:
  """The `state` item of a step directory, or of the latest/given step under a root."""
  root = epath.Path(os.path.abspath(path))
  if step is None and (root / STATE).is_dir():
    return root / STATE
  steps = finalized_steps(str(root))
  if not steps:
    raise CheckpointNotFoundError(
        f"checkpoint.init_dir={path!r} holds no finalized checkpoint (a checkpoint root or one "
        "step directory is expected)")
  chosen = steps[-1] if step is None else step
  if chosen not in steps:
    raise CheckpointNotFoundError(
        f"no checkpoint for step {chosen} in {path}; available steps: {steps}")
  return root / str(chosen) / STATE


def restore_params(path: str, abstract_params: Any, step: int | None = None,
                   key: str = "params") -> Any:
  """Reads only `state[key]` of another run's checkpoint into the `abstract_params` layout.

  `path` is a checkpoint root (latest step, unless `step` is given) or one step directory.
  The optimizer state and everything else in that checkpoint is left on disk.
  """
  _check_abstract(abstract_params)
  target = {key: abstract_params}
  with ocp.PyTreeCheckpointer() as checkpointer:
    restored = checkpointer.restore(
        _state_dir(path, step),
        args=ocp.args.PyTreeRestore(
            item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
            partial_restore=True))
  return restored[key]
