"""The paper's experiment on Qwen3-4B-Thinking-2507: cold-start SFT (`,sft`), then C-GRPO with
the paper's hyper-parameters (CaRR-DeepDive RL split).

Launch (TPU v5p pod, 64 chips, every host; see scripts/launch_tpu_pod.sh), first the SFT:
    python -m carr_jax.sft --config configs/cgrpo_qwen3_4b.py:tpu,sft --workdir gs://.../sft \\
      --config.model.hf_path=/ckpt/Qwen3-4B-Thinking-2507 \\
      --config.sft.data=/data/deepdive_trajectories_sft.jsonl --multihost
then RL from its last HF export (`<workdir>/hf/step_156`, also an orbax checkpoint for
`checkpoint.init_dir`):
    python -m carr_jax.train --config configs/cgrpo_qwen3_4b.py:tpu --workdir gs://.../run \\
      --config.model.hf_path=gs://.../sft/hf/step_156 \\
      --config.data.train_path=/data/carr_rl.jsonl \\
      --config.rollout.sglang_urls=http://sglang-0:30000,http://sglang-1:30000 --multihost
The argument is a platform, `tpu`, `gpu` (8 GPUs on one host) or `tiny` (these settings on
the tiny model, the synthetic world's data or the scripted expert's episodes and a CPU mesh:
what the config tests build), then optionally `,sft` (the cold start) or `,grpo` (the paper's
GRPO baseline, outcome reward only), e.g. `:gpu,grpo`.

RL: expect per step 16 questions x 8 rollouts = 128 trajectories of up to 64k tokens, judged
by DeepSeek (DEEPSEEK_API_KEY in the environment); outcome reward rising from the SFT policy's
level and rubric reward rising with it (paper Fig. 3), ~3 epochs of 2,234 questions.

SFT (the paper's setup): 832 rejection-sampled traces (the DeepDive trajectories_sft split
has 858; `sft.min_outcome` filters dumped rollouts of our own), 3 epochs, batch 16, lr 4e-5,
128k context. Not stated in the paper, chosen here: AdamW betas (0.9, 0.98) and weight decay
0.1 as in its RL runs, 8 warmup steps then constant. Expect 52 steps per epoch, the loss
(assistant tokens only) falling steeply in the first epoch and flattening after.
"""
from configs import base


def paper_model(c, preset: str):
  """The paper's model as both stages train it: bf16 compute, full rematerialization."""
  c.model.preset = preset
  c.model.compute_dtype = "bfloat16"
  c.model.remat = "full"


def paper_settings(c, preset: str):
  paper_model(c, preset)
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


def sft_settings(c, preset: str):
  """The cold start's settings (the module docstring), in place of `paper_settings`."""
  c.sft = base.sft_section()
  paper_model(c, preset)
  c.sft.data = "data/deepdive_trajectories_sft.jsonl"
  c.sft.epochs = 3
  c.sft.batch_size = 16
  c.batch.loss_positions_multiple = 2048
  c.optim.learning_rate = 4e-5
  c.optim.warmup_steps = 8
  c.batch.row_lengths = (32768, 65536, 131072)  # 128k context
  c.batch.logprob_chunk = 2048
  c.batch.overflow = "truncate"
  c.checkpoint.every = 52  # once per epoch of 832 traces
  c.checkpoint.hf_export_every = 52


def tiny_sft(c):
  """The cold start on the tiny model: the scripted expert's episodes, short rows."""
  c.sft.data = "expert"
  c.sft.batch_size = 4
  c.batch.loss_positions_multiple = 128
  c.batch.row_lengths = (2048,)
  c.batch.logprob_chunk = 512
  c.batch.overflow = "truncate"
  c.checkpoint.hf_export_every = 0


def split_arg(arg: str | None, known=("grpo", "sft")) -> tuple[str, list[str]]:
  """"tpu,sft" -> ("tpu", ["sft"]); no argument is "tpu"."""
  platform, *extras = (arg or "tpu").split(",")
  for extra in extras:
    if extra not in known:
      raise ValueError(f"unknown config variant {extra!r} (known: {', '.join(known)})")
  if set(extras) == {"grpo", "sft"}:
    raise ValueError("sft and grpo are different stages; choose one")
  return platform, extras


def apply_variant(c, arg: str | None, tpu_mesh: dict, gpu_mesh: dict):
  """The platform of `arg` (`tpu`, `gpu` or `tiny`: mesh + scale), then `,grpo`."""
  platform, extras = split_arg(arg)
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
    base.use_task_source(c, "lab.tasks")  # the CPU laboratory's synthetic world
    c.judge.backend = "gold"  # its gold answers
  else:
    raise ValueError(f"config argument must start with tpu, gpu or tiny, got {arg!r}")
  if "grpo" in extras:
    c.reward.mode = "grpo"


def get_config(arg=None):
  platform, extras = split_arg(arg)
  c = base.get_config()
  if "sft" in extras:
    sft_settings(c, "qwen3_4b_thinking_2507")
  else:
    paper_settings(c, "qwen3_4b_thinking_2507")
  apply_variant(c, arg,
                tpu_mesh={"data": 1, "fsdp": 16, "expert": 1, "tensor": 4, "target_devices": 64},
                gpu_mesh={"data": 1, "fsdp": 8, "expert": 1, "tensor": 1, "target_devices": 8})
  if "sft" in extras and platform == "tiny":
    tiny_sft(c)
  if platform == "tpu" and "sft" not in extras:
    # 128 rows of 64k in 8 slices (1 row per chip each), keeping every matmul's output and the
    # attention core (remat dots_attn): 65.71 of 95.74 GiB per v5p chip (69%), executed / model
    # FLOPs 1.00 against full remat's 1.30 (benchmarks/README.md, ## aot, remat policies).
    c.batch.micro_batches = 8
    c.model.remat = "dots_attn"
  if platform == "tpu" and "sft" in extras:
    # 16 rows of 128k, one per chip: keeping only the attention core (remat attn_core) takes
    # 48.29 of 95.74 GiB per v5p chip (50%), executed / model FLOPs 1.04 against full's 1.32.
    c.model.remat = "attn_core"
  return c
