"""CPU demo (the embedded default): C-GRPO on the synthetic world with a tiny policy.

    python -m carr_jax.train --config configs/demo_cpu.py --workdir workdir/demo \
        [--config.checkpoint.init_dir=workdir/sft/checkpoints]   # configs/sft_demo_cpu.py
    tensorboard --logdir workdir/demo/tb --host 127.0.0.1

The multi-hop tool-using demo (the main job, `scripts/demo.sh`, runs configs/lookup_cpu.py,
which learns). Start it from the cold-start SFT of configs/sft_demo_cpu.py; without
`checkpoint.init_dir` the policy is random. Everything runs in-process on the CPU: the
synthetic deep-search world (questions, pages, rubrics), the in-process JAX sampler, offline
BM25 browser tools and the GOLD judge (which reads the world's gold annotations; it exists
only for synthetic data). Expect a step every ~15 s on 2 cores, a checkpoint in
workdir/checkpoints and TensorBoard logs in workdir/tb. Measured from the SFT policy
(sampling at temperature 1): 0.4-0.6 search/open calls per episode with 27-38% of the turns
well-formed tool calls (0 from a random policy), no solved question, so rewards and
advantages are 0: the demo shows the data path (rollout -> judge -> advantages -> packed
step -> sync), not learning; a tiny model would need far more SFT to answer.
"""
from configs import base


def get_config():
  c = base.get_config()
  c.model.preset = "tiny_dense"
  c.judge.backend = "gold"  # the synthetic world's own answers; no API key
  c.data.world_entities = 40
  c.data.world_questions = 24
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
