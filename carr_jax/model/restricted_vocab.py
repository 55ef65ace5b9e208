"""A restricted output vocabulary: the token ids that a run's output softmax covers.

A run may restrict the output distribution of training and sampling to V' sorted token ids
(a speed technique for tiny policies that keep a large tokenizer: the [D, V] projection and
its softmax would dominate their cost). Embeddings, parameters and the HF export stay
full-vocabulary. `RestrictedVocab` is that set of ids, made by whoever knows which tokens the
run can need (the run's task code), and passed explicitly to the forward
(`qwen3.unembed_matrix`), the sampler (`decode.generate`, `engine.JaxEngine`) and the loss
(`train_step.target_logprobs`), so rollout and trainer log-probs are over one distribution.
It belongs to the run: no checkpoint or config file stores it. Every function here reads
`None` as the full vocabulary, where columns are token ids.

  vocab = RestrictedVocab((0, 7, 42))
  cols, inside = columns(vocab, token_ids)  # token ids [...] -> columns of V' [...], in V'?
  ids = token_ids(vocab, cols)              # columns [...] -> token ids [...]
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class RestrictedVocab:
  ids: tuple[int, ...]  # [V'] sorted unique token ids the output softmax covers

  def __post_init__(self):
    ids = tuple(int(i) for i in self.ids)  # lists / numpy ints -> a hashable tuple
    object.__setattr__(self, "ids", ids)
    if not ids:
      raise ValueError("RestrictedVocab needs at least one token id (None = full vocabulary)")
    bad = next((k for k in range(1, len(ids)) if ids[k] <= ids[k - 1]), None)
    if bad is not None:
      raise ValueError(f"RestrictedVocab ids must be sorted and unique, but entry {bad} "
                       f"({ids[bad]}) follows {ids[bad - 1]}")
    if ids[0] < 0:
      raise ValueError(f"RestrictedVocab ids must be non-negative, got {ids[0]}")

  def check_fits(self, vocab_size: int) -> None:
    """Raises ValueError when an id is outside a model's [0, vocab_size)."""
    if self.ids[-1] >= vocab_size:
      raise ValueError(f"RestrictedVocab ids must lie in [0, vocab_size={vocab_size}), got "
                       f"ids up to {self.ids[-1]}")


def size(vocab: RestrictedVocab | None, vocab_size: int) -> int:
  """V': the number of output columns."""
  return len(vocab.ids) if vocab is not None else vocab_size


def ids_array(vocab: RestrictedVocab) -> jax.Array:
  return jnp.asarray(np.asarray(vocab.ids, np.int32))  # [V'] sorted


def columns(vocab: RestrictedVocab | None, token_ids) -> tuple[jax.Array, jax.Array]:
  """Token ids [...] -> (their output column [...] int32, in the vocabulary [...] bool).

  An id outside the vocabulary gets some valid column: a caller that scores it must check
  first (`check_scored`).
  """
  token_ids = jnp.asarray(token_ids, jnp.int32)
  if vocab is None:
    return token_ids, jnp.ones(token_ids.shape, jnp.bool_)
  ids = ids_array(vocab)
  cols = jnp.minimum(jnp.searchsorted(ids, token_ids), ids.shape[0] - 1).astype(jnp.int32)
  return cols, ids[cols] == token_ids


def token_ids(vocab: RestrictedVocab | None, cols) -> jax.Array:
  """Output columns [...] -> token ids [...] int32."""
  cols = jnp.asarray(cols, jnp.int32)
  return ids_array(vocab)[cols] if vocab is not None else cols


def check_scored(vocab: RestrictedVocab | None, tokens, loss_mask) -> None:
  """Raises ValueError when a token that the loss scores is outside `vocab` (host-side).

  tokens / loss_mask: equal-shape arrays; the non-zero mask marks the scored tokens, e.g.
  packed `targets` with `loss_mask` [R, S]. Call it on every batch before the train step:
  the step would score some other column (`columns`).
  """
  if vocab is None:
    return
  tokens, mask = np.asarray(tokens), np.asarray(loss_mask) != 0
  if tokens.shape != mask.shape:
    raise ValueError(f"check_scored: tokens {tokens.shape} and loss_mask {mask.shape} differ "
                     "in shape")
  scored = tokens[mask].astype(np.int64)  # in row-major order
  ids = np.asarray(vocab.ids, np.int64)  # [V'] sorted
  found = ids[np.minimum(np.searchsorted(ids, scored), len(ids) - 1)] == scored
  if not found.all():
    outside = scored[~found]
    raise ValueError(f"{outside.size} of {scored.size} loss tokens are outside the restricted "
                     f"output vocabulary ({len(ids)} ids); the first is token id "
                     f"{int(outside[0])}")
