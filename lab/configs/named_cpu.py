"""Does not learn yet: C-GRPO on the named-head world, from a cold-start SFT policy.

    python -m carr_jax.sft --config lab/configs/named_cpu.py:sft --workdir workdir/named/sft
    python -m carr_jax.train --config lab/configs/named_cpu.py --workdir workdir/named/rl \
        --config.checkpoint.init_dir=workdir/named/sft/checkpoints

Named-head questions of 1-2 hops (lab/world/named.py): "X, a painter, studied at a university.
Which city is home to this university?", answered by searching, opening and citing the pages
that prove each hop; names are one token each, marked in bold like links, and the prompt is
the brief one. `:sft` imitates the scripted expert on whole episodes (~1,050 tokens);
`:copy` is a warm-up on the expert's search turns of 12 other worlds (`python -m lab.expert
--config lab/configs/named_cpu.py:sft --search-examples 12 --search-results 1 --no-find
--out FILE`, then `--config.sft.data=FILE`). The cold start's first search never held the
question's head name, so RL had zero rewards: docs/history/2026-11-25-earlier-worlds.md.
"""
from lab.configs import lab_config, sft_section


def demo_world(c) -> None:
  """The world and model every stage uses."""
  c.model.preset = "demo_dense"
  c.model.output_vocab = "task"
  c.judge.backend = "gold"  # the synthetic world's own answers; no API key
  c.world.style = "named"
  c.world.entities = 120
  c.world.questions = 200
  c.world.eval_fraction = 0.25
  c.world.min_hops = 1
  c.world.max_hops = 2
  c.world.shortcut_fraction = 0.5
  c.world.locality = 0.8
  c.world.distractors = 0
  c.world.short_names = True
  c.world.prompt = "brief"
  c.world.mark_names = True
  c.rollout.max_turn_tokens = 160
  c.rollout.max_context_tokens = 2048  # the expert's longest episode is ~1,400 tokens
  c.rollout.max_tool_calls = 8
  c.rollout.max_batch = 32


def get_config(arg=None):
  """`arg` "sft": the cold start; "copy": its name-copy warm-up; none: the RL stage."""
  if arg in ("sft", "copy"):
    return sft_config(arg)
  if arg is not None:
    raise ValueError(f"unknown variant {arg!r} of lab/configs/named_cpu.py; known: sft, copy")
  c = lab_config()
  demo_world(c)
  c.data.prompts_per_step = 4
  c.data.group_size = 8
  c.batch.row_lengths = (2048,)
  c.batch.logprob_chunk = 512
  c.batch.loss_positions_multiple = 128
  c.loss.importance_sampling = "icepop"  # as the release
  c.batch.skip_zero_gradient = True  # most groups here are all right or all wrong
  c.optim.learning_rate = 1e-4
  c.optim.weight_decay = 0.0
  c.train.num_steps = 30
  c.train.eval_every = 30
  c.train.eval_questions = 32
  c.train.eval_samples = 4
  c.checkpoint.every = 10
  return c


def sft_config(arg: str):
  """The cold start (`:sft`), or its warm-up (`:copy`)."""
  c = lab_config()
  demo_world(c)
  c.sft = sft_section()
  c.sft.epochs = 20
  c.sft.batch_size = 4
  c.sft.num_steps = 150
  c.sft.expert_max_hops = 2
  c.sft.expert_find = False
  c.sft.expert_search_results = 1
  c.sft.expert_answer = "brief"
  c.batch.loss_positions_multiple = 128
  c.optim.learning_rate = 3e-3
  c.optim.warmup_steps = 10
  c.optim.weight_decay = 0.0
  c.batch.row_lengths = (2048,)
  c.batch.overflow = "error"
  c.batch.logprob_chunk = 512
  c.checkpoint.every = 50
  if arg == "copy":
    c.sft.data = ""  # required: --config.sft.data=FILE (the module docstring)
    c.sft.batch_size = 32
    c.world.output_vocab_worlds = 12  # the names of the worlds the examples come from
    c.sft.num_steps = 400
    c.batch.row_lengths = (1024,)  # several 100-300-token examples per row
    c.optim.warmup_steps = 0
    c.checkpoint.every = 100
  return c
