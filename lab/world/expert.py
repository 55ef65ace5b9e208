"""A scripted expert for the synthetic world: gold-guided episodes for cold-start SFT.

    python -m lab.expert --config lab/configs/demo_cpu.py --out expert.jsonl [--split train]

prints the gold judge's mean outcome and rubric reward of the episodes it wrote.

The expert knows the world's gold annotations (`metadata.gold`, docs/design.md section 3) and
walks the question's chain hop by hop through a real `BrowserSession` over the world corpus,
from the head entity En (the one the question describes first) inward to the answer E0:

  search the entity's name -> open the result that is its page (by result number, or by URL
  when the search did not list it) -> find the next entity's name on that page, when it is
  there (the link the next hop follows; optional)

then answers in the requested format: the evidence sentence of every rubric, each followed by
a `[[n](url)]` citation of the page it was read on (only pages it opened), the answer's name
under `## Exact Answer`, and the cited pages under `## References`. Its episodes therefore
score outcome 1 and rubric reward 1 with the gold judge (tests/lab/test_expert.py). It does not
work out the head entity from the question's clues: it looks it up by its gold name, so it
demonstrates the format and the search / open / find / cite procedure, not the reasoning.

`answer="guess"` is a format-only cold start for questions that list their answer options
(`metadata.gold.options`, the "kinds" world): no reasoning, no tool call, one reply whose exact
answer is an option drawn at random: as many samples of a record as it has options give each
option once, so the policy learns the reply format and nothing about which option is right;
RL has to learn that. With `known_fraction` f the expert knows the right option of a seeded
fraction f of the records and gives it in every sample: a noisy expert, right on
f + (1 - f) / K of its replies, whom RL can surpass (lab/configs/kinds_cpu.py).

`answer="lookup"` is for the "lookup" world (lab/world/lookup.py): on a coded question,
and on every other sample of a plain one, it searches "glossary <term>" (one result), opens
that result (the listing never states the kind) and answers the kind the page's body
states, citing its page; on the other samples of a plain
question it answers like "guess" (no tool, `known_fraction` applies). So the policy sees both
ways to answer a plain question, the cited one and the shortcut. A "reference" question is
treated as a plain one whatever its answer, and its known tool-free answer is the relation's
usual kind (`shortcut_answer`): wrong on an exception, as a shortcut is. A "chain" question
(lab/world/chain.py) is searched and opened term by term, each page naming the next, and answered
with every page's sentence, each citing its page.

Episodes are trajectory records (docs/design.md section 2) built token by token the way the
agent loop builds them (prompt ids, each turn's canonical completion with loss mask 1,
observation ids with loss mask 0), so SFT trains on them as on a dumped rollout.
`rollout_logprobs` are 0.0 and `weight_version` is "expert": nothing was sampled.
"""
from __future__ import annotations

import asyncio
import dataclasses
import random
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from lab.world.lookup import LINKED_STYLES, STATED_KIND, is_lookup
from rollout import chat
from rollout.agent import (RolloutConfig, assistant_message, initial_messages, record_tools,
                           tool_message)
from rollout.tools import Backend, BrowserSession
from rollout.trajectory import Trajectory

EXPERT_VERSION = "expert"
# The expert's reasoning: one short fixed sentence per kind of step, no word repeated (small
# models loop on repeats). Names live in the tool arguments only, so a small policy can learn
# the format without inventing prose.
SEARCH_THOUGHT = "Look up the next entity."
OPEN_THOUGHT = "Open its page."
FIND_THOUGHT = "Find where this page names the next entity."
ANSWER_THOUGHT = "Every hop is confirmed; write the cited answer."
GLOSSARY_THOUGHT = "Check the glossary."
NEXT_TERM_THOUGHT = "Follow the term it names."


class ExpertError(RuntimeError):
  """The expert could not follow its plan (a record without gold, a gold page it cannot open)."""


