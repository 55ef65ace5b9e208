"""The laboratory's task source (`data.source="lab.tasks"`): the synthetic world of the `world`
section, built in-process, as the jobs' task loading (carr_jax/jobs/tasks.py) asks of a source:

- `SECTION`, `config_section()`: the config section it owns (`world`, lab.configs.world_section);
- `tasks(config)`: (train records, eval records, corpus page records);
- `output_ids(config, fmt)`: the sorted token ids its questions, pages and expert can need (the
  restricted output vocabulary of `model.output_vocab="task"`);
- `expert_trajectories(config, fmt)`: the scripted expert's SFT episodes (`sft.data="expert"`);
- `eval_metrics(config, records, breakdowns)` and `SUMMARY_NAMES`: what a held-out evaluation
  adds from the world's gold flags (lab/metrics.py).
"""
from __future__ import annotations

import asyncio
from typing import Any

from carr_common.sections import from_section
from carr_jax.jobs import components
from lab import metrics
from lab.configs import sft_section, world_section
from lab.world import build_world, expert, styles
from lab.world.output_vocab import world_output_ids
from rollout.tools.corpus import CorpusBackend


SECTION = "world"
config_section = world_section
SUMMARY_NAMES = metrics.SUMMARY_NAMES


def eval_metrics(config: Any, records, breakdowns) -> tuple[dict, dict]:
  """(metrics, per-question lists) of a held-out evaluation (lab.metrics.eval_metrics)."""
  threshold = components.reward_config(config).shortcut_threshold
  return metrics.eval_metrics(records, breakdowns, threshold)


WORLD_KEYS = ("eval_fraction", "locality", "distractors", "short_names", "prompt", "mark_names")


def style_settings(world_cfg: Any) -> dict:
  """The style keys `build_world` gets: those `world.style` reads, and any other set away from
  its default (which the style then refuses, lab/world/styles.py make_style)."""
  defaults, style = world_section(), styles.STYLES.get(world_cfg.style)
  reads = styles.style_keys(style) if style else ()
  return {k: getattr(world_cfg, k) for k in styles.KEYS
          if k in reads or getattr(world_cfg, k) != defaults[k]}


def world_tasks(world_cfg: Any) -> tuple[list[dict], list[dict], list[dict]]:
  """(train records, eval records, corpus page records) of the synthetic world of `world.*`."""
  w = world_cfg
  world = build_world(w.seed, w.entities, w.questions, w.style, **style_settings(w),
                      **{k: getattr(w, k) for k in WORLD_KEYS})
  return world.train, world.eval, world.corpus()


def tasks(config: Any) -> tuple[list[dict], list[dict], list[dict]]:
  return world_tasks(config.world)


def output_ids(config: Any, fmt) -> tuple[int, ...]:
  """The ids the world of `world.*`, and the `world.output_vocab_worlds` worlds seeded after it,
  can need (lab.world.output_vocab); `fmt` a rollout.chat.ChatFormat."""
  cfg, ids = config.world.copy_and_resolve_references(), set()
  for k in range(1 + config.world.output_vocab_worlds):
    cfg.seed = config.world.seed + k
    ids.update(world_output_ids(*world_tasks(cfg), fmt))
  return tuple(sorted(ids))


def expert_keys(sft: Any):
  """The `sft` section with the expert's keys (lab.configs.sft_section) it lacks at their
  defaults: a config built on configs/base.py's section alone gets the default expert."""
  full = sft_section()
  for key in full:
    if key in sft:
      full[key] = sft[key]
  return full


def expert_trajectories(config: Any, fmt) -> list[dict]:
  """The scripted expert's trajectories (lab.world.expert, set by `sft.expert_*`) on the
  training questions of at most `sft.expert_max_hops` hops, `sft.expert_samples` each."""
  s = expert_keys(config.sft)
  train, _, corpus = tasks(config)
  train = [r for r in train if r["metadata"]["gold"]["hops"] <= s.expert_max_hops]
  return asyncio.run(expert.expert_trajectories(
      train, CorpusBackend.from_records(corpus), fmt,
      from_section(expert.ExpertConfig, s, expert.SFT_KEYS), s.expert_samples))
