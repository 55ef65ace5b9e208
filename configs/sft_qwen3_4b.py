"""Cold-start SFT of Qwen3-4B-Thinking-2507 with the paper's settings (before C-GRPO).

Launch (TPU v5p pod, 64 chips, every host):
    python -m carr_jax.sft --config configs/sft_qwen3_4b.py:tpu --workdir gs://.../sft \\
      --config.model.hf_path=/ckpt/Qwen3-4B-Thinking-2507 \\
      --config.sft.data=/data/deepdive_trajectories_sft.jsonl --multihost
then RL from its last HF export (`<workdir>/hf/step_156`, also an orbax checkpoint for
`checkpoint.init_dir`): configs/cgrpo_qwen3_4b.py with --config.model.hf_path=<that dir>.
`:gpu` for 8 GPUs; `:tiny` runs these settings on the tiny model with the scripted expert's
episodes of the synthetic world (what the config test builds).

Paper (SFT setup): 832 rejection-sampled traces (the DeepDive trajectories_sft
split has 858; `sft.min_outcome` filters dumped rollouts of our own), 3 epochs, batch 16,
lr 4e-5, 128k context. Not stated in the paper, chosen here: AdamW betas (0.9, 0.98) and
weight decay 0.1 as in its RL runs, 8 warmup steps then constant. Expect 52 steps per epoch,
the loss (assistant tokens only) falling steeply in the first epoch and flattening after.
"""
from configs import base
from configs.cgrpo_qwen3_4b import apply_variant


def get_config(arg=None):
  c = base.get_config()
  c.sft = base.sft_section()
  c.model.preset = "qwen3_4b_thinking_2507"
  c.model.compute_dtype = "bfloat16"
  c.model.remat = "full"
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
  apply_variant(c, arg,
                tpu_mesh={"data": 1, "fsdp": 16, "expert": 1, "tensor": 4, "target_devices": 64},
                gpu_mesh={"data": 1, "fsdp": 8, "expert": 1, "tensor": 1, "target_devices": 8})
  if (arg or "").startswith("tiny"):
    c.sft.data = "expert"
    c.sft.batch_size = 4
    c.batch.loss_positions_multiple = 128
    c.batch.row_lengths = (2048,)
    c.batch.logprob_chunk = 512
    c.batch.overflow = "truncate"
    c.checkpoint.hf_export_every = 0
  return c
