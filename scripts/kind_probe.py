"""Does a policy read the question? Its answer probabilities on held-out kind questions.

    python scripts/kind_probe.py --config configs/kinds_cpu.py \
        --checkpoint workdir/demo/sft/checkpoints [--checkpoint workdir/demo/rl/checkpoints]

For each held-out question of the configured kinds world (`data.world_style="kinds"`) it
feeds the prompt and the reply's fixed start ("## Exact Answer" and a newline) and reads the
next-token probabilities of the two options. It prints, per checkpoint: the mean probability
of the right option (what avg@k at temperature 1 tends to once the format is right), the share
of questions whose right option is the likelier (greedy accuracy between the two), and the
mean P(first option | one of the two) on each relation. A policy that ignores the question
gives the same number on every relation. Results: docs/results.md.
"""
from __future__ import annotations

import argparse
import pathlib
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from carr_jax import cli
from carr_jax.jobs import components
from carr_jax.jobs import tasks as data_lib  # noqa: E402
from carr_jax.jobs.evaluate import policy_params  # noqa: E402
from carr_jax.model import decode  # noqa: E402
from carr_jax.model import qwen3 as model_lib  # noqa: E402
from rollout import chat  # noqa: E402

REPLY_START = "\n</think>\n\n## Exact Answer\n"  # generated before the answer word


def probe_inputs(fmt: chat.ChatFormat, records: list[dict]) -> tuple[np.ndarray, np.ndarray]:
  """([N, T] right-padded token ids ending in the reply start, [N] their lengths)."""
  seqs = [fmt.prompt_ids(r["input_messages"], r["tools"] or None) + fmt.encode(REPLY_START)
          for r in records]
  tokens = np.zeros((len(seqs), max(map(len, seqs))), np.int32)
  for i, s in enumerate(seqs):
    tokens[i, :len(s)] = s
  return tokens, np.array([len(s) for s in seqs], np.int32)


def option_probs(params, cfg, tokens: np.ndarray, lengths: np.ndarray,
                 option_ids: list[int]) -> np.ndarray:
  """[N, K] next-token probability of each option's (single) token after each row's end."""
  columns, known = model_lib.output_positions(cfg, jnp.asarray(option_ids))  # [K]
  if not bool(known.all()):
    raise ValueError(f"option ids {option_ids} are not all in the policy's output vocabulary")
  out = []
  for b in range(0, len(tokens), 32):
    t = jnp.asarray(tokens[b:b + 32])  # [B, T]
    logits, _ = decode.prefill(params, cfg, t, jnp.asarray(lengths[b:b + 32]),
                               decode.init_cache(cfg, t.shape[0], t.shape[1]))  # [B, V']
    out.append(np.asarray(jax.nn.softmax(logits, axis=-1)[:, columns], np.float64))
  return np.concatenate(out)


def relation_of(record: dict) -> str:
  """The questioned relation: "X, a painter, studied at something. ..." -> "studied at"."""
  found = re.search(r", an? [^,]+, (.+?) something\.", record["input_messages"][-1]["content"])
  return found[1] if found else "?"


def _probe(args: argparse.Namespace) -> None:
  config = args.config
  cfg = components.model_config(config)
  fmt = chat.ChatFormat(components.tokenizer(config))
  _, records, _ = data_lib.load_tasks(config.data)
  options = records[0]["metadata"]["gold"]["options"]
  option_ids = [fmt.encode(o) for o in options]
  if any(len(ids) != 1 for ids in option_ids):
    raise ValueError(f"every option must be one token; got {dict(zip(options, option_ids))}")
  tokens, lengths = probe_inputs(fmt, records)
  right = np.array([options.index(r["label"]) for r in records])  # [N]
  relations = [relation_of(r) for r in records]
  for checkpoint in args.checkpoint:
    p = option_probs(policy_params(config, cfg, checkpoint)[0], cfg, tokens, lengths,
                     [ids[0] for ids in option_ids])  # [N, K]
    p_right = p[np.arange(len(p)), right]
    first = p[:, 0] / p.sum(1)
    by_relation = {rel: round(float(first[[r == rel for r in relations]].mean()), 3)
                   for rel in sorted(set(relations))}
    print(f"{checkpoint}: P(right) {p_right.mean():.4f} | right is likelier "
          f"{np.mean(p_right == p.max(1)):.3f} | P({options[0]} | an option) by relation "
          f"{by_relation} | n={len(p)}")


def parser() -> argparse.ArgumentParser:
  p = cli.parser("python scripts/kind_probe.py", __doc__.split("\n")[0],
                 config="Config with the kinds world and the policy (configs/kinds_cpu.py).")
  p.add_argument("--checkpoint", required=True, action="append",
                 help="checkpoint root or one step directory (repeat to compare)")
  return p


if __name__ == "__main__":
  raise SystemExit(cli.run(_probe, parser()))
