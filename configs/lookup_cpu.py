"""The main job's world, and the shortcut comparison's (GRPO vs C-GRPO in miniature).

    bash scripts/reproduce_shortcuts.sh [OUT_DIR]

runs the cold start once and then both methods over several seeds from it:

    python -m carr_jax.sft --config configs/lookup_cpu.py:sft --workdir OUT/sft
    python -m carr_jax.train --config configs/lookup_cpu.py --workdir OUT/cgrpo_seed0 \
        --config.checkpoint.init_dir=OUT/sft/checkpoints --config.seed=0
    python -m carr_jax.train --config configs/lookup_cpu.py --workdir OUT/grpo_seed0 \
        --config.checkpoint.init_dir=OUT/sft/checkpoints --config.seed=0 \
        --config.reward.mode=grpo

Lookup questions (`data.world_style="lookup"`, carr_jax/world/lookup.py) are kind questions
whose evidence is a glossary page: three in four state the relation, which decides the
answer (they admit a shortcut: right with no tool), the rest name a link number only their
glossary page explains (no shortcut on held-out ones: each number is asked once). The prompt
offers browser.search and browser.open, and the judge's rubric reward is 1 only for an
answer that cites the glossary page it found. The cold start (`:sft`) imitates the "lookup"
expert, which searches on every coded question and on every other sample of a plain one, so
the policy starts out searching on part of the plain questions (measured: 70% of samples,
docs/results.md): whether RL then keeps the search (the cited answer) or drops it (the
shortcut) is what the comparison measures.

The main job (`bash scripts/demo.sh`) uses the same world with `:sft_main`, whose expert
guesses its tool-free answers (`sft.expert_known_fraction` 0: a plain question's unsearched
sample names an option drawn at random), so the cold start answers right when it searches
and about half the time when it does not; then C-GRPO (`:main`, held-out avg@4 at the start
and the end) learns from the reward to search. Measured (docs/results.md): held-out avg@4
0.77 -> 0.99, tool calls per episode 0.66 -> 1.00.
"""
from configs import base


def lookup_world(c) -> None:
  """The world and model every stage uses."""
  c.model.preset = "demo_dense"
  c.model.output_vocab = "world"
  c.judge.backend = "gold"  # the synthetic world's own answers; no API key
  c.data.world_style = "lookup"
  c.data.world_entities = 400
  c.data.world_questions = 400
  c.data.world_eval_fraction = 0.25
  c.data.world_shortcut_fraction = 0.75
  c.data.world_min_hops = 1
  c.data.world_max_hops = 1
  c.data.world_distractors = 0
  c.data.world_prompt = "brief"  # browser.search and browser.open
  c.rollout.max_turn_tokens = 64
  c.rollout.max_context_tokens = 448  # a prompt is ~270 tokens, a cited episode ~400
  c.rollout.max_tool_calls = 2
  c.batch.row_lengths = (448,)  # one episode per row
  c.batch.logprob_chunk = 128
  c.batch.loss_positions_multiple = 64
  c.optim.weight_decay = 0.0


def get_config(arg=None):
  """`arg` "sft": the comparison's cold start; "sft_main" / "main": the main job's (below)."""
  c = base.get_config()
  lookup_world(c)
  if arg in ("sft", "sft_main"):
    c.sft = base.sft_section()
    c.sft.data = "expert"
    c.sft.expert_answer = "lookup"
    c.sft.expert_search_results = 1
    c.sft.expert_max_hops = 1
    c.sft.expert_samples = 2  # a plain question: one cited reply and one shortcut
    # the comparison: every answer right; the main job: tool-free answers are guesses
    c.sft.expert_known_fraction = 1.0 if arg == "sft" else 0.0
    c.sft.batch_size = 16
    c.sft.epochs = 20
    c.sft.num_steps = 400  # the tool call's JSON is well formed in ~95% of samples
    c.optim.learning_rate = 3e-3
    c.optim.warmup_steps = 5
    c.checkpoint.every = 50
    return c
  if arg not in (None, "main"):
    raise ValueError(f"unknown variant {arg!r} of configs/lookup_cpu.py; known: sft, sft_main, "
                     "main")
  c.loss.importance_sampling = "icepop"  # as the release
  c.data.prompts_per_step = 8
  c.data.group_size = 8
  c.optim.learning_rate = 3e-4
  c.optim.warmup_steps = 3
  c.train.num_steps = 30
  c.train.eval_every = 10
  c.train.eval_questions = 64
  c.train.eval_samples = 2
  c.checkpoint.every = 10
  if arg == "main":  # held-out avg@4 at the start and the end only
    c.train.eval_every = 30
    c.train.eval_samples = 4
  return c
