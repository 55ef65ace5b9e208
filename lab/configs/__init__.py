"""The CPU laboratory's experiments: synthetic worlds a tiny policy trains on (docs/results.md).

`lab_config()`, configs/base.py's config with the laboratory's task source and its `world`
section (`world_section`); `sft_section`, the `sft` section with the keys of the scripted expert.
"""
import ml_collections

from configs import base
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
  w.style = "deep"  # "deep" (vague clues) | "named" (head named) | "kinds" (named.py)
  # | "lookup" (kinds with glossary evidence, lookup.py) | "reference" (lookup.py: every question
  # has its own link; the relation's kind is right except on exceptions) | "chain" (reference
  # questions whose evidence is a chain of pages, lab/world/chain.py)
  w.min_hops = 2  # synthetic question lengths in hops ("named": from 1)
  w.max_hops = 4
  w.shortcut_fraction = 0.25  # share of (multi-hop; "lookup": all; "reference":
  # training) questions admitting a shortcut
  w.eval_shortcut_fraction = 0.5  # "reference": the same for held-out questions
  w.stale_fraction = 0.0  # "reference", "chain": share of training shortcut questions
  # whose glossary page (a chain's last) is stale, stating the other kind (lab/world/lookup.py)
  w.swap_eval_pages = False  # "reference": every held-out page states the other kind,
  # the gold following it (the page-swap evaluation, lab/probes/page_swap.py)
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
