"""Does a policy read the question? Its answer probabilities on held-out kind questions.

    python -m lab.probes.kind_probe --config lab/configs/kinds_cpu.py \
        --checkpoint workdir/demo/sft/checkpoints [--checkpoint workdir/demo/rl/checkpoints]

For each held-out question of the configured kinds world (`world.style="kinds"`) it
feeds the prompt and the reply's fixed start ("## Exact Answer" and a newline) and reads the
next-token probabilities of the two options. It prints, per checkpoint: the mean probability
of the right option (what avg@k at temperature 1 tends to once the format is right), the share
of questions whose right option is the likelier (greedy accuracy between the two), and the
mean P(first option | one of the two) on each relation. A policy that ignores the question
gives the same number on every relation.

On lookup, reference and chain worlds it first prints how well the policy copies the link
number into its query (the expert's searched episode, teacher-forced up to each digit: P(all
digits) and the share copied greedily; on a chain also the next search's code, read off the
first page), then feeds instead the "lookup" expert's episodes up
to the first answer word of the final reply (its reasoning included): the tool-free one (does
the policy read the relation?) and the searched one (the question, the glossary search, the page it
returned: does it read the page it received?). It also splits the questions by the gold
`shortcut` flag: on the evidence-only ones (the relation's usual kind is wrong) it prints
P(right), what the page says, beside P(shortcut answer), what the relation says.
Results: docs/results.md.
"""
from __future__ import annotations

import argparse
import re

import jax
import jax.numpy as jnp
import numpy as np

from carr_jax import cli
from carr_jax.jobs import components
from carr_jax.jobs import tasks as data_lib
from carr_jax.jobs.evaluate import policy_params
from carr_jax.model import decode
from carr_jax.model import restricted_vocab
from lab.world.chain import MARKERS
from lab.world.expert import ExpertConfig, expert_episode, looks_up
from lab.world.lookup import is_lookup
from rollout import chat

REPLY_START = "\n</think>\n\n## Exact Answer\n"  # generated before the answer word
_MARKED = re.compile(rf"\b({'|'.join(MARKERS)}) $")  # a glossary term's marker word
# "Link ": how the reply's first cited sentence opens (queries write "link ")
_REPLY_MARKED = re.compile(rf"\b({'|'.join(m.title() for m in MARKERS)}) $")


def probe_inputs(fmt: chat.ChatFormat, records: list[dict]) -> tuple[np.ndarray, np.ndarray]:
  """([N, T] right-padded token ids ending in the reply start, [N] their lengths)."""
  seqs = [fmt.prompt_ids(r["input_messages"], r["tools"] or None) + fmt.encode(REPLY_START)
          for r in records]
  tokens = np.zeros((len(seqs), max(map(len, seqs))), np.int32)
  for i, s in enumerate(seqs):
    tokens[i, :len(s)] = s
  return tokens, np.array([len(s) for s in seqs], np.int32)


def expert_episodes(fmt: chat.ChatFormat, records: list[dict], backend,
                    searched: bool) -> list[dict]:
  """The "lookup" expert's searched (or tool-free) episode of each record."""
  import asyncio
  cfg = ExpertConfig(search_results=1, answer="lookup", known_fraction=1.0)

  async def episodes():
    out = []
    for r in records:
      k = next(k for k in range(2)
               if looks_up(r["metadata"]["gold"], str(r["id"]), k) == searched)
      out.append(await expert_episode(r, backend, fmt, cfg, k))
    return out
  return asyncio.run(episodes())


