"""The chain world: the reference world's questions, their evidence two glossary pages long.

    bash scripts/reproduce_chains.sh [OUT_DIR]  # per seed: two SFT stages, then the methods

which run, from the CLIs, for seed k:

    python -m carr_jax.sft --config lab/configs/lookup_cpu.py:sft --workdir OUT/ref_sft_seedk \
        --config.seed=k
    python -m carr_jax.sft --config lab/configs/chain_cpu.py:sft --workdir OUT/sft_seedk \
        --config.checkpoint.init_dir=OUT/ref_sft_seedk/checkpoints --config.seed=k
    python -m carr_jax.train --config lab/configs/chain_cpu.py:main --workdir OUT/cgrpo_seedk \
        --config.checkpoint.init_dir=OUT/sft_seedk/checkpoints --config.seed=k

A question reads like a reference question (lab/configs/lookup_cpu.py), "X, a painter, studied at
something (link 417). Is that a city or an organization?", and its relation's usual kind is
the same shortcut. But the glossary page of link 417 only names the next term ("Link 417
continues under code 733."), and the page of code 733 states the kind (lab/world/chain.py).
Each page is one rubric: "Link 417 continues under <E1>." and "<E1> is of the kind <E0>.", so
the rubric reward pays identification (naming code 733), support (citing both pages) and
connectivity (the first rubric reaches E0 only through the second). The expert's cited episode
makes 2 searches in ~560 tokens (tests/test_chain_world.py).

The cold start has two stages. Trained on chain episodes from a random start, the policy has
to learn to copy the question's link and a code off a page at once, and the one run measured
(seed 0) had begun neither copy by step 600. So it starts from the reference world's cold
start (lab/configs/lookup_cpu.py:sft, which copies the link and reads a one-page answer) and
learns the second hop in 300 more steps at lr 6e-3, the last 100 decaying the rate to 0:
greedy copy of the link and of the page's code exact on 100 / 100, 100 / 95 and 100 / 100 of
100 held-out questions on seeds 0, 1 and 2. At lr 3e-3 seed 1 never learned the code copy
(not in 500 steps, nor with another expert or data order; docs/results.md `## The chain
world`).

Its searched replies cite the whole chain on 40% of samples, the first page only on 30% (a
supported rubric not connected to the answer: rubric 0, 0.5 without the connectivity check)
and the last page only on 30% (rubric 0.5). So the cold start leaves room for the rubric
reward to raise the share of right answers citing the whole chain, and holds the disconnected
citations the connectivity check decides; an expert citing every page gave a cold start that
already cited the whole chain on 62-70% of its right answers, and GRPO raised it further.
"""
from lab.configs import lookup_cpu


def chain_world(c) -> None:
  """The world and model every stage uses: lookup_cpu's, with 2-page chains."""
  lookup_cpu.lookup_world(c)
  c.world.style = "chain"
  c.world.min_hops = 2
  c.world.max_hops = 2
  c.rollout.max_turn_tokens = 96  # the cited reply is ~70 tokens
  c.rollout.max_context_tokens = 960  # a cited expert episode (2 searches, 2 opens) is ~870
  c.rollout.max_tool_calls = 5  # the expert makes 4; one to spare
  c.batch.row_lengths = (960,)  # one episode per row


def get_config(arg=None):
  """`arg` "sft": the cold start; "main": C-GRPO with held-out avg@4 at the start and end."""
  c = lookup_cpu.get_config(arg)
  chain_world(c)
  if arg == "sft":  # the second stage; checkpoint.init_dir: the reference cold start
    c.sft.expert_max_hops = 2
    c.sft.expert_chain_cite_all = 0.4  # of the searched replies; the others cite one page:
    c.sft.expert_chain_cite_first = 0.5  # the first (not connected to the answer) or the last
    c.sft.num_steps = 300
    c.optim.learning_rate = 6e-3  # at 3e-3 seed 1 never learned the code copy (docstring)
    c.optim.decay_from = c.sft.num_steps - c.optim.decay_steps
    return c
  c.train.num_steps = 30  # a chain step costs ~2x a reference step (2 searches, 640 columns)
  if arg == "main":
    c.train.eval_every = c.train.num_steps
  return c
