"""The CPU laboratory's experiments: synthetic worlds a tiny policy trains on (docs/results.md),
and `sft_section`, the `sft` section with the keys of their scripted expert."""
from configs import base
from lab.world.expert import SFT_KEYS, ExpertConfig


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
