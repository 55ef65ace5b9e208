"""TensorBoard metrics for the trainer, written with the `tensorboard` package alone.

`MetricsWriter(logdir)` writes event files that TensorBoard's SCALARS, HISTOGRAMS, TEXT,
IMAGES and HPARAMS tabs read, using `EventFileWriter` and the protos in `tensorboard.compat.proto`
(no TensorFlow, no torch). Only process 0 writes; on other processes the writer still
validates its input (so a bad key fails on every host alike) and then does nothing.

Keys are grouped by prefix (`train/`, `rollout/`, `judge/`, `perf/`, `eval/`); any other key
is an error, so TensorBoard's tag groups stay the five sections the trainer reports.

`read_scalars(logdir, tags)` reads scalar series back (reports, benchmarks).

Helpers: `check_finite` stops training on a non-finite loss or gradient with an error naming
the keys; `Progress.line` / `format_summary` is the one-line console view of a step (step
N/M, ETA); `redact` masks secrets in a config before it is written anywhere
(hyper-parameters here, the checkpoint's `meta`).

  writer = MetricsWriter(workdir)
  writer.hparams(config)                       # step 0: HPARAMS tab + a TEXT table
  writer.scalars(step, {"train/loss": 0.3, "perf/step_time_s": 1.2})
  writer.histogram(step, "rollout/staleness", values, limits=[0.5, 1.5, 2.5])
  writer.close()
  # then: tensorboard --logdir <workdir> --host 127.0.0.1
"""
from __future__ import annotations

import io
import os
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import numpy as np
from PIL import Image

from carr_common import redaction
from tensorboard.compat.proto import event_pb2, summary_pb2, types_pb2
from tensorboard.plugins.hparams import metadata as hparams_metadata
from tensorboard.plugins.hparams import plugin_data_pb2 as hparams_pb2
from tensorboard.plugins.text import metadata as text_metadata
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

KNOWN_PREFIXES = ("train/", "rollout/", "judge/", "perf/", "eval/")
CONFIG_TEXT_TAG = "hparams/config"  # the flattened config as a TEXT table (fallback view)
# Shown by `format_summary` when present; the short name is the key without its prefix.
SUMMARY_KEYS = (
    "train/loss", "train/grad_norm", "rollout/reward_mean", "judge/rubric_reward_mean",
    "rollout/tool_calls", "rollout/well_formed_tool_call_rate",
    "judge/failed_calls", "rollout/failed", "perf/step_time_s",
)

# Words (of a key split at `_`, `-`, `.`, camelCase) that mark a secret. Whole words, not
# substrings: "max_tokens" and "tokenizer_path" are hyper-parameters, "hf_token" is not.
_SECRET_WORDS = frozenset({
    "password", "passwords", "passwd", "secret", "secrets", "token", "apikey", "apikeys",
    "credential", "credentials",
})


class NonFiniteError(FloatingPointError):
  """A metric the trainer must not continue past (loss, gradient norm) is NaN or inf."""

  def __init__(self, step: int, bad: Mapping[str, Any]):
    self.step = step
    self.keys = sorted(bad)
    shown = ", ".join(f"{k}={bad[k]!r}" for k in self.keys)
    super().__init__(f"step {step}: non-finite metrics: {shown}")


def validate_key(key: str) -> str:
  """Returns `key` if it is `<known prefix><name>`, else raises a ValueError naming it."""
  if not isinstance(key, str) or not any(
      key.startswith(p) and len(key) > len(p) for p in KNOWN_PREFIXES):
    raise ValueError(
        f"metric key {key!r} must start with one of {', '.join(KNOWN_PREFIXES)} "
        "followed by a name")
  return key


def _key_words(key: str) -> list[str]:
  snake = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(key))
  return re.findall(r"[a-z0-9]+", snake.lower())


def is_secret_key(key: str) -> bool:
  """True for keys such as `api_key`, `openai_api_key`, `hf_token`, `db_password`."""
  words = _key_words(key)
  if _SECRET_WORDS.intersection(words):
    return True
  return any(a == "api" and b in ("key", "keys") for a, b in zip(words, words[1:]))


