"""The optimizer both trainers step with: AdamW (paper: lr 2e-6 constant, betas 0.9/0.98,
weight decay 0.1) with optional linear warmup, a final linear decay to 0 (warmup-stable-decay)
and global-norm clipping; weight decay skips norm scales (Megatron's default, which the
release inherits).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

import jax
import optax

from carr_jax.model import sharding


@dataclasses.dataclass(frozen=True)
class OptimConfig:
  learning_rate: float = 2e-6  # after warmup (paper: 2e-6, constant)
  warmup_steps: int = 0  # linear warmup (paper: none)
  decay_from: int = 0  # with decay_steps > 0: from this step, linear decay to 0 ...
  decay_steps: int = 0  # ... over this many steps (warmup-stable-decay); 0: constant (paper)
  b1: float = 0.9
  b2: float = 0.98  # (paper: 0.98)
  eps: float = 1e-8  # Adam's epsilon; larger damps updates of parameters with tiny gradients
  weight_decay: float = 0.1  # (paper: 0.1)
  grad_clip_norm: float = 1.0  # 0 disables global-norm clipping


def _decay_mask(params):
  return jax.tree_util.tree_map_with_path(
      lambda path, _: not re.search(r"norm", sharding.path_str(path)), params)


def learning_rate(cfg: OptimConfig) -> Any:
  """A float, or optax's schedule: linear warmup, constant, then linear decay to 0."""
  if cfg.warmup_steps <= 0 and cfg.decay_steps <= 0:
    return cfg.learning_rate
  if cfg.decay_steps > 0 and cfg.decay_from < cfg.warmup_steps:
    raise ValueError(f"optim.decay_from={cfg.decay_from} is inside the warmup "
                     f"(optim.warmup_steps={cfg.warmup_steps})")
  pieces, bounds = [], []
  if cfg.warmup_steps > 0:
    pieces.append(optax.linear_schedule(0.0, cfg.learning_rate, cfg.warmup_steps))
    bounds.append(cfg.warmup_steps)
  pieces.append(optax.constant_schedule(cfg.learning_rate))
  if cfg.decay_steps > 0:
    pieces.append(optax.linear_schedule(cfg.learning_rate, 0.0, cfg.decay_steps))
    bounds.append(cfg.decay_from)
  return optax.join_schedules(pieces, bounds)


def make_optimizer(cfg: OptimConfig) -> optax.GradientTransformation:
  lr = learning_rate(cfg)
  adamw = optax.adamw(lr, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                      weight_decay=cfg.weight_decay, mask=_decay_mask)
  if cfg.grad_clip_norm > 0:
    return optax.chain(optax.clip_by_global_norm(cfg.grad_clip_norm), adamw)
  return adamw