@dataclasses.dataclass(frozen=True)
class ExpertConfig:
  search_results: int = 3  # `num` of every search: the name query ranks the page first
  use_find: bool = True  # confirm each hop's link with browser.find before moving on
  answer: str = "evidence"  # "evidence" (rubric sentences, cited) | "brief" | "guess" |
  # "lookup" (below)
  known_fraction: float = 0.0  # "guess", "lookup": records whose right option the expert gives
  chain_cite_all: float = 1.0  # "lookup" on chain questions: share of episodes (drawn per
  # record and sample) whose reply cites every page of the chain; the others cite one page
  chain_cite_first: float = 0.0  # of those others, the share citing the first page (a rubric
  # not connected to the answer); the rest cite the last
  chain_lure: float = 0.0  # "lookup" on chain questions: share of searched episodes (drawn
  # first) that stop at the first page and answer its lure, citing that page (chain.py)


# ExpertConfig's fields -> their keys in the `sft` section (configs/base.py sft_section).
SFT_KEYS = {"search_results": "expert_search_results", "use_find": "expert_find",
            "answer": "expert_answer", "known_fraction": "expert_known_fraction",
            "chain_cite_all": "expert_chain_cite_all",
            "chain_cite_first": "expert_chain_cite_first", "chain_lure": "expert_chain_lure"}


@dataclasses.dataclass
class _Episode:
  """The growing episode: a Trajectory (tokens, mask) and the session it browses with."""
  traj: Trajectory
  session: BrowserSession
  fmt: chat.ChatFormat
  turns: int = 0

  async def act(self, reasoning: str, name: str, arguments: dict) -> Any:
    """One assistant turn with one tool call, run for real; returns the ToolResult."""
    turn = chat.AssistantTurn(reasoning, "", (chat.ToolCall(name, arguments),))
    generated = self.fmt.encode(
        chat.completion_text(reasoning, "", [{"name": name, "arguments": arguments}]))
    self.traj.add_generated(generated, [0.0] * len(generated), EXPERT_VERSION)
    call_id = f"call_{self.turns}_0"
    self.traj.history.append(assistant_message(turn, [call_id]))
    result = await self.session.call(name, arguments)
    self.traj.count_tool(result.kind, None if result.ok else (result.error or "error"))
    self.traj.add_observation(self.fmt.observation_ids([result.text], generated))
    self.traj.history.append(tool_message([call_id], [result.text]))
    self.turns += 1
    return result

  def answer(self, reasoning: str, content: str) -> None:
    generated = self.fmt.encode(chat.completion_text(reasoning, content))
    self.traj.add_generated(generated, [0.0] * len(generated), EXPERT_VERSION)
    self.traj.history.append(
        assistant_message(chat.AssistantTurn(reasoning, content, ()), []))
    self.traj.finish("completed")


def _gold(record: Mapping) -> dict:
  gold = (record.get("metadata") or {}).get("gold")
  if not isinstance(gold, Mapping) or not isinstance(gold.get("entities"), Mapping) \
      or "style" not in gold:
    raise ExpertError(f"record {record.get('id')!r} has no metadata.gold.entities and style: "
                      "the expert only solves synthetic-world questions")
  return gold


def _result_number(session: BrowserSession, url: str) -> int | None:
  for k, hit in enumerate(session.results or ()):
    if hit.url == url:
      return k
  return None


async def _visit(ep: _Episode, entity: Mapping, next_entity: Mapping | None,
                 cfg: ExpertConfig) -> None:
  """search -> open -> (find) for one entity of the chain."""
  name, url = entity["name"], entity["url"]
  await ep.act(SEARCH_THOUGHT, "browser.search", {"query": name, "num": cfg.search_results})
  number = _result_number(ep.session, url)
  opened = await ep.act(OPEN_THOUGHT, "browser.open", {"id": url if number is None else number})
  if not opened.ok:
    raise ExpertError(f"could not open the gold page {url}: {opened.text[:200]}")
  if cfg.use_find and next_entity is not None:
    target = next_entity["name"]
    if target.casefold() in ep.session.page_text.casefold():
      await ep.act(FIND_THOUGHT, "browser.find", {"pattern": target})


