"""Does not learn: the multi-hop world's data path (rollout, judge, advantages, step, sync).

    python -m carr_jax.sft --config lab/configs/demo_cpu.py:sft --workdir workdir/sft
    python -m carr_jax.train --config lab/configs/demo_cpu.py --workdir workdir/demo \
        --config.checkpoint.init_dir=workdir/sft/checkpoints

The deep multi-hop world (vague clues, 2-hop questions) with a tiny policy, the in-process
sampler, offline BM25 tools and the gold judge, all on the CPU. `:sft` imitates an expert that
walks each question hop by hop and answers with citations, trained on each episode's first
1,024 tokens (`batch.overflow="truncate"`: whole ~2,300-token episodes cost too much on 2
cores); the policy learns well-formed tool calls but solves no question, so its RL rewards are
0. The main job, which learns, is lab/configs/lookup_cpu.py. Configs for real runs train on
whole episodes (configs/cgrpo_qwen3_4b.py:tpu,sft).
"""
from lab.configs import lab_config, sft_section


def get_config(arg=None):
  """`arg` "sft": the cold start; none: the RL demo."""
  if arg == "sft":
    return sft_config()
  if arg is not None:
    raise ValueError(f"unknown variant {arg!r} of lab/configs/demo_cpu.py; known: sft")
  c = lab_config()
  c.model.preset = "tiny_dense"
  c.judge.backend = "gold"  # the synthetic world's own answers; no API key
  c.world.entities = 40
  c.world.questions = 24
  c.data.prompts_per_step = 2
  c.data.group_size = 4
  c.rollout.max_turn_tokens = 48
  c.rollout.max_context_tokens = 1536
  c.rollout.max_tool_calls = 4
  c.rollout.max_batch = 8
  c.batch.row_lengths = (1024, 2048)
  c.batch.logprob_chunk = 256
  c.batch.loss_positions_multiple = 128
  c.loss.importance_sampling = "icepop"  # as the release
  c.batch.skip_zero_gradient = True  # most groups here are all right or all wrong
  c.optim.learning_rate = 1e-4
  c.train.num_steps = 4
  c.train.eval_every = 2
  c.train.eval_questions = 2
  c.checkpoint.every = 2
  return c


def sft_config():
  """The cold start (`:sft`)."""
  c = lab_config()
  c.sft = sft_section()
  c.model.preset = "tiny_dense"
  c.judge.backend = "gold"  # the synthetic world's own answers; no API key
  c.world.entities = 120
  c.world.questions = 100
  c.world.eval_fraction = 0.2
  c.sft.epochs = 20
  c.sft.batch_size = 4
  c.sft.num_steps = 120
  c.sft.expert_max_hops = 2
  c.sft.expert_find = False
  c.sft.expert_search_results = 1
  c.batch.loss_positions_multiple = 128
  c.optim.learning_rate = 3e-2
  c.optim.warmup_steps = 3
  c.optim.weight_decay = 0.0
  c.batch.row_lengths = (1024,)
  c.batch.overflow = "truncate"
  c.batch.logprob_chunk = 512
  c.checkpoint.every = 50
  # Evaluation of the SFT policy (carr_jax.jobs.evaluate reads the rollout/tools/judge sections).
  c.rollout.max_turn_tokens = 96
  c.rollout.max_context_tokens = 1024
  c.rollout.max_tool_calls = 16
  c.rollout.max_batch = 8
  return c
