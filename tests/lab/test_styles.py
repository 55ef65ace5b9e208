"""lab/world/styles.py: one interface per question style, its settings checked, its name on
every gold annotation, and a setting the style does not read refused.

  python -m pytest tests/lab/test_styles.py -q
"""
import asyncio

import pytest

from lab.configs import lab_config
from lab.tasks import style_settings, world_tasks
from lab.world import build_world, styles
from lab.world.expert import ExpertError, expert_episode


def test_each_style_reads_its_own_keys():
  assert styles.style_keys(styles.Deep) == ("min_hops", "max_hops", "shortcut_fraction")
  assert styles.style_keys(styles.Named) == styles.style_keys(styles.Deep)
  assert styles.style_keys(styles.Kinds) == ()
  assert styles.style_keys(styles.Lookup) == ("shortcut_fraction",)
  assert styles.style_keys(styles.Reference) == (
      "shortcut_fraction", "eval_shortcut_fraction", "stale_fraction", "swap_eval_pages")
  assert styles.style_keys(styles.Chain) == (
      "shortcut_fraction", "eval_shortcut_fraction", "stale_fraction", "min_hops", "max_hops")
  assert set(styles.KEYS) == {k for s in styles.STYLES.values() for k in styles.style_keys(s)}


def test_a_key_the_style_does_not_read_is_refused_naming_its_readers():
  with pytest.raises(ValueError, match=r"world.stale_fraction is not read by deep questions "
                     r"\(only by reference, chain\)"):
    styles.make_style("deep", stale_fraction=0.25)
  with pytest.raises(ValueError, match=r"world.min_hops is not read by kinds questions"):
    styles.make_style("kinds", min_hops=1)
  with pytest.raises(ValueError, match=r"swap_eval_pages is not read by chain questions "
                     r"\(only by reference\)"):
    styles.make_style("chain", min_hops=2, max_hops=2, swap_eval_pages=True)
  assert styles.make_style("chain", min_hops=3, max_hops=3).hops == 3
  with pytest.raises(ValueError, match="in \\[0, 1\\]"):
    styles.make_style("reference", eval_shortcut_fraction=1.5)


def test_the_config_passes_the_styles_keys_and_any_other_set_away_from_its_default():
  config = lab_config()
  config.world.style = "reference"
  assert style_settings(config.world) == {"shortcut_fraction": 0.25,
                                          "eval_shortcut_fraction": 0.5,
                                          "stale_fraction": 0.0, "swap_eval_pages": False}
  config.world.min_hops = 1  # a reference world reads no hops: the world refuses it
  with pytest.raises(ValueError, match="world.min_hops is not read by reference"):
    world_tasks(config.world)


@pytest.mark.parametrize("name,keys", [
    ("deep", {}), ("named", {"min_hops": 1, "max_hops": 2}), ("kinds", {}),
    ("lookup", {}), ("reference", {}), ("chain", {"min_hops": 2, "max_hops": 2})])
def test_every_gold_annotation_names_its_style(name, keys):
  size = {"kinds": (80, 24), "lookup": (120, 24)}.get(name, (300, 40))
  world = build_world(2, *size, name, eval_fraction=0.25, distractors=0, **keys)
  assert {r["metadata"]["gold"]["style"] for r in world.train + world.eval} == {name}


def test_the_expert_refuses_a_record_without_a_style():
  world = build_world(2, 300, 40, "reference", eval_fraction=0.25, distractors=0)
  record = world.train[0]
  gold = dict(record["metadata"]["gold"])
  del gold["style"]
  bare = {**record, "metadata": {**record["metadata"], "gold": gold}}
  with pytest.raises(ExpertError, match="style"):
    asyncio.run(expert_episode(bare, world.corpus_backend(), fmt=None))
