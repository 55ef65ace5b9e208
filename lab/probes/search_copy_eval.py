"""Greedy accuracy of a policy's search queries on the named world's held-out questions.

    python -m lab.probes.search_copy_eval --config lab/configs/named_cpu.py:copy \
        --checkpoint workdir/named/copy/checkpoints

For every search turn of the scripted expert's episodes on the configured world's eval split,
in the short context of `lab.world.expert.search_examples` (the question; for later searches
also the page the name is read from), it checks whether the policy's greedy next token after
`"query": "` is the first token of the entity the expert searched. It prints the hit rate of
the first search (the head's name, copied from the question) and of the later ones (the next
entity's name, chosen on the page by the question's relation). Results: docs/results.md.
"""
from __future__ import annotations

import argparse
import asyncio

import jax.numpy as jnp
import numpy as np

from carr_jax import cli
from carr_jax.jobs import components
from carr_jax.jobs import tasks as data_lib
from carr_jax.jobs.evaluate import policy_params
from carr_jax.model import decode
from carr_jax.model import restricted_vocab
from lab.world.expert import ExpertConfig, expert_trajectories, search_examples
from rollout import chat
from rollout.tools.corpus import CorpusBackend


def query_positions(fmt: chat.ChatFormat, examples: list[dict]) -> list[int]:
  """Index of the token that ends `"query": "` in each example's search turn."""
  key = fmt.encode('{"query": "')[-3:]  # query, '":', ' "'
  return [next(i for i in range(e["loss_mask"].index(1) + 2, len(e["token_ids"]))
               if e["token_ids"][i - 2:i + 1] == key) for e in examples]


def greedy_hits(params, cfg, vocab, examples: list[dict], positions: list[int]) -> np.ndarray:
  """[N] bool: the greedy token after each position is the example's own next token."""
  hits = []
  for start in range(0, len(examples), 16):
    chunk, pos = examples[start:start + 16], positions[start:start + 16]
    toks = np.zeros((len(chunk), max(pos) + 1), np.int32)  # [B, T]: each row up to its position
    for r, (e, p) in enumerate(zip(chunk, pos)):
      toks[r, :p + 1] = e["token_ids"][:p + 1]
    logits, _ = decode.prefill(params, cfg, jnp.asarray(toks), jnp.asarray(pos, jnp.int32) + 1,
                               decode.init_cache(cfg, *toks.shape), vocab)  # [B, V']
    greedy = np.asarray(restricted_vocab.token_ids(vocab, jnp.argmax(logits, axis=-1)))  # [B]
    hits += [greedy[r] == e["token_ids"][p + 1] for r, (e, p) in enumerate(zip(chunk, pos))]
  return np.asarray(hits)


def _evaluate(args: argparse.Namespace) -> None:
  config = args.config
  cfg, vocab = components.model_config(config), components.output_vocab(config)
  params, _ = policy_params(config, cfg, args.checkpoint)
  fmt = chat.ChatFormat(components.tokenizer(config))
  _, evals, corpus = data_lib.load_tasks(config)
  episodes = asyncio.run(expert_trajectories(
      evals, CorpusBackend.from_records(corpus), fmt, ExpertConfig(1, False, "brief")))
  examples = [e for ep in episodes for e in search_examples(ep, fmt)]
  hits = greedy_hits(params, cfg, vocab, examples, query_positions(fmt, examples))
  later = np.asarray([not e["prompt_id"].endswith("#0") for e in examples])
  for name, sel in (("first search", ~later), ("later searches", later)):
    print(f"{name}: greedy hit {hits[sel].mean():.3f} ({hits[sel].sum()} of {sel.sum()})")


def parser() -> argparse.ArgumentParser:
  p = cli.parser("python -m lab.probes.search_copy_eval", __doc__.split("\n")[0],
                 config="Config with the named world and the policy's output vocabulary.")
  p.add_argument("--checkpoint", required=True, help="checkpoint root or one step directory")
  return p


if __name__ == "__main__":
  raise SystemExit(cli.run(_evaluate, parser()))
