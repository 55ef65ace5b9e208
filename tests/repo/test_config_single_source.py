"""One default per config key, written once: in configs/base.py (the laboratory's expert keys:
lab/configs/__init__.py), or in the dataclass field whose key they add from it (`add_fields`).

carr_jax.jobs.components builds each dataclass config from one section (`from_section`).
These tests fail when a field has no key (and its builder does not compute it), when a key of
a built section is read by nothing, when a dataclass default differs from base.py's, when
base.py writes a literal for a key a field gives, or when an override of a key does not reach
the built dataclass.
"""
import ast
import collections
import dataclasses
import pathlib
import re

import pytest

from carr_common import dotted
from carr_common.sections import from_section
from carr_jax import cli
from carr_jax.coldstart.step import SFTStepConfig
from carr_jax.jobs import components
from carr_jax.jobs.pipeline import PipelineConfig
from carr_jax.jobs.tasks import DataConfig
from carr_jax.model.config import Qwen3Config
from carr_jax.model.sharding import MeshConfig
from carr_jax.rl import loss, optim, packing, rewards
from carr_jax.rl import train_step as ts
from carr_jax.runs.checkpointing import CheckpointConfig
from configs import base
from judge.config import JudgeConfig
from lab import configs as lab_configs
from lab import tasks as lab_tasks
from lab.world import expert
from lab.world.expert import ExpertConfig
from rollout.agent import RolloutConfig
from rollout.tools.web import WebConfig

# (dataclass, its section, its renamed fields, the fields its builder computes), as the
# builders of carr_jax.jobs.components call from_section.
BUILT = [
    (Qwen3Config, "model", {}, set(components.ARCHITECTURE)),
    (optim.OptimConfig, "optim", {}, set()),
    (loss.LossConfig, "loss", {}, set()),
    (ts.StepConfig, "batch", {},
     {"temperature", "loss_positions", "on_policy", "shared_prefix", "routing_replay",
      "vocab"}),
    (SFTStepConfig, "batch", {}, {"vocab", "shared_prefix"}),
    (rewards.RewardConfig, "reward", {}, set()),
    (packing.PackingConfig, "batch", {}, {"row_multiple", "vocab_size", "routes"}),
    (ExpertConfig, "sft", expert.SFT_KEYS, set()),
    (RolloutConfig, "rollout", {}, set()),
    (components.EngineConfig, "rollout", {}, set()),
    (PipelineConfig, "rollout", {}, set()),
    (WebConfig, "tools", {}, set()),
    (JudgeConfig, "judge", {}, {"cache_path"}),
    (DataConfig, "data", {}, set()),
    (components.TrainConfig, "train", {}, set()),
    (CheckpointConfig, "checkpoint", {}, set()),
    (MeshConfig, "mesh", {}, set()),
    (components.SFTConfig, "sft", {}, set()),
    (components.ModelSource, "model", {}, set()),
]

# Keys of the built sections that no dataclass field takes, and the code that reads them.
READ_ELSEWHERE = {
    "tools.backend": "components.tool_backend", "judge.cache_path": "components.judge_config",
    "sft.expert_max_hops": "lab.tasks", "sft.expert_samples": "lab.tasks",
}


def full_config():
  """configs/base.py's keys with every section the builders read: the laboratory's task
  source section and its SFT keys (data.source stays base's default)."""
  c = base.get_config()
  c[lab_tasks.SECTION] = lab_tasks.config_section()
  c.sft = lab_configs.sft_section()
  return c


def key_of(section, renamed, field):
  return f"{section}.{renamed.get(field, field)}"


def has_key(config, key):
  try:
    dotted.get(config, key)
  except (KeyError, AttributeError):
    return False
  return True


def default_of(field):
  if field.default is not dataclasses.MISSING:
    return field.default
  if field.default_factory is not dataclasses.MISSING:
    return field.default_factory()
  return dataclasses.MISSING


def test_every_field_has_a_key_or_is_computed():
  config = full_config()
  for cls, section, renamed, computed in BUILT:
    names = {f.name for f in dataclasses.fields(cls)}
    assert computed <= names and set(renamed) <= names, cls
    missing = [key_of(section, renamed, f.name) for f in dataclasses.fields(cls)
               if f.name not in computed
               and not has_key(config, key_of(section, renamed, f.name))]
    assert not missing, f"{cls.__qualname__}: fields without a key in configs/base.py: {missing}"


def test_every_key_of_a_built_section_is_read():
  config = full_config()
  taken = {key_of(section, renamed, f.name) for cls, section, renamed, computed in BUILT
           for f in dataclasses.fields(cls) if f.name not in computed}
  sections = {section for _, section, _, _ in BUILT}
  keys = {f"{sec}.{k}" for sec in sections for k in config[sec].keys()}
  assert not keys - taken - set(READ_ELSEWHERE), "keys no field takes and nothing reads"
  assert not set(READ_ELSEWHERE) - keys, "READ_ELSEWHERE names keys that do not exist"
  assert not set(READ_ELSEWHERE) & taken, "READ_ELSEWHERE names keys a field takes"


