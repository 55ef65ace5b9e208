"""The chain world: the reference world's questions, their evidence two glossary pages long.

    bash scripts/reproduce_chains.sh [OUT_DIR]  # per world: two SFT stages, then the methods

which run, from the CLIs, for world w and seed k:

    python -m carr_jax.sft --config lab/configs/lookup_cpu.py:sft --workdir OUT/ref_sft \
        --config.seed=k --config.world.seed=w
    python -m carr_jax.sft --config lab/configs/chain_cpu.py:sft --workdir OUT/sft \
        --config.checkpoint.init_dir=OUT/ref_sft/checkpoints --config.seed=k --config.world.seed=w
    python -m carr_jax.train --config lab/configs/chain_cpu.py:stale --workdir OUT/cgrpo \
        --config.checkpoint.init_dir=OUT/sft/checkpoints --config.seed=k --config.world.seed=w

The glossary page of the question's link names the next term, whose page states the kind
(lab/world/chain.py); the first page also states the kind of a neighbouring record, the lure,
which is the relation's usual kind. One rubric per page, so the rubric reward pays naming the
next term, citing both pages, and connecting them: a reply that answers the lure citing the
first page has a supported rubric cut off from the answer.

The cold start has two stages: the reference world's (which copies the link), then 300 steps
on chain episodes at lr 6e-3, the last 100 decaying (at 3e-3 one seed of three never learned
to copy the next term). Its expert's searched replies answer the lure on 40% of samples
(`expert_chain_lure`); the others cite both pages, the first only, or the last only. So the
cold start cites supported but unconnected pages often.

`:stale` is the comparison's RL (`scripts/reproduce_chains.sh`): the last page is stale on a
quarter of each relation's training shortcut questions, so the whole chain, the lure and the
shortcut are each right on ~80% of training questions and only the rubric reward tells them
apart. Results: docs/results.md.
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