def final_answer(gold: Mapping, opened_urls: Sequence[str], style: str = "evidence") -> str:
  """The three-section reply: evidence with [[n](url)] citations, exact answer, references.

  "evidence" states each rubric's evidence sentence with its citation; "brief" names each
  cited page's entity once, with its citation (the judge reads the cited pages themselves,
  so both earn the same rubric reward; brief answers are short enough for a tiny policy).
  """
  if style not in ("evidence", "brief"):
    raise ExpertError(f"expert answer style must be 'evidence' or 'brief', got {style!r}")
  names = {e["url"]: e["name"] for e in gold["entities"].values()}
  cited: list[str] = []
  lines = []
  for url in opened_urls:  # chain order: the head's page first
    evidence = [r["evidence"] for r in gold["rubrics"] if r["url"] == url]
    if not evidence:
      continue
    cited.append(url)
    if style == "brief":
      evidence = [names[url]]
    lines += [f"{sentence} [[{len(cited)}]({url})]" for sentence in evidence]
  answer = gold["entities"]["E0"]["name"]
  references = "\n".join(f"{k}. {url}" for k, url in enumerate(cited, 1))
  return ("## Explanation with Citations\n" + "\n".join(lines)
          + f"\n\n## Exact Answer\n{answer}\n\n## References\n{references}")


def guess_answer(gold: Mapping, record_id: str, sample_index: int, label: str = "",
                 known_fraction: float = 0.0) -> str:
  """A reply whose exact answer is option (r + sample_index) mod K of `gold["options"]`, r
  drawn uniformly once per record: K samples of a record give every option once. A record
  is known with probability `known_fraction` (drawn from its id too); then every sample
  answers `label`, which must be one of the options."""
  options = gold.get("options")
  if not isinstance(options, list) or not options:
    raise ExpertError("the guess answer needs metadata.gold.options (the 'kinds' world)")
  rng = random.Random(record_id)
  first = rng.randrange(len(options))
  if known_fraction > 0.0 and rng.random() < known_fraction:
    if label not in options:
      raise ExpertError(f"record {record_id}: label {label!r} is not one of its options {options}")
    return f"## Exact Answer\n{label}"
  return f"## Exact Answer\n{options[(first + sample_index) % len(options)]}"


def looks_up(gold: Mapping, record_id: str, sample_index: int) -> bool:
  """Whether the "lookup" expert searches: always on a coded question (no shortcut), on
  samples of one parity (drawn per record) on a plain one and on every reference question
  (exceptions included: they read like the others)."""
  if not gold.get("shortcut") and gold["style"] not in LINKED_STYLES:
    return True
  return (random.Random(f"{record_id}/search").randrange(2) + sample_index) % 2 == 0


async def open_first(ep: _Episode, url: str) -> None:
  """Opens result 0 of the latest search, which must be the page at `url` (else ExpertError)."""
  if _result_number(ep.session, url) != 0:
    raise ExpertError(f"the glossary page {url} is not the first search result")
  opened = await ep.act(OPEN_THOUGHT, "browser.open", {"id": 0})
  if not opened.ok:
    raise ExpertError(f"could not open the glossary page {url}: {opened.text[:200]}")


def page_kind(session: BrowserSession, url: str) -> str:
  """The kind the page open in `session` (that of `url`) states in its body (ExpertError if
  none)."""
  stated_kind = STATED_KIND.search(session.page_text)
  if stated_kind is None:
    raise ExpertError(f"the glossary page {url} states no kind: {session.page_text!r}")
  return stated_kind.group(1)


def cited_kind_answer(gold: Mapping, session: BrowserSession) -> str:
  """The kind the opened glossary page states in its body (a stale page's too: the expert
  reads, it does not know), citing the page."""
  url = gold["entities"]["E0"]["url"]
  kind = page_kind(session, url)
  # a reference question's reply restates the page's sentence ("Its object is of the kind
  # city."), so reading it becomes copying the word after "kind"; it names no number, so the
  # citation's link is copied off the page's URL, not off a restated one (a tiny policy that
  # restated "Link 282" miscopied it on half its replies and then cited the miscopied URL)
  stated = f"Its object is of the kind {kind}." if gold["style"] in LINKED_STYLES else kind
  return f"## Explanation with Citations\n{stated} [[1]({url})]\n\n## Exact Answer\n{kind}"


