"""The SFT step's test batch, shared by the SFT tests (tests/lab/test_sft.py) and the multi-host
SFT steps (tests/carr_jax/test_multihost.py): a tiny dense Qwen3 config and random examples
with prompt / generated / observation spans, packed two per row. Lab-free, so the product's
tests can use it."""
from __future__ import annotations

import numpy as np

from carr_jax.coldstart import step as sft_step
from carr_jax.model.config import get_preset

CFG = get_preset("tiny_dense", vocab_size=512)


def packed_batch(seed=0, rows=4, seq=24):
  """Examples with prompt / generated / observation spans, packed two per row."""
  rng = np.random.default_rng(seed)
  examples = []
  for _ in range(2 * rows):
    n = int(rng.integers(6, seq // 2 + 1))
    mask = (rng.random(n) < 0.5).astype(int)
    mask[:2] = 0
    examples.append({"token_ids": rng.integers(0, CFG.vocab_size, n).tolist(),
                     "loss_mask": mask.tolist()})
  pack_cfg = sft_step.packing.PackingConfig(row_lengths=(seq,), row_multiple=rows,
                                                coarse_rows=False)
  batch, _ = sft_step.make_batch(examples, pack_cfg, loss_multiple=4)
  return examples, batch
