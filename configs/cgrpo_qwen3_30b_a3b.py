"""C-GRPO on Qwen3-30B-A3B-Thinking-2507 (MoE) with the paper's hyper-parameters.

Launch (TPU v5p pod, 64 chips, every host; see scripts/launch_tpu_pod.sh):
    python -m carr_jax.train --config configs/cgrpo_qwen3_30b_a3b.py:tpu --workdir gs://.../run \\
      --config.model.hf_path=/ckpt/qwen3-30b-a3b-sft --config.data.train_path=/data/carr_rl.jsonl \\
      --config.rollout.sglang_urls=http://sglang-0:30000 --multihost
8 GPUs: `:gpu` (experts over 4 devices, FSDP over 2). GRPO baseline: `:tpu,grpo`. `:tiny`
runs the same settings on the tiny MoE model on the CPU.

Experts (128, top-8) are split over the `expert` axis; the router aux loss (coef 0.001 in the
hub config) is added to the loss. The trainer replays the experts the rollout engine chose
(`model.routing_replay`; launch SGLang with `--enable-return-routed-experts`). Expect the same
curves as the 4B run at ~3x the step time.
"""
from configs import base
from configs.cgrpo_qwen3_4b import apply_variant, paper_settings, split_arg


def get_config(arg=None):
  platform, _ = split_arg(arg, known=("grpo",))  # no cold start of its own
  c = base.get_config()
  paper_settings(c, "qwen3_30b_a3b_thinking_2507")
  apply_variant(c, arg,
                tpu_mesh={"data": 1, "fsdp": 16, "expert": 4, "tensor": 1, "target_devices": 64},
                gpu_mesh={"data": 1, "fsdp": 2, "expert": 4, "tensor": 1, "target_devices": 8})
  c.model.routing_replay = True
  if platform == "tpu":
    # 128 rows of 64k in 2 slices (1 row per chip each), keeping the attention core in host
    # memory (remat attn_core_offload): 67.79 of 95.74 GiB per v5p chip (71%), executed /
    # model FLOPs 1.06 against full's 1.33 (benchmarks/README.md, ## aot, remat policies).
    c.batch.micro_batches = 2
    c.model.remat = "attn_core_offload"
  return c