CITED_PAGES = {"all": slice(None), "first": slice(0, 1), "last": slice(-1, None)}


def cited_chain_answer(gold: Mapping, pages: str = "all") -> str:
  """A chain question's reply: the rubric of each page `pages` names (CITED_PAGES), its
  entities filled in ("Link 417 continues under code 733."), citing the page, in chain order,
  then the kind (the pages were opened as their searches' first results: `open_first`)."""
  cited = gold["rubrics"][CITED_PAGES[pages]]
  return _chain_reply(cited, [r["url"] for r in cited], gold["entities"]["E0"]["name"], gold)


def lure_chain_answer(gold: Mapping, session: BrowserSession) -> str:
  """A chain question's reply after opening the first page only: every rubric filled in with
  the kind that page states (its lure, about another record), all citing that page."""
  first = gold["rubrics"][0]["url"]
  return _chain_reply(gold["rubrics"], [first] * len(gold["rubrics"]),
                      page_kind(session, first), gold)


def _chain_reply(rubrics: Sequence[Mapping], urls: Sequence[str], kind: str,
                 gold: Mapping) -> str:
  """The rubrics filled in (E0 = `kind`), one line each citing its url, then `kind`."""
  names = {e: v["name"] for e, v in gold["entities"].items()} | {"E0": kind}
  filled = [re.sub(r"<(E\d+)>", lambda m: names[m[1]], r["text"]) for r in rubrics]
  numbers = {url: k for k, url in enumerate(dict.fromkeys(urls), 1)}
  lines = [f"{text} [[{numbers[url]}]({url})]" for text, url in zip(filled, urls)]
  return "## Explanation with Citations\n" + "\n".join(lines) + f"\n\n## Exact Answer\n{kind}"


def chain_pages(record: Mapping, sample_index: int, cfg: ExpertConfig) -> str:
  """Which pages the reply to one sample of a chain question cites (a key of CITED_PAGES, or
  "lure": the first page's lure answered), drawn per record and sample by `cfg.chain_lure`,
  `cfg.chain_cite_all` and `cfg.chain_cite_first`."""
  draw = random.Random(f"{record['id']}/cite/{sample_index}")
  if cfg.chain_lure and draw.random() < cfg.chain_lure:
    return "lure"
  if draw.random() < cfg.chain_cite_all:
    return "all"
  return "first" if draw.random() < cfg.chain_cite_first else "last"


def shortcut_thought(gold: Mapping, answer: str) -> str:
  """A reference question's tool-free reasoning: the relation and the kind it usually points
  to (the answer it gives), so the shortcut reads the question's relation, not its link."""
  relation = gold.get("relation")
  return f"What a subject {relation} is usually of the kind {answer}." if relation else ""


