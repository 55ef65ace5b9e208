"""C-GRPO on Qwen3-4B-Thinking-2507 with the paper's hyper-parameters (CaRR-DeepDive RL split).

Launch (TPU v5p pod, 64 chips, every host; see scripts/launch_tpu_pod.sh):
    python -m carr_jax.train --config configs/cgrpo_qwen3_4b.py:tpu --workdir gs://.../run \\
      --config.model.hf_path=/ckpt/qwen3-4b-sft --config.data.train_path=/data/carr_rl.jsonl \\
      --config.rollout.sglang_urls=http://sglang-0:30000,http://sglang-1:30000 --multihost
8 GPUs on one host: `configs/cgrpo_qwen3_4b.py:gpu`. The GRPO baseline (outcome reward
only) of the paper: append `,grpo` to the argument, e.g. `:tpu,grpo`. `:tiny` keeps this
file's settings on the tiny model, world data and CPU mesh (what the config test runs).

Expect per step 16 questions x 8 rollouts = 128 trajectories of up to 64k tokens, judged by
DeepSeek (DEEPSEEK_API_KEY in the environment); outcome reward rising from the SFT policy's
level and rubric reward rising with it (paper Fig. 3), ~3 epochs of 2,234 questions.
"""
from configs import base


def paper_settings(c, preset: str):
  c.model.preset = preset
  c.model.compute_dtype = "bfloat16"
  c.model.remat = "full"
  c.data.source = "jsonl"
  c.data.train_path = "data/carr_deepdive_rl.jsonl"
  c.data.prompts_per_step = 16
  c.data.group_size = 8
  c.data.epochs = 3
  c.rollout.engine = "sglang"
  c.rollout.sglang_urls = "http://127.0.0.1:30000"
  c.rollout.max_context_tokens = 65536
  c.rollout.max_turn_tokens = 16384
  c.rollout.max_tool_calls = 100
  c.judge.backend = "llm"
  c.tools.backend = "web"
  c.reward.mode = "paper"
  c.reward.alpha = 0.3
  c.loss.importance_sampling = "icepop"
  c.optim.learning_rate = 2e-6
  c.batch.row_lengths = (16384, 32768, 65536)
  c.batch.loss_positions_multiple = 4096  # at most 12 K shapes per row length
  c.train.num_steps = 420  # 3 epochs of 2,234 questions at 16 per step
  c.train.eval_every = 0
  c.checkpoint.every = 20
  c.checkpoint.hf_export_every = 20


def apply_variant(c, arg: str | None, tpu_mesh: dict, gpu_mesh: dict):
  """`tpu`, `gpu` or `tiny` (mesh + scale), optionally followed by `,grpo`."""
  parts = (arg or "tpu").split(",")
  platform, extras = parts[0], parts[1:]
  meshes = {"tpu": tpu_mesh, "gpu": gpu_mesh}
  if platform in meshes:
    for axis, size in meshes[platform].items():
      setattr(c.mesh, axis, size)
  elif platform == "tiny":
    tiny = "tiny_moe" if c.model.preset.startswith("qwen3_30b") else "tiny_dense"
    base_cfg = base.get_config()
    for section in ("data", "rollout", "tools", "judge", "batch", "mesh", "train"):
      c[section] = base_cfg[section]
    c.model.preset, c.model.compute_dtype, c.model.remat = tiny, "float32", "none"
    c.judge.backend = "gold"  # the synthetic world of base.py
  else:
    raise ValueError(f"config argument must start with tpu, gpu or tiny, got {arg!r}")
  for extra in extras:
    if extra != "grpo":
      raise ValueError(f"unknown config variant {extra!r} (known: grpo)")
    c.reward.mode = "grpo"


def get_config(arg=None):
  c = base.get_config()
  paper_settings(c, "qwen3_4b_thinking_2507")
  apply_variant(c, arg,
                tpu_mesh={"data": 1, "fsdp": 16, "expert": 1, "tensor": 4, "target_devices": 64},
                gpu_mesh={"data": 1, "fsdp": 8, "expert": 1, "tensor": 1, "target_devices": 8})
  if (arg or "tpu").split(",")[0] == "tpu":
    # 128 rows of 64k: one slice holds 2 rows per chip, 45 of 95.74 GiB per v5p chip; in one
    # slice (8 rows per chip) the step needs 128 GiB (benchmarks/README.md, TPU compile check).
    c.batch.micro_batches = 4
  return c
