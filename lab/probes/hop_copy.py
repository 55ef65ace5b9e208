"""Does a policy's k-th search name the chain's k-th term? Copying along a chain, from dumps.

    python -m lab.probes.hop_copy --config lab/configs/chain_cpu.py:stale \
        --trajectories RUN/trajectories/step_1.jsonl RUN/trajectories/step_2.jsonl

A chain question's evidence is a trail of glossary terms (`metadata.gold.chain`: the
question's own link, then the term its page continues under, ...). To reach the last page the
agent must copy each term into its next search: the first from the question, every later one
from the page it has just opened. For each hop k (1-based) the probe counts, over the dumped
episodes (an RL run's `trajectories/step_*.jsonl`) that searched at least k times, those whose
k-th query names term k as a whole word, and prints one line per hop,

    hop_copy hop=<k> share=<float> copied=<n> episodes=<m>

and one more, hop=cite, over the episodes whose final reply cites a URL: those whose first
cited URL is the question's own page (term 1's; a mistyped number cites a page never
opened, which supports no rubric).

A cold start that copies the question's link but not the next term reaches the deciding page
by chance only, so no outcome or rubric reward can teach it to read the chain.
"""
from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Mapping, Sequence

from carr_jax import cli
from judge.citations import extract_citations
from lab.probes.listing_reveal import dumped_searches, dumped_trajectories
from lab.world.lookup import glossary_url


def names(query: str, term: str) -> bool:
  """Whether `query` holds `term` as whole words ("code 13" is not in "code 135")."""
  return re.search(rf"(?<!\w){re.escape(term)}(?!\w)", query, re.IGNORECASE) is not None


def hop_counts(episodes: Iterable[tuple[Sequence[str], Sequence[str]]]) -> list[tuple[int, int]]:
  """[(copied, episodes)] per hop over (chain terms, search queries in order) pairs."""
  counts: list[list[int]] = []
  for chain, queries in episodes:
    for k, (term, query) in enumerate(zip(chain, queries)):
      if k == len(counts):
        counts.append([0, 0])
      counts[k][0] += names(query, term)
      counts[k][1] += 1
  return [(c, n) for c, n in counts]


def episodes_of(paths: Sequence[str], records: Mapping[str, Mapping]):
  """(chain terms, search queries) of every dumped episode in `paths`."""
  for prompt_id, searches in dumped_searches(paths):
    yield records[prompt_id]["metadata"]["gold"].get("chain") or [], [q for q, _ in searches]


def cite_count(paths: Sequence[str], records: Mapping[str, Mapping]) -> tuple[int, int]:
  """(episodes whose first citation is the question's own page, episodes that cite) over the
  dumped episodes in `paths`; citations as the judge reads them ([[n](url)])."""
  copied = n = 0
  for traj in dumped_trajectories(paths):
    history = traj.get("history") or []
    reply = history[-1].get("content") if history else None
    cited = extract_citations(reply, 1, accept_plain_links=False) if isinstance(reply, str) else []
    chain = records[traj["prompt_id"]]["metadata"]["gold"].get("chain")
    if cited and chain:
      copied += cited[0] == glossary_url(chain[0])
      n += 1
  return copied, n


def _probe(args: argparse.Namespace) -> None:
  from lab import tasks
  train, evals, _ = tasks.tasks(args.config)
  records = {r["id"]: r for r in train + evals}
  for k, (copied, n) in enumerate(hop_counts(episodes_of(args.trajectories, records)), 1):
    print(f"hop_copy hop={k} share={copied / n:.4f} copied={copied} episodes={n}")
  copied, n = cite_count(args.trajectories, records)
  print(f"hop_copy hop=cite share={copied / max(n, 1):.4f} copied={copied} episodes={n}")


def parser() -> argparse.ArgumentParser:
  p = cli.parser("python -m lab.probes.hop_copy", __doc__.split("\n")[0],
                 config="The run's config (its world: lab/configs/chain_cpu.py:stale).")
  p.add_argument("--trajectories", nargs="+", required=True,
                 help="dumped rollouts (JSONL trajectory records with history)")
  return p


if __name__ == "__main__":
  raise SystemExit(cli.run(_probe, parser()))