def test_dataclass_defaults_equal_base():
  config = full_config()
  disagree = []
  for cls, section, renamed, computed in BUILT:
    for f in dataclasses.fields(cls):
      default = default_of(f)
      if f.name in computed or default is dataclasses.MISSING:
        continue
      key = key_of(section, renamed, f.name)
      if dotted.get(config, key) != default:
        disagree.append(f"{cls.__qualname__}.{f.name}={default!r} vs {key}="
                        f"{dotted.get(config, key)!r}")
  assert not disagree, disagree


SOURCES = (pathlib.Path(base.__file__), pathlib.Path(lab_configs.__file__))  # the keys' writers


def _written_literals() -> set[str]:
  """The keys configs/base.py and lab/configs/__init__.py assign a literal to:
  `c.<section>.<key> = ...` and, in the sft sections, `s.<key> = ...`."""
  written = set()
  for node in (n for path in SOURCES for n in ast.walk(ast.parse(path.read_text()))):
    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
      continue  # a value the function was given (use_task_source's data.source)
    for target in getattr(node, "targets", []):
      if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute) \
          and isinstance(target.value.value, ast.Name) and target.value.value.id == "c":
        written.add(f"{target.value.attr}.{target.attr}")
      elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
          and target.value.id == "s":
        written.add(f"sft.{target.attr}")
  return written


def test_a_key_a_dataclass_gives_is_not_written_again_in_base():
  """Each default is written once: a field's key takes the field's default (`add_fields`),
  and base.py assigns it no literal of its own (reward.alpha among them)."""
  written = _written_literals()
  assert "judge.cache_path" in written and "sft.expert_max_hops" in written  # parsed
  twice = sorted(key_of(section, renamed, f.name) for cls, section, renamed, computed in BUILT
                 for f in dataclasses.fields(cls)
                 if f.name not in computed and key_of(section, renamed, f.name) in written)
  assert twice == [], twice


def test_base_names_beside_each_add_fields_the_keys_it_adds():
  """The comment above each `add_fields(c.<section>, ...)` (or `add_fields(s, ...)`) lists the
  keys the dataclasses give that section, so a key is found in base.py by its name."""
  lines = [line for path in SOURCES for line in path.read_text().splitlines()]
  listed: dict[str, set[str]] = collections.defaultdict(set)
  for i, line in enumerate(lines):
    call = re.match(r"\s*(?:base\.)?add_fields\((?:c\.(\w+)|s),", line)
    if not call:
      continue
    k, comment = i - 1, []
    while lines[k].strip().startswith("#"):
      comment.insert(0, lines[k].strip().lstrip("# "))
      k -= 1
    names = " ".join(comment).split(":", 1)[-1]
    listed[call.group(1) or "sft"] |= set(re.findall(r"\w+", names))
  given = collections.defaultdict(set)
  for cls, section, renamed, computed in BUILT:
    given[section] |= {renamed.get(f.name, f.name) for f in dataclasses.fields(cls)
                       if f.name not in computed}
  assert {sec: given[sec] - listed[sec] for sec in given if given[sec] - listed[sec]} == {}


def test_from_section_names_a_missing_key_and_refuses_an_unknown_field():
  section = full_config().reward
  del section["alpha"]
  with pytest.raises(KeyError, match="RewardConfig.alpha needs the config key 'alpha'"):
    from_section(rewards.RewardConfig, section)
  with pytest.raises(TypeError, match="colour"):
    from_section(rewards.RewardConfig, full_config().reward, colour=1)


def test_command_line_overrides_reach_the_dataclasses(tmp_path):
  config = cli.load_config("lab/configs/demo_cpu.py", [
      "judge.max_citations=3", "judge.temperature=0.6", "reward.std_ddof=0",
      "optim.eps=1e-6", "rollout.tool_timeout_s=5", "rollout.system_prompt=Be brief.",
      "loss.log_ratio_clamp=10", "batch.coarse_rows=false", "tools.max_redirects=2"])
  judge = components.judge_config(config, str(tmp_path))
  assert (judge.max_citations, judge.temperature) == (3, 0.6)
  assert judge.cache_path == str(tmp_path / "judge_cache.sqlite")
  assert components.reward_config(config).std_ddof == 0
  assert components.optim_config(config).eps == 1e-6
  rollout = components.rollout_config(config)
  assert (rollout.tool_timeout_s, rollout.system_prompt) == (5.0, "Be brief.")
  assert components.loss_config(config).log_ratio_clamp == 10.0
  mesh = type("Mesh", (), {"shape": {"data": 2, "fsdp": 1, "expert": 1}})()
  packing = components.packing_config(config, mesh, 1000)
  assert (packing.coarse_rows, packing.row_multiple, packing.vocab_size) == (False, 2, 1000)
  assert from_section(WebConfig, config.tools).max_redirects == 2


def test_every_world_key_builds_the_world():
  """The `world` section is the synthetic world's settings, all read where the laboratory's
  task source builds it (lab.tasks.world_tasks) but output_vocab_worlds, which its output_ids
  reads (the output vocabulary of the worlds seeded after it)."""
  class Reads:
    def __init__(self, section):
      self.section, self.keys = section, set()

    def __getattr__(self, key):
      self.keys.add(key)
      return self.section[key]

  world = lab_configs.world_section()
  reads = Reads(world)
  train, evals, corpus = lab_tasks.world_tasks(reads)
  assert reads.keys == set(world.keys()) - {"output_vocab_worlds"} and train and evals and corpus
