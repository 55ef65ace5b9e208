"""The smallest world, for checking on a CPU in minutes whether the RL loop learns at all.

    python -m carr_jax.sft --config configs/kinds_cpu.py:sft --workdir workdir/kinds/sft
    python -m carr_jax.train --config configs/kinds_cpu.py --workdir workdir/kinds/rl \
        --config.checkpoint.init_dir=workdir/kinds/sft/checkpoints

Kind questions (`data.world_style="kinds"`, carr_jax/world/named.py): "X, a painter, studied at
something. Is that a city or an organization? Answer with one word." The relation decides the
answer and the two answers are drawn in equal numbers. The SFT stage (`:sft`) imitates the
guessing expert (`sft.expert_answer="guess"`): a reply in the answer format whose option is
drawn at random, so it teaches the format and not which option is right. Held-out accuracy
therefore starts near 1/2, and only RL (rewards from the gold judge, C-GRPO advantages, the
jitted step, the weight sync to the in-process sampler) can raise it; nothing here needs a
tool, so this checks the learning loop, not search. Measured (docs/results.md): SFT ~30 s, an
RL step of 16 x 8 episodes ~3 s on 2 cores; 20 supervised steps on the right answers take
held-out greedy accuracy from 0.5 to 1.0, but 40 of these RL steps do not yet (greedy 0.5;
avg@4 0.36 -> 0.52 from better-formed replies), so the RL settings below are the ones measured,
not a recipe that learns.
"""
from configs import base


def kinds_world(c) -> None:
  """The world and model both stages use."""
  c.model.preset = "demo_dense"
  c.model.output_vocab = "world"
  c.data.world_style = "kinds"
  c.data.world_entities = 400
  c.data.world_questions = 400
  c.data.world_eval_fraction = 0.25
  c.data.world_min_hops = 1
  c.data.world_max_hops = 1
  c.data.world_distractors = 0
  c.data.world_prompt = "answer"  # no tool schemas: nothing to look up
  c.rollout.max_turn_tokens = 16
  c.rollout.max_context_tokens = 96  # a prompt is ~60 tokens, a reply ~10
  c.batch.row_lengths = (96,)  # one episode per row
  c.batch.logprob_chunk = 128
  c.batch.loss_positions_multiple = 32
  c.optim.weight_decay = 0.0


def get_config(arg=None):
  """`arg` "sft": the guessing cold start (see the module docstring)."""
  c = base.get_config()
  kinds_world(c)
  if arg == "sft":
    from configs.sft_demo_cpu import sft_section
    c.sft = sft_section()
    c.sft.data = "expert"
    c.sft.expert_answer = "guess"
    c.sft.expert_max_hops = 1
    c.sft.expert_samples = 2  # each option once per question: the imitated answer is uniform
    c.sft.batch_size = 16
    c.sft.num_steps = 30
    c.sft.epochs = 10
    c.optim.learning_rate = 3e-3
    c.optim.warmup_steps = 5
    c.checkpoint.every = 30
    return c
  if arg:
    raise ValueError(f"unknown variant {arg!r} of configs/kinds_cpu.py; known: sft")
  c.data.prompts_per_step = 16
  c.data.group_size = 8
  c.optim.learning_rate = 1e-3
  c.optim.warmup_steps = 3
  c.train.num_steps = 40
  c.train.eval_every = 40
  c.train.eval_questions = 64
  c.train.eval_samples = 4
  c.checkpoint.every = 20
  return c
