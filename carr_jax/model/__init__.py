"""The policy network: Qwen3 in Flax, attention kernels, KV-cache sampling, the
in-process rollout engine, sharding, and Hugging Face I/O."""
