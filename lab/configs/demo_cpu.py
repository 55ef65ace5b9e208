"""Does not learn: the multi-hop CPU demo, C-GRPO on the synthetic world with a tiny policy.

    python -m carr_jax.sft --config lab/configs/demo_cpu.py:sft --workdir workdir/sft
    python -m carr_jax.evaluate --config lab/configs/demo_cpu.py:sft --data world:eval \
        --checkpoint workdir/sft/checkpoints --out workdir/sft/eval \
        --config.rollout.temperature=0
    python -m carr_jax.train --config lab/configs/demo_cpu.py --workdir workdir/demo \
        --config.checkpoint.init_dir=workdir/sft/checkpoints
    tensorboard --logdir workdir/demo/tb --host 127.0.0.1

It shows the data path on the deep multi-hop world (rollout -> judge -> advantages -> packed
step -> sync), not learning; the main job (`scripts/demo.sh`) runs lab/configs/lookup_cpu.py,
which learns. Without `checkpoint.init_dir` the policy is random. Everything runs
in-process on the CPU: the synthetic deep-search world (questions, pages, rubrics), the
in-process JAX sampler, offline BM25 browser tools and the GOLD judge (which reads the
world's gold annotations; it exists only for synthetic data). Expect a step every ~15 s on 2
cores, a checkpoint in workdir/demo/checkpoints and TensorBoard logs in workdir/demo/tb.
Measured from the SFT policy (sampling at temperature 1): 0.4-0.6 search/open calls per
episode with 27-38% of the turns well-formed tool calls (0 from a random policy), no solved
question, so rewards and advantages are 0; a tiny model would need far more SFT to answer.

`:sft`, the cold start: the expert (`lab.world.expert`) walks each 2-hop training
question of a larger world (120 entities, 100 questions) hop by hop through the offline
browser tools and answers with `[[n](url)]` citations (gold judge: outcome 1, rubric reward
1). The tiny random policy (2 layers, width 64, the real 152k vocabulary) is trained on
those episodes with the assistant-only loss.

CPU budget: an episode is ~2,300 tokens, and on 2 cores the tiny model's dense attention and
152k-way softmax make whole episodes cost ~10 s per step. This demo therefore trains on each
episode's first 1,024 tokens (`batch.overflow="truncate"`: the prompt and the first tool
turns, which is what a 1,024-token episode of the RL demo needs; the final answer turn is
beyond that window) and evaluates at the same context. Measured here (2 cores): 2-3.5 s per
step, 120 steps in 4-7 min, loss 11.9 -> ~0.25-0.35; greedy evaluation on the 20 held-out
questions: well-formed tool calls in 0.60 of the policy's turns when first measured, 0.31 in
CI and here since, with the same code and training data (dense attention; at lr 3e-2 the run
is sensitive to rounding). It does not solve the questions. Run it before the RL stage;
the SFT acceptance test uses lab/configs/named_cpu.py:sft (measured 0.80).
Configs for real runs train on whole episodes (configs/cgrpo_qwen3_4b.py:tpu,sft: 128k rows).
"""
from configs import base
from lab.configs import sft_section


def get_config(arg=None):
  """`arg` "sft": the cold start; none: the RL demo."""
  if arg == "sft":
    return sft_config()
  if arg is not None:
    raise ValueError(f"unknown variant {arg!r} of lab/configs/demo_cpu.py; known: sft")
  c = base.get_config()
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
  c.optim.learning_rate = 1e-4
  c.train.num_steps = 4
  c.train.eval_every = 2
  c.train.eval_questions = 2
  c.checkpoint.every = 2
  return c


def sft_config():
  """The cold start (`:sft`)."""
  c = base.get_config()
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