def _secret_env_values() -> set[str]:
  # A secret copied into an innocently named config field is still a secret: mask any value
  # equal to the value of a secret-named environment variable (short values are too common).
  return {v for k, v in os.environ.items() if is_secret_key(k) and len(v) >= 8}


def _as_plain(config: Any) -> Any:
  """ml_collections ConfigDict / FrozenConfigDict -> dict; everything else unchanged."""
  to_dict = getattr(config, "to_dict", None)
  return to_dict() if callable(to_dict) else config


def redact(config: Any) -> Any:
  """Returns a copy of `config` (dict / ConfigDict, nested) with secret values masked.

  A value is masked when its key looks secret (`is_secret_key`) or when it equals the value
  of a secret-named environment variable; any other string loses the credentials it carries
  inside (`carr_common.redaction.redact`: URL passwords, `sk-` keys, Authorization-like
  values). Lists and tuples are walked; other leaves are kept.
  """
  env_secrets = _secret_env_values()

  def walk(value: Any) -> Any:
    value = _as_plain(value)
    if isinstance(value, Mapping):
      return {k: redaction.REDACTED if is_secret_key(k) else walk(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
      return type(value)(walk(v) for v in value)
    if isinstance(value, str):
      if value in env_secrets:
        return redaction.REDACTED
      return redaction.redact(value, tuple(env_secrets))
    return value

  return walk(config)


def flatten_config(config: Any, prefix: str = "") -> dict[str, bool | int | float | str]:
  """Nested config -> {"a.b.c": leaf}; leaves become bool/int/float/str (hparams types)."""
  flat: dict[str, bool | int | float | str] = {}
  for key, value in _as_plain(config).items():
    name = f"{prefix}{key}"
    value = _as_plain(value)
    if isinstance(value, Mapping):
      flat.update(flatten_config(value, prefix=f"{name}."))
    elif isinstance(value, (bool, int, float, str)):
      flat[name] = value
    else:  # None, lists, tuples, enums: shown as their text
      flat[name] = str(value)
  return flat


def _to_float(key: str, value: Any) -> float:
  array = np.asarray(value)
  if array.size != 1:
    raise ValueError(f"metric {key!r} must be a scalar, got shape {array.shape}")
  return float(array.reshape(()))


def check_finite(metrics: Mapping[str, Any], step: int,
                 keys: Iterable[str] | None = None) -> None:
  """Raises NonFiniteError naming every non-finite value among `keys` (default: all).

  Pass `keys` to check only what must stop training (loss, gradient norm): a NaN mean over
  an empty group of rollouts is worth reporting, not worth stopping for.
  """
  names = list(metrics) if keys is None else list(keys)
  missing = [k for k in names if k not in metrics]
  if missing:
    raise KeyError(f"check_finite: metrics {missing} missing at step {step}")
  bad = {}
  for k in names:
    array = np.asarray(metrics[k], dtype=np.float64)
    if not np.all(np.isfinite(array)):
      bad[k] = array.tolist()
  if bad:
    raise NonFiniteError(step, bad)


def format_summary(step: int, metrics: Mapping[str, Any],
                   keys: Iterable[str] = SUMMARY_KEYS, total: int | None = None,
                   eta_s: float | None = None) -> str:
  """`step 12/40 | loss 0.3142 | grad_norm 1.07 | step_time_s 3.21 | eta 1:33` (missing keys
  skipped; `/total` and the ETA only when given)."""
  parts = [f"step {step}" + (f"/{total}" if total is not None else "")]
  for key in keys:
    if key in metrics:
      parts.append(f"{key.split('/', 1)[1]} {_to_float(key, metrics[key]):.4g}")
  if eta_s is not None:
    parts.append(f"eta {format_duration(eta_s)}")
  return " | ".join(parts)


def format_duration(seconds: float) -> str:
  """`42` s -> "0:42", 3725 s -> "1:02:05"."""
  minutes, secs = divmod(int(round(max(seconds, 0.0))), 60)
  hours, minutes = divmod(minutes, 60)
  return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


# What a run leaves in its workdir, as its closing summary names it.
RUN_OUTPUTS = (("tensorboard", "tb"), ("checkpoints", "checkpoints"), ("hf_exports", "hf"),
               ("trajectories", "trajectories"), ("evaluations", "eval"))


def output_lines(workdir: str) -> list[str]:
  """`tensorboard: /abs/workdir/tb`, ... for each output the run has written."""
  return [f"{name}: {os.path.join(workdir, sub)}" for name, sub in RUN_OUTPUTS
          if os.path.exists(os.path.join(workdir, sub))]


class Progress:
  """The console line of each step: step N of M and the ETA from this process's steps so far
  (a resumed run counts only the steps it ran itself)."""

  def __init__(self, first_step: int, total: int, clock=time.perf_counter):
    self.first_step, self.total, self.clock = first_step, total, clock
    self.started = clock()

  def eta_s(self, step: int) -> float:
    """Seconds left after `step` (1-based) steps are done."""
    done = step - self.first_step
    per_step = (self.clock() - self.started) / max(done, 1)
    return per_step * max(self.total - step, 0)

  def line(self, step: int, metrics: Mapping[str, Any]) -> str:
    return format_summary(step, metrics, total=self.total, eta_s=self.eta_s(step))


def encode_png(image: Any) -> tuple[bytes, int, int, int]:
  """[H, W] or [H, W, C] (C in 1, 3, 4), uint8 or float in [0, 1] -> (png, H, W, C)."""
  array = np.asarray(image)
  if array.ndim == 2:
    array = array[:, :, None]
  if array.ndim != 3 or array.shape[-1] not in (1, 3, 4):
    raise ValueError(f"image must be [H, W] or [H, W, C] with C in (1, 3, 4), "
                     f"got shape {array.shape}")
  if array.dtype != np.uint8:
    if not np.issubdtype(array.dtype, np.floating):
      raise ValueError(f"image must be uint8 or float in [0, 1], got {array.dtype}")
    array = np.round(np.clip(array, 0.0, 1.0) * 255.0).astype(np.uint8)
  height, width, channels = array.shape
  buffer = io.BytesIO()
  Image.fromarray(array[:, :, 0] if channels == 1 else array).save(buffer, format="PNG")
  return buffer.getvalue(), height, width, channels


def _text_value(tag: str, rows: np.ndarray) -> summary_pb2.Summary.Value:
  # A string tensor with the text plugin's metadata: a scalar renders as markdown, an
  # [N, 2] array as a table.
  return summary_pb2.Summary.Value(
      tag=tag,
      metadata=text_metadata.create_summary_metadata(display_name=tag, description=""),
      tensor=tensor_util.make_tensor_proto(rows, dtype=types_pb2.DT_STRING))


def _hparams_value(flat: Mapping[str, bool | int | float | str]) -> summary_pb2.Summary.Value:
  info = hparams_pb2.SessionStartInfo(start_time_secs=time.time())
  for name, value in flat.items():
    if isinstance(value, bool):  # bool before int: True is an int in Python
      info.hparams[name].bool_value = value
    elif isinstance(value, (int, float)):
      info.hparams[name].number_value = float(value)
    else:
      info.hparams[name].string_value = value
  plugin_data = hparams_pb2.HParamsPluginData(session_start_info=info)
  return summary_pb2.Summary.Value(
      tag=hparams_metadata.SESSION_START_INFO_TAG,
      metadata=hparams_metadata.create_summary_metadata(plugin_data),
      tensor=hparams_metadata.NULL_TENSOR)


class MetricsWriter:
  """TensorBoard event writer for one run directory; a validating no-op off process 0."""

  def __init__(self, logdir: str, *, process_index: int | None = None,
               flush_secs: float = 30.0):
    index = jax.process_index() if process_index is None else process_index
    self.logdir = logdir
    self._writer = EventFileWriter(logdir, flush_secs=flush_secs) if index == 0 else None
    self._closed = False

  @property
  def active(self) -> bool:
    return self._writer is not None

  def _write(self, step: int, values: list[summary_pb2.Summary.Value]) -> None:
    if self._closed:  # dropping metrics silently would hide a trainer bug
      raise RuntimeError(f"MetricsWriter({self.logdir!r}) is closed")
    if self._writer is not None:
      self._writer.add_event(event_pb2.Event(
          wall_time=time.time(), step=int(step), summary=summary_pb2.Summary(value=values)))

  def scalars(self, step: int, metrics: Mapping[str, Any]) -> None:
    """Writes every (prefixed) key of `metrics` as a scalar at `step`."""
    values = [summary_pb2.Summary.Value(tag=validate_key(k), simple_value=_to_float(k, v))
              for k, v in metrics.items()]
    self._write(step, values)

  def histogram(self, step: int, tag: str, values: Any, limits: Iterable[float]) -> None:
    """Writes `values` as one histogram (HISTOGRAMS tab): bucket i counts the values in
    (limits[i-1], limits[i]]; a last bucket up to the largest float takes the rest."""
    values = np.asarray(values, np.float64).reshape(-1)
    edges = [*map(float, limits), float(np.finfo(np.float64).max)]
    counts = np.bincount(np.searchsorted(edges, values, side="left"), minlength=len(edges))
    proto = summary_pb2.HistogramProto(
        min=float(values.min()) if values.size else 0.0,
        max=float(values.max()) if values.size else 0.0, num=float(values.size),
        sum=float(values.sum()), sum_squares=float(np.square(values).sum()),
        bucket_limit=edges, bucket=[float(c) for c in counts[:len(edges)]])
    self._write(step, [summary_pb2.Summary.Value(tag=validate_key(tag), histo=proto)])

  def text(self, step: int, tag: str, text: str) -> None:
    """Writes markdown `text` under `tag` (TEXT tab)."""
    self._write(step, [_text_value(validate_key(tag), np.asarray(text, dtype=object))])

  def image(self, step: int, tag: str, image: Any) -> None:
    """Writes one image ([H, W(, C)], uint8 or float in [0, 1]) as PNG (IMAGES tab)."""
    png, height, width, channels = encode_png(image)
    self._write(step, [summary_pb2.Summary.Value(
        tag=validate_key(tag),
        image=summary_pb2.Summary.Image(
            height=height, width=width, colorspace=channels, encoded_image_string=png))])

  def hparams(self, config: Any) -> dict[str, bool | int | float | str]:
    """Writes the redacted, flattened config at step 0 (HPARAMS tab and a TEXT table).

    Returns the flattened dict that was written.
    """
    flat = flatten_config(redact(config))
    table = np.asarray([[k, str(v)] for k, v in sorted(flat.items())] or [["", ""]],
                       dtype=object)  # [N, 2]
    self._write(0, [_hparams_value(flat), _text_value(CONFIG_TEXT_TAG, table)])
    return flat

  def flush(self) -> None:
    if self._writer is not None:
      self._writer.flush()

  def close(self) -> None:
    if self._writer is not None and not self._closed:
      self._writer.close()
    self._closed = True

  def __enter__(self) -> "MetricsWriter":
    return self

  def __exit__(self, *exc_info: Any) -> None:
    self.close()


def read_scalars(logdir: str, tags: Mapping[str, str]) -> dict[str, list[float]]:
  """name -> the values of TensorBoard scalar `tags[name]` under `logdir`, in step order
  ([] for a tag never written)."""
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
  events = EventAccumulator(logdir, size_guidance={"scalars": 0})
  events.Reload()
  have = set(events.Tags()["scalars"])
  return {name: [e.value for e in sorted(events.Scalars(tag), key=lambda e: e.step)]
          if tag in have else [] for name, tag in tags.items()}