async def expert_episode(record: Mapping, backend: Backend, fmt: chat.ChatFormat,
                         cfg: ExpertConfig = ExpertConfig(),
                         sample_index: int = 0) -> dict[str, Any]:
  """One expert trajectory record for a synthetic-world CaRR record (see module docstring)."""
  start = time.perf_counter()
  gold = _gold(record)
  lookup_question = is_lookup(gold)
  if cfg.answer != "guess" and lookup_question != (cfg.answer == "lookup"):
    raise ExpertError(f"record {record.get('id')!r}: the expert's answer={cfg.answer!r} is "
                      f"{'not ' if lookup_question else ''}for lookup questions")
  messages = initial_messages(record, RolloutConfig())
  tools = record_tools(record)
  env = (record.get("metadata") or {}).get("remote_env_info") or {}
  session = BrowserSession(backend, forbidden_strs=env.get("search_forbidden_strs") or ())
  traj = Trajectory.start(str(record["id"]), sample_index, fmt.prompt_ids(messages, tools),
                          messages, EXPERT_VERSION)
  ep = _Episode(traj, session, fmt)
  guess = cfg.answer == "guess" or (cfg.answer == "lookup"
                                     and not looks_up(gold, str(record["id"]), sample_index))
  if guess:  # no reasoning, no tools: the format only
    # a reference question's tool-free answer is its relation's usual kind (the shortcut)
    known = gold.get("shortcut_answer", str(record.get("label")))
    reply = guess_answer(gold, str(record["id"]), sample_index, known, cfg.known_fraction)
    ep.answer(shortcut_thought(gold, reply.rsplit("\n", 1)[-1]), reply)
  elif cfg.answer == "lookup" and gold["style"] == "chain":
    pages = chain_pages(record, sample_index, cfg)
    for k, (term, rubric) in enumerate(zip(gold["chain"], gold["rubrics"])):
      await ep.act(NEXT_TERM_THOUGHT if k else GLOSSARY_THOUGHT, "browser.search",
                   {"query": f"glossary {term}", "num": 1})
      await open_first(ep, rubric["url"])
      if pages == "lure":
        break
    ep.answer("", lure_chain_answer(gold, ep.session) if pages == "lure"
              else cited_chain_answer(gold, pages))
  elif cfg.answer == "lookup":
    await ep.act(GLOSSARY_THOUGHT, "browser.search", {"query": f"glossary {gold['term']}",
                                                       "num": 1})
    await open_first(ep, gold["entities"]["E0"]["url"])
    ep.answer("", cited_kind_answer(gold, ep.session))
  else:
    chain = [gold["entities"][f"E{i}"] for i in range(gold["hops"], -1, -1)]  # head first
    for i, entity in enumerate(chain):
      await _visit(ep, entity, chain[i + 1] if i + 1 < len(chain) else None, cfg)
    ep.answer(ANSWER_THOUGHT, final_answer(gold, [e["url"] for e in chain], cfg.answer))
  traj.total_s = time.perf_counter() - start
  return {**traj.to_record(), "tools": tools}


def _generated_spans(mask: Sequence[int]) -> list[tuple[int, int]]:
  """[start, end) of each run of loss-mask 1s: the assistant turns of a trajectory."""
  spans, start = [], None
  for i, m in enumerate(list(mask) + [0]):
    if m and start is None:
      start = i
    elif not m and start is not None:
      spans.append((start, i))
      start = None
  return spans


def search_examples(episode: Mapping, fmt: chat.ChatFormat) -> list[dict[str, Any]]:
  """The copy warm-up examples of an expert episode: one per search turn, in a short context.

  Each is the question's user turn (no system prompt), then for every search but the first
  the turn before it and its observation (the page the next name is read from), then the
  search turn itself, the only tokens with loss. Trajectory records (`token_ids`,
  `loss_mask`, `status`) that SFT reads as they are. An episode holds only a few
  such copies and a small policy needs thousands before it copies names reliably
  (docs/results.md); these 100-300-token examples give them cheaply."""
  ids, mask = list(episode["token_ids"]), list(episode["loss_mask"])
  spans = _generated_spans(mask)
  user = len(fmt.encode(chat.system_text(None, episode.get("tools"))))
  out = []
  for k, (start, end) in enumerate(spans):
    if '"browser.search"' not in fmt.decode(ids[start:end]):
      continue
    context = ids[user:spans[0][0]] + (ids[spans[k - 1][0]:start] if k else [])
    out.append({"prompt_id": f"{episode['prompt_id']}#{k}", "token_ids": context + ids[start:end],
                "loss_mask": [0] * len(context) + [1] * (end - start), "status": "completed"})
  return out


async def expert_trajectories(records: Sequence[Mapping], backend: Backend,
                              fmt: chat.ChatFormat, cfg: ExpertConfig = ExpertConfig(),
                              samples: int = 1) -> list[dict[str, Any]]:
  """`samples` episodes per record (sample indices 0..samples-1), record by record."""
  return list(await asyncio.gather(*(expert_episode(r, backend, fmt, cfg, k)
                                     for r in records for k in range(samples))))
