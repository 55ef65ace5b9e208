"""Cold-start SFT on the named-head synthetic world (configs/named_cpu.py shares the world).

    python -m carr_jax.sft --config configs/sft_named_cpu.py --workdir workdir/named/sft

The scripted expert (`carr_jax.world.expert`, brief answers, one search result per query) solves
the training questions; the `demo_dense` policy imitates it on whole episodes (~1,050 tokens),
in 2,048-token rows. Measured on 2 cores shared with other jobs: 3.9-4.8 s per step
(1.8-3.5 s alone), loss 6.58 -> 0.25 at step 150 and 0.16 at step 300; greedy evaluation on
32 held-out questions after either: well-formed tool calls in 0.84 of the turns, accuracy 0
(tests/test_sft.py holds the first number above 0.5).

`:copy` is a warm-up stage on the expert's search turns of 12 other worlds in a short context
(`python -m carr_jax.expert --config configs/sft_named_cpu.py --search-examples 12
--search-results 1 --no-find --out FILE`, then `--config.sft.data=FILE`); the episode stage
starts from it with `--config.checkpoint.init_dir`. Measured: 400 steps do not yet make the
policy copy names (docs/results.md) with the format rule after the question; the brief prompt
now states it first, which the copy probe learns far sooner with (not yet re-run here).
"""
from configs import base
from configs.named_cpu import demo_world


def get_config(arg=None):
  """`arg` "copy": the name-copy warm-up stage (see the module docstring)."""
  c = base.get_config()
  demo_world(c)
  c.sft = base.sft_section()
  c.sft.epochs = 20
  c.sft.batch_size = 4
  c.sft.num_steps = 150
  c.sft.expert_max_hops = 2
  c.sft.expert_find = False
  c.sft.expert_search_results = 1
  c.sft.expert_answer = "brief"
  c.batch.loss_positions_multiple = 128
  c.optim.learning_rate = 3e-3
  c.optim.warmup_steps = 10
  c.optim.weight_decay = 0.0
  c.batch.row_lengths = (2048,)
  c.batch.overflow = "error"
  c.batch.logprob_chunk = 512
  c.checkpoint.every = 50
  if arg == "copy":
    c.sft.data = "workdir/named/search_examples.jsonl"  # carr_jax.world.expert --search-examples 12
    c.sft.batch_size = 32
    c.model.output_vocab_worlds = 12  # the names of the worlds the examples come from
    c.sft.num_steps = 400
    c.batch.row_lengths = (1024,)  # several 100-300-token examples per row
    c.optim.warmup_steps = 0
    c.checkpoint.every = 100
  elif arg:
    raise ValueError(f"unknown variant {arg!r} of configs/sft_named_cpu.py; known: copy")
  return c
