"""The CPU laboratory's experiments: synthetic worlds a tiny policy trains on (docs/results.md).

`lab_config()`, configs/base.py's config with the laboratory's task source and its `world`
section (`world_section`); `sft_section`, the `sft` section with the keys of the scripted expert.
"""
import ml_collections

from configs import base
from lab.world import styles
from lab.world.expert import SFT_KEYS, ExpertConfig


def lab_config() -> ml_collections.ConfigDict:
  """configs/base.py's keys, the data from the laboratory's task source (lab/tasks.py) and its
  `world` section: what every laboratory config starts from."""
  c = base.get_config()
  base.use_task_source(c, "lab.tasks")
  return c


def world_section() -> ml_collections.ConfigDict:
  """The synthetic world's settings (lab/tasks.py builds the world from them), each key
  documented here."""
  w = ml_collections.ConfigDict()
  w.seed = 0  # its seed
  w.entities = 60  # its size (entities)
  w.questions = 40  # synthetic questions (train + eval)
  w.eval_fraction = 0.25  # share of synthetic questions held out for eval
  # the questions' style, lab/world/styles.py: deep | named | kinds | lookup | reference | chain
  w.style = "deep"
  # the styles' settings (lab/world/styles.py: each style reads some; setting one its style
  # does not read is an error): min_hops, max_hops (a chain: its length, both equal),
  # shortcut_fraction, eval_shortcut_fraction, stale_fraction, swap_eval_pages
  base.add_fields(w, styles.Deep, styles.Reference)
  w.locality = 0.0  # chance a person studies/works in their birth city (graph.py)
  w.distractors = 6  # distractor sentences per synthetic page (0-6)
  w.short_names = False  # one-token names, one-word people (lab/world/graph.py)
  w.prompt = "full"  # "full" | "brief" (2 terse tool schemas, one-line rule) | "answer"
  w.mark_names = False  # other entities' names in **bold**, like links (lab/world/pages.py)
  w.output_vocab_worlds = 0  # model.output_vocab="task": also the ids of the worlds
  # seeded world.seed+1..+N
  return w


def sft_section():
  """configs/base.py's `sft` section and the scripted expert's keys, which `sft.data="expert"`
  reads (lab/tasks.py expert_trajectories); the laboratory's SFT configs add it as
  `c.sft = sft_section()`."""
  s = base.sft_section()
  s.expert_max_hops = 4  # only questions of at most this many hops (shorter episodes)
  s.expert_samples = 1  # episodes per question ("guess": each its own option)
  # lab/world/expert.py (ExpertConfig, keys SFT_KEYS): expert_search_results, expert_find,
  # expert_answer, expert_known_fraction, expert_chain_cite_all, expert_chain_cite_first,
  # expert_chain_lure
  base.add_fields(s, ExpertConfig, renamed=SFT_KEYS)
  return s
