"""The chain world: the reference world's questions, their evidence two glossary pages long.

    bash scripts/reproduce_chains.sh [OUT_DIR]  # per world: two SFT stages, then four methods

The page of the question's link names the next term, whose page states the kind; the first
page also states a neighbouring record's kind, the lure (the relation's usual kind), so a reply
that answers it citing the first page has a supported rubric cut off from the answer
(lab/world/chain.py). `:sft` starts from the reference world's cold start
(lookup_cpu.py:sft) and imitates an expert whose searched replies answer the lure on 40% of
samples and otherwise cite both pages, the first or the last. `:stale` is the comparison's RL:
the last page is stale on a quarter of each relation's training shortcut questions, so the
whole chain, the lure and the shortcut are each right on ~80% of training questions and only
the rubric reward tells them apart; `:main` the same without stale pages. Results:
docs/results.md.
"""
from lab.configs import lookup_cpu


def chain_world(c) -> None:
  """The world and model every stage uses: lookup_cpu's, with 2-page chains."""
  lookup_cpu.lookup_world(c)
  c.world.style = "chain"
  c.world.min_hops = 2
  c.world.max_hops = 2
  c.rollout.max_turn_tokens = 96  # the cited reply is ~70 tokens
  c.rollout.max_context_tokens = 1024  # a cited expert episode (2 searches, 2 opens) is ~880
  c.rollout.max_tool_calls = 5  # the expert makes 4; one to spare
  c.batch.row_lengths = (1024,)  # one episode per row


def get_config(arg=None):
  """`arg` "sft": the cold start; "main": C-GRPO with held-out avg@4 at the start and end;
  "stale": "main" on stale training pages (the comparison's RL)."""
  c = lookup_cpu.get_config(arg)
  chain_world(c)
  if arg == "sft":  # the second stage; checkpoint.init_dir: the reference cold start
    c.sft.expert_max_hops = 2
    c.sft.expert_chain_lure = 0.4  # of the searched replies; of the others:
    c.sft.expert_chain_cite_all = 0.5  # both pages; else one page,
    c.sft.expert_chain_cite_first = 0.5  # the first (not connected to the answer) or the last
    c.sft.num_steps = 300
    c.optim.learning_rate = 6e-3
    c.optim.decay_from = c.sft.num_steps - c.optim.decay_steps
    return c
  c.train.num_steps = 30  # a chain step costs ~2x a reference step
  if arg in ("main", "stale"):
    c.train.eval_every = c.train.num_steps
  return c
