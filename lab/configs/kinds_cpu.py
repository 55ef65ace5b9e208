"""The tool-free job: the smallest world on which C-GRPO visibly learns (3 minutes).

    python -m carr_jax.sft --config lab/configs/kinds_cpu.py:sft --workdir workdir/demo/sft
    python -m carr_jax.sft --config lab/configs/kinds_cpu.py:sft_noisy \
        --workdir workdir/demo/sft_noisy --config.checkpoint.init_dir=workdir/demo/sft/checkpoints
    python -m carr_jax.train --config lab/configs/kinds_cpu.py --workdir workdir/demo/rl \
        --config.checkpoint.init_dir=workdir/demo/sft_noisy/checkpoints

"X, a painter, studied at something. Is that a city or an organization?" (lab/world/named.py):
the relation decides the answer and no tool is needed, so it checks the learning loop, not
search. `:sft` imitates an expert that knows every answer; `:sft_noisy` one that knows half and
guesses the rest, so the policy reads the relation but hedges, and RL from the reward alone
sharpens it. Results: docs/history/2026-11-25-earlier-worlds.md; tests/lab/test_learning_run.py.
"""
from lab.configs import lab_config, sft_section


def kinds_world(c) -> None:
  """The world and model every stage uses."""
  c.model.preset = "demo_dense"
  c.model.output_vocab = "task"
  c.judge.backend = "gold"  # the synthetic world's own answers; no API key
  c.world.style = "kinds"
  c.world.entities = 400
  c.world.questions = 400
  c.world.eval_fraction = 0.25
  c.world.distractors = 0
  c.world.prompt = "answer"  # no tool schemas: nothing to look up
  c.rollout.max_turn_tokens = 16
  c.rollout.max_context_tokens = 96  # a prompt is ~60 tokens, a reply ~10
  c.batch.row_lengths = (96,)  # one episode per row
  c.batch.logprob_chunk = 128
  c.batch.loss_positions_multiple = 32
  c.optim.weight_decay = 0.0


def get_config(arg=None):
  """`arg` "sft" / "sft_noisy": the two cold-start stages (see the module docstring)."""
  c = lab_config()
  kinds_world(c)
  if arg in ("sft", "sft_noisy"):
    c.sft = sft_section()
    c.sft.data = "expert"
    c.sft.expert_answer = "guess"
    c.sft.expert_max_hops = 1
    c.sft.expert_samples = 2  # each option once per question the expert does not know
    c.sft.batch_size = 16
    c.sft.epochs = 20
    c.optim.warmup_steps = 5
    c.checkpoint.every = 50
    if arg == "sft":  # the clean expert: policies start reading the relation after ~100 steps
      c.sft.expert_known_fraction = 1.0
      c.sft.num_steps = 150
      c.optim.learning_rate = 3e-3
    else:  # then the noisy one (right on 0.5 + 0.5 / 2 of its replies), from the first stage
      c.sft.expert_known_fraction = 0.5
      c.sft.num_steps = 100
      c.optim.learning_rate = 1e-3
    return c
  if arg:
    raise ValueError(f"unknown variant {arg!r} of lab/configs/kinds_cpu.py; known: sft, sft_noisy")
  c.loss.importance_sampling = "icepop"  # as the release
  c.batch.skip_zero_gradient = True  # most groups here are all right or all wrong
  c.data.prompts_per_step = 16
  c.data.group_size = 8
  c.optim.learning_rate = 3e-4  # 1e-3 breaks the reply format for steps at a time
  c.optim.warmup_steps = 3
  c.train.num_steps = 30
  c.train.eval_every = 30  # held-out avg@4 at the start and the end
  c.train.eval_questions = 64
  c.train.eval_samples = 4
  c.checkpoint.every = 10
  return c
