"""Does a cold start copy the question's link, and a chain's next terms, into its queries?

    python -m lab.probes.link_copy --config lab/configs/lookup_cpu.py:sft \
        --checkpoint workdir/demo/sft/checkpoints [--first 64] [--min 0.9]

On the held-out questions from index `--first` on (default 64: past the `train.eval_questions`
that the RL job evaluates, so the gate never looks at them), it feeds the "lookup" expert's
searched episode up to each digit of the link in its first query (hop 0) and, on a chain,
of the term each later query copies from the page just opened (hop 1, ...), and with
`--cite` of the first page's number where the reply first writes it, the cited sentence
whose URL repeats it (hop cite: a reply citing a page it never opened earns no rubric), and
prints one line per hop,

    link_copy greedy_exact=<float> p_digits=<float> n=<questions> min=<float> pass=<0|1> hop=<k>

(greedy_exact: the share of questions whose digits are all the likeliest next tokens;
p_digits: the mean probability of all of them), then exits 0 when every hop's greedy_exact
>= --min and 1 below it: a gate before RL. The copy is learned as a sudden transition at a
seed- and machine-dependent SFT step (docs/results.md); `scripts/cold_start.sh` trains on
until this gate passes.
"""
from __future__ import annotations

import argparse

from carr_jax import cli
from carr_jax.jobs import components
from carr_jax.jobs import tasks as data_lib
from carr_jax.jobs.evaluate import policy_params
from lab.probes import kind_probe
from lab.world.lookup import is_lookup
from rollout import chat


def _gate(args: argparse.Namespace) -> int:
  config = args.config
  cfg, vocab = components.model_config(config), components.output_vocab(config)
  fmt = chat.ChatFormat(components.tokenizer(config))
  _, records, corpus = data_lib.load_tasks(config)
  records = records[args.first:]
  if not records or not is_lookup(records[0]["metadata"]["gold"]):
    raise cli.UsageError(f"no held-out question with a link from index {args.first} on: the "
                         "gate needs a lookup or reference world with more held-out questions")
  from rollout.tools.corpus import CorpusBackend
  searched = kind_probe.expert_episodes(fmt, records, CorpusBackend.from_records(corpus), True)
  params = policy_params(config, cfg, args.checkpoint)[0]
  passed = True
  for hop in range(len(records[0]["metadata"]["gold"].get("chain") or [None])):
    passed &= _hop(params, cfg, vocab, kind_probe.query_copy_inputs(fmt, searched, hop),
                   len(records), args.min, hop)
  if args.cite:
    passed &= _hop(params, cfg, vocab, kind_probe.cite_copy_inputs(fmt, searched),
                   len(records), args.min, "cite")
  return 0 if passed else 1


def _hop(params, cfg, vocab, inputs, n: int, minimum: float, hop: int | str) -> bool:
  """Prints one hop's line; True when it passes."""
  tokens, lengths, targets = inputs
  p, top = kind_probe.next_token_probs(params, cfg, vocab, tokens, lengths, targets)
  exact, p_digits = kind_probe.copy_rates(p, top, n)
  print(f"link_copy greedy_exact={exact:.3f} p_digits={p_digits:.4f} n={n} min={minimum} "
        f"pass={int(exact >= minimum)} hop={hop}")
  return exact >= minimum


def parser() -> argparse.ArgumentParser:
  p = cli.parser("python -m lab.probes.link_copy", __doc__.split("\n")[0],
                 config="The cold start's config (lab/configs/lookup_cpu.py:sft).")
  p.add_argument("--checkpoint", required=True, help="checkpoint root or one step directory")
  p.add_argument("--first", type=int, default=64,
                 help="first held-out question probed (those before it are the RL evaluation's)")
  p.add_argument("--cite", action="store_true",
                 help="also gate the copy of the first page's number where the reply first writes it")
  p.add_argument("--min", type=float, default=0.9, help="greedy exact copy share that passes")
  return p


if __name__ == "__main__":
  raise SystemExit(cli.run(_gate, parser()))
