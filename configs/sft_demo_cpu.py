"""CPU demo of cold-start SFT: a tiny policy imitates the scripted expert on the synthetic world.

    python -m carr_jax.sft --config configs/sft_demo_cpu.py --workdir workdir/sft
    python -m carr_jax.evaluate --config configs/sft_demo_cpu.py --data world:eval \
        --checkpoint workdir/sft/checkpoints --out workdir/sft/eval \
        --config.rollout.temperature=0
    python -m carr_jax.train --config configs/demo_cpu.py --workdir workdir/rl \
        --config.checkpoint.init_dir=workdir/sft/checkpoints

The expert (`carr_jax.world.expert`) walks each 2-hop training question of the world hop by hop
through the offline browser tools and answers with `[[n](url)]` citations (gold judge:
outcome 1, rubric reward 1). The tiny random policy (2 layers, width 64, the real 152k
vocabulary) is trained on those episodes with the assistant-only loss.

CPU budget: an episode is ~2,300 tokens, and on 2 cores the tiny model's dense attention and
152k-way softmax make whole episodes cost ~10 s per step. This demo therefore trains on each
episode's first 1,024 tokens (`batch.overflow="truncate"`: the prompt and the first tool
turns, which is what a 1,024-token episode of the RL demo needs; the final answer turn is
beyond that window) and evaluates at the same context. Measured here (2 cores): 2-3.5 s per
step, 120 steps in 4-7 min, loss 11.9 -> ~0.25-0.35; greedy evaluation on the 20 held-out
questions: well-formed tool calls in 0.60 of the policy's turns when first measured, 0.31 in
CI and here since, with the same code and training data (dense attention; at lr 3e-2 the run
is sensitive to rounding). It does not solve the questions. Run it before the tool-using RL
demo (configs/demo_cpu.py); the SFT acceptance test uses configs/sft_named_cpu.py (measured 0.80).
Configs for real runs train on whole episodes (configs/sft_qwen3_4b.py: 128k rows).
"""
from configs import base


def get_config():
  c = base.get_config()
  c.sft = base.sft_section()
  c.model.preset = "tiny_dense"
  c.judge.backend = "gold"  # the synthetic world's own answers; no API key
  c.data.world_entities = 120
  c.data.world_questions = 100
  c.data.world_eval_fraction = 0.2
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
