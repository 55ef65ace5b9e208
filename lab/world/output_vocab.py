"""Restricted output vocabularies: the token ids a policy may emit, and the batch check.

`model.output_vocab="task"` (configs/base.py) is a small-scale speed technique for the CPU
demo. The tiny policy keeps the real Qwen3 tokenizer (151,936 ids), whose output projection
and softmax then dominate the cost of training and sampling; with it, the output distribution
covers only the few hundred ids the synthetic world can need (a
`carr_jax.model.restricted_vocab.RestrictedVocab`, which `components.output_vocab` makes of
these ids and passes to the train step and the sampler).
Embeddings stay full-vocabulary, the parameters and the HF export are unchanged, and the
sampler and the train step use the same restricted softmax, so rollout and trainer log-probs
agree (carr_jax/model/qwen3.py, carr_jax/model/decode.py, `train_step.target_logprobs`).

`world_output_ids(train, eval, corpus, fmt)` is the sorted union of
  (a) the tokens of every corpus page as the browser tools show it (an opened page, a search
      result) and of its title and URL as a tool call spells them (search, open, find);
  (b) the generated tokens (loss mask 1) of the scripted expert's episodes (lab.world.expert)
      on every train and eval record, under each expert setting of `expert_configs`
      (default: the expert's defaults, and 1 search result without find and with brief
      answers: each value of each setting once, and each setting changes its own turns
      only; one set for every stage, so an SFT run and the RL run after it on the same world
      get the same ids); a "lookup" world's records under `answer="lookup"` instead;
  (c) the tokens of every record's label;
  (d) the chat format's special ids that end turns and call tools (rollout/chat.py);
  (e) each printable ASCII character, tab and newline as one token: about 100 ids that keep
      every ASCII text expressible (spelled character by character when its usual tokens
      are missing), so a sampled query or answer is never impossible, only longer.
`components.output_vocab` builds it once per run; nothing is memoized. On the demo worlds it
holds 600-900 ids (vs 151,936).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

log = logging.getLogger(__name__)


def default_expert_configs() -> tuple:
  """Each value of each of the expert's settings once (see (b) of the module docstring)."""
  from lab.world.expert import ExpertConfig
  return (ExpertConfig(), ExpertConfig(search_results=1, use_find=False, answer="brief"))


def special_ids() -> set[int]:
  """Ids that end a turn or a generation and delimit reasoning and tool calls."""
  from rollout import chat
  return {chat.ENDOFTEXT_ID, chat.IM_END_ID, chat.THINK_ID, chat.THINK_END_ID,
          chat.TOOL_CALL_ID, chat.TOOL_CALL_END_ID, *chat.STOP_TOKEN_IDS}


def page_texts(page_record: Mapping) -> list[str]:
  """A corpus page as the tools show it and as tool calls name it (texts to tokenize)."""
  from rollout import chat
  from rollout.tools.backend import Page, SearchHit
  from rollout.tools.session import format_search
  page = Page.from_record(dict(page_record))
  shown = [page.render(), format_search([SearchHit(page.title, page.url, page.content)])]
  calls = [chat.tool_call_text("browser.search", {"query": page.title, "num": 10}),
           chat.tool_call_text("browser.open", {"id": page.url}),
           chat.tool_call_text("browser.find", {"pattern": page.title})]
  return [chat.tool_responses_text(shown)] + calls


def corpus_token_ids(corpus: Iterable[Mapping], fmt) -> set[int]:
  """(a): every token of every page's rendered text, title and URL."""
  out: set[int] = set()
  for page in corpus:
    for text in page_texts(page):
      out.update(fmt.encode(text))
  return out


async def _expert_records(records: Sequence[Mapping], backend, fmt, cfg) -> list[dict]:
  from lab.world.expert import ExpertError, expert_episode

  async def one(record):
    try:
      return await expert_episode(record, backend, fmt, cfg)
    except ExpertError as e:  # a record the expert cannot walk adds no ids (logged)
      log.warning("output vocab: no expert episode for %r: %s", record.get("id"), e)
      return None
  return [t for t in await asyncio.gather(*(one(r) for r in records)) if t is not None]


def expert_token_ids(records: Sequence[Mapping], corpus: Sequence[Mapping], fmt,
                     expert_configs: Sequence | None = None) -> set[int]:
  """(b): the loss-mask-1 tokens of the expert's episodes on `records`, for each config."""
  from lab.world.expert import ExpertConfig
  from lab.world.lookup import is_lookup
  from rollout.tools.corpus import CorpusBackend
  backend = CorpusBackend.from_records(corpus)
  lookup = [is_lookup((r.get("metadata") or {}).get("gold") or {}) for r in records]
  others = [r for r, is_lk in zip(records, lookup) if not is_lk]
  runs = [(others, cfg) for cfg in dict.fromkeys(expert_configs or default_expert_configs())]
  runs.append(([r for r, is_lk in zip(records, lookup) if is_lk],
               ExpertConfig(search_results=1, answer="lookup")))
  out: set[int] = set()
  for chosen, cfg in runs:
    for traj in asyncio.run(_expert_records(chosen, backend, fmt, cfg)):
      ids, mask = np.asarray(traj["token_ids"]), np.asarray(traj["loss_mask"])
      out.update(ids[mask == 1].tolist())
  return out


def label_token_ids(records: Iterable[Mapping], fmt) -> set[int]:
  """(c): each label's tokens at the start of a line and after a space."""
  out: set[int] = set()
  for record in records:
    label = str(record.get("label", ""))
    if label:
      out.update(fmt.encode(label))
      out.update(fmt.encode(" " + label))
  return out


def ascii_token_ids(fmt) -> set[int]:
  """(e): the tokens of each printable ASCII character, tab and newline on its own."""
  out: set[int] = set()
  for char in [chr(c) for c in range(32, 127)] + ["\t", "\n"]:
    out.update(fmt.encode(char))
  return out


def world_output_ids(train_records: Sequence[Mapping], eval_records: Sequence[Mapping],
                     corpus: Sequence[Mapping], fmt,
                     expert_configs: Sequence | None = None) -> tuple[int, ...]:
  """Sorted token ids (a) to (e) of the module docstring; `fmt` a rollout.chat.ChatFormat,
  `expert_configs` lab.world.expert.ExpertConfig's (None: `default_expert_configs()`)."""
  records = [*train_records, *eval_records]
  ids = (corpus_token_ids(corpus, fmt) | expert_token_ids(records, corpus, fmt, expert_configs)
         | label_token_ids(records, fmt) | special_ids() | ascii_token_ids(fmt))
  return tuple(sorted(int(i) for i in ids))
