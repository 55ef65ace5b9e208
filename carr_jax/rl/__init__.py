"""The C-GRPO update: reward mixing and advantages, packing, the clipped loss, the
jitted train step, and per-step statistics."""