def right_padded(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
  """([N, T] right-padded token ids, [N] lengths)."""
  tokens = np.zeros((len(seqs), max(map(len, seqs))), np.int32)
  for i, seq in enumerate(seqs):
    tokens[i, :len(seq)] = seq
  return tokens, np.array([len(seq) for seq in seqs], np.int32)


def expert_inputs(episodes: list[dict], option_ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
  """Like `probe_inputs`, each row one of the expert's `episodes` cut before its final reply's
  first option token."""
  seqs = []
  for ep in episodes:
    ids, mask = ep["token_ids"], ep["loss_mask"]
    last = max(i for i, m in enumerate(mask) if not m) + 1  # the final reply's first token
    seqs.append(ids[:next(i for i in range(last, len(ids)) if ids[i] in option_ids)])
  return right_padded(seqs)


def query_copy_inputs(fmt: chat.ChatFormat, searched: list[dict], hop: int = 0
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The `searched` expert episodes cut before each digit of the number in search `hop`'s
  query (0: the question's link; on a chain, 1: the code read off the first page).

  Returns ([N*D, T] token ids, [N*D] lengths, [N*D] the digit token that comes next), where
  D is the number's digit count: the rows of question i ask for its digits in order.
  """
  # the searches come before the reply, whose citations hold digits too
  return _digit_rows(fmt, searched, _MARKED, hop)


def cite_copy_inputs(fmt: chat.ChatFormat, searched: list[dict]
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """As `query_copy_inputs`, before each digit of the first page's number where the reply
  first writes it ("Link 800 continues under code 319. [[1](.../link_800)]": the cited URL
  then repeats it), so a miscopy there cites a page never opened."""
  return _digit_rows(fmt, searched, _REPLY_MARKED, 0)


def _digit_rows(fmt: chat.ChatFormat, searched: list[dict], marked: re.Pattern, k: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Each episode cut before each digit of its k-th generated number that follows `marked`."""
  digit_ids = {fmt.encode(str(d))[0] for d in range(10)}
  seqs, targets = [], []
  for ep in searched:
    ids, mask = ep["token_ids"], ep["loss_mask"]
    numbers = [i for i in range(1, len(ids))  # generated digits right after a marker
               if mask[i] and ids[i] in digit_ids
               and marked.search(fmt.tokenizer.decode(ids[max(0, i - 4):i]))]
    i = numbers[k]
    while ids[i] in digit_ids:  # the number, digit by digit
      seqs.append(ids[:i])
      targets.append(ids[i])
      i += 1
  return (*right_padded(seqs), np.array(targets, np.int32))


def next_probs(params, cfg, vocab, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
  """[N, V'] next-token distribution (over the output vocabulary `vocab`) after each row's
  end."""
  out = []
  for b in range(0, len(tokens), 32):
    t = jnp.asarray(tokens[b:b + 32])  # [B, T]
    logits, _ = decode.prefill(params, cfg, t, jnp.asarray(lengths[b:b + 32]),
                               decode.init_cache(cfg, t.shape[0], t.shape[1]), vocab)  # [B, V']
    out.append(np.asarray(jax.nn.softmax(logits, axis=-1), np.float64))
  return np.concatenate(out)


def option_probs(params, cfg, vocab, tokens: np.ndarray, lengths: np.ndarray,
                 option_ids: list[int]) -> np.ndarray:
  """[N, K] next-token probability of each option's (single) token after each row's end."""
  columns, known = restricted_vocab.columns(vocab, jnp.asarray(option_ids))  # [K]
  if not bool(known.all()):
    raise ValueError(f"option ids {option_ids} are not all in the policy's output vocabulary")
  return next_probs(params, cfg, vocab, tokens, lengths)[:, np.asarray(columns)]


def next_token_probs(params, cfg, vocab, tokens: np.ndarray, lengths: np.ndarray,
                     targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """([M] next-token probability of each row's target, [M] whether it is the likeliest)."""
  columns = np.asarray(restricted_vocab.columns(vocab, jnp.asarray(targets))[0])  # [M]
  p = next_probs(params, cfg, vocab, tokens, lengths)  # [M, V']
  return p[np.arange(len(p)), columns], p.argmax(1) == columns


def copy_rates(p: np.ndarray, top: np.ndarray, n: int) -> tuple[float, float]:
  """(greedy exact, P(all digits)) from [N*D] per-digit probabilities and top-1 flags, the
  rows of question i in order."""
  p, top = p.reshape(n, -1), top.reshape(n, -1)  # [N, D]
  return float(top.all(1).mean()), float(p.prod(1).mean())


def print_query_copy(params, cfg, vocab, name: str, tokens, lengths, targets, n: int,
                     hop: int = 0) -> None:
  """The teacher-forced copy of a number into search `hop`'s query: P(every digit) and
  greedy exact."""
  p, top = next_token_probs(params, cfg, vocab, tokens, lengths, targets)  # [N*D] each
  exact, p_digits = copy_rates(p, top, n)
  print(f"query copy, search {hop}: {name}: P(digits) {p_digits:.4f} | greedy exact "
        f"{exact:.3f} | P(digit k) {np.round(p.reshape(n, -1).mean(0), 3).tolist()} | n={n}")


def relation_of(record: dict) -> str:
  """The questioned relation: "X, a painter, studied at something. ..." -> "studied at"."""
  found = re.search(r", an? [^,]+, (.+?) something[. ]", record["input_messages"][-1]["content"])
  return found[1] if found else "?"


def _probe(args: argparse.Namespace) -> None:
  config = args.config
  cfg, vocab = components.model_config(config), components.output_vocab(config)
  fmt = chat.ChatFormat(components.tokenizer(config))
  _, records, corpus = data_lib.load_tasks(config)
  options = records[0]["metadata"]["gold"]["options"]
  option_ids = [fmt.encode(o) for o in options]
  if any(len(ids) != 1 for ids in option_ids):
    raise ValueError(f"every option must be one token; got {dict(zip(options, option_ids))}")
  inputs, copy_inputs = {"": probe_inputs(fmt, records)}, []
  if is_lookup(records[0]["metadata"]["gold"]):  # lookup / reference: the expert's episodes
    from rollout.tools.corpus import CorpusBackend
    backend = CorpusBackend.from_records(corpus)
    episodes = {searched: expert_episodes(fmt, records, backend, searched)
                for searched in (False, True)}
    inputs = {f"{name}: ": expert_inputs(episodes[searched], [i[0] for i in option_ids])
              for name, searched in (("tool-free", False), ("searched", True))}
    hops = len(records[0]["metadata"]["gold"].get("chain", [None]))
    copy_inputs = [query_copy_inputs(fmt, episodes[True], hop) for hop in range(hops)]
  right = np.array([options.index(r["label"]) for r in records])  # [N]
  golds = [r["metadata"]["gold"] for r in records]
  evidence_only = np.array([not g.get("shortcut", True) for g in golds])  # [N]
  usual = np.array([options.index(g.get("shortcut_answer", r["label"]))
                    for g, r in zip(golds, records)])  # [N]
  relations = [relation_of(r) for r in records]
  for checkpoint in args.checkpoint:
    params = policy_params(config, cfg, checkpoint)[0]
    for hop, copy in enumerate(copy_inputs):
      print_query_copy(params, cfg, vocab, checkpoint, *copy, len(records), hop)
    for name, (tokens, lengths) in inputs.items():
      print_option_probs(option_probs(params, cfg, vocab, tokens, lengths,
                                      [ids[0] for ids in option_ids]),  # [N, K]
                         f"{name}{checkpoint}", options, right, evidence_only, usual,
                         relations)


def print_option_probs(p: np.ndarray, name: str, options: list[str], right: np.ndarray,
                       evidence_only: np.ndarray, usual: np.ndarray,
                       relations: list[str]) -> None:
  """One line per probe input: P(right) overall, by relation and on the evidence-only split."""
  p_right = p[np.arange(len(p)), right]
  first = p[:, 0] / p.sum(1)
  by_relation = {rel: round(float(first[[r == rel for r in relations]].mean()), 3)
                 for rel in sorted(set(relations))}
  print(f"{name}: P(right) {p_right.mean():.4f} | right is likelier "
        f"{np.mean(p_right == p.max(1)):.3f} | P({options[0]} | an option) by relation "
        f"{by_relation} | n={len(p)}")
  if evidence_only.any():
    p_usual = p[np.arange(len(p)), usual]
    print(f"  evidence-only ({int(evidence_only.sum())}): P(right) "
          f"{p_right[evidence_only].mean():.4f}, P(shortcut answer) "
          f"{p_usual[evidence_only].mean():.4f} | shortcut-admitting: P(right) "
          f"{p_right[~evidence_only].mean():.4f}")


def parser() -> argparse.ArgumentParser:
  p = cli.parser("python -m lab.probes.kind_probe", __doc__.split("\n")[0],
                 config="Config with the kinds world and the policy (lab/configs/kinds_cpu.py).")
  p.add_argument("--checkpoint", required=True, action="append",
                 help="checkpoint root or one step directory (repeat to compare)")
  return p


if __name__ == "__main__":
  raise SystemExit(cli.run(_probe, parser()))
