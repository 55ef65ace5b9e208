"""The CaRR judge: outcome reward and citation-aware rubric reward for one trajectory.

  judge = Judge(JudgeConfig(...))                 # or JudgeConfig(backend="gold")
  breakdown = await judge.score(trajectory, task)  # design.md records; never raises
  breakdowns = await judge.score_batch([(trajectory, task), ...])
  breakdown = judge.score_sync(trajectory, task)   # outside an event loop
  judge.metrics()                                  # calls, tokens, cache hits, errors, ...
  judge.in_flight_peaks()                          # most trajectories / LLM calls at once

Steps (paper section 2.2; differences from the release: docs/judge-vs-release.md); only the
final response before its last `## References` heading is judged:
  outcome  backend.grade_outcome -> 1 or 0.
  rubric   citations: first `max_citations` distinct cited URLs, content the agent received
           for them (judge/citations.py); no usable citation -> 0 without any LLM call (the
           release identifies entities first; the reward is 0 either way);
           identification: backend names each placeholder; a rubric is identified when all
           of its placeholders are named; the answer entity E0 counts only when its name
           agrees with the `## Exact Answer` section (`answer_agrees`), so an explanation
           that names E0 beside a contradicting answer earns nothing, whatever the backend;
           support: backend judges the identified rubrics, names filled in, against the
           cited content;
           connectivity: supported rubrics reachable from E0 (judge/rubric_graph.py);
           `require_connected=False` (an ablation, not the paper) skips it;
           reward = connected / all rubrics.
The outcome and identification calls run concurrently. Nothing raises: a failure of the
judging itself (transport, unusable judge output after re-asks, an unexpected bug) ends as
reward 0 with a reason and an entry in `Breakdown.errors` and counts in the metrics'
`step_errors`; an input that cannot be judged (a malformed record, an unfinished task, no
final answer) scores 0 with only the reason (`outcome_reason`, `rubric_reason`). A trajectory
whose judging outlasts `deadline_s` scores 0 on both rewards with reason "deadline: ...".
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Iterable

from carr_common.in_flight import InFlight
from judge.backends import Backend, GoldBackend, LLMBackend, contains, normalize
from judge.breakdown import Breakdown, RubricScore
from judge.cache import JudgeCache
from judge.citations import build_context, collect_pages, extract_citations
from judge.config import JudgeConfig
from judge.llm import ChatClient, Metrics, StepError, Usage
from judge.records import (JudgeInput, RequestError, cut_references, exact_answer,
                           exact_answer_sections, final_response, input_from_records,
                           parse_request)
from judge.rubric_graph import connected_rubrics, entity_ids, fill, placeholders

logger = logging.getLogger(__name__)


def answer_agrees(name: str, answer: str | None) -> bool:
  """Whether an identified E0 name and the Exact Answer name the same thing: one holds the
  other as whole words, normalized ("the Louvre" / "Louvre Museum, Paris" do not; "Louvre" /
  "the Louvre" do)."""
  if not answer:
    return False
  name_norm, answer_norm = normalize(name), normalize(answer)
  return bool(name_norm) and (contains(answer_norm, name) or contains(name_norm, answer))


class Judge:

  def __init__(self, config: JudgeConfig | None = None, backend: Backend | None = None):
    self.config = config or JudgeConfig()
    self._metrics = Metrics()
    self.cache = JudgeCache(self.config.cache_path) if self.config.use_cache else None
    self.client: ChatClient | None = None
    if backend is None and self.config.backend == "gold":
      backend = GoldBackend()
    if backend is None:
      self.client = ChatClient(self.config, self._metrics, self.cache)
      backend = LLMBackend(self.client)
    self.backend = backend
    self.trajectories_in_flight = InFlight()  # judged at once (any backend)

  async def score(self, trajectory: Any, task: Any, *, outcome: bool = True,
                  rubric: bool = True) -> Breakdown:
    """Scores a trajectory record against its CaRR record (docs/design.md sections 2-3)."""
    return await self.score_input(input_from_records(trajectory, task), outcome=outcome,
                                  rubric=rubric)

  async def score_request(self, request: Any) -> Breakdown:
    """Scores a reward-server request; like the release, the outcome is judged only when
    rubric_reward_ratio < 1 and the rubrics only when it is > 0."""
    try:
      inp = parse_request(request, max_rubrics=self.config.max_rubrics,
                          max_history=self.config.max_history_messages)
    except RequestError as e:
      inp = JudgeInput(question="", label="", rubrics=[], history=[], error=f"bad input: {e}")
      return await self.score_input(inp)
    ratio = inp.rubric_reward_ratio
    return await self.score_input(inp, outcome=ratio < 1, rubric=ratio > 0)

  async def score_batch(self, items: Iterable[tuple[Any, Any]]) -> list[Breakdown]:
    """Scores (trajectory, task) pairs concurrently; judge calls stay within `concurrency`."""
    return list(await asyncio.gather(*(self.score(t, task) for t, task in items)))

  def score_sync(self, trajectory: Any, task: Any) -> Breakdown:
    """Blocking `score` for code without an event loop."""

    async def run() -> Breakdown:
      try:
        return await self.score(trajectory, task)
      finally:
        await self.aclose()

    return asyncio.run(run())

  def metrics(self) -> dict[str, float]:
    return self._metrics.as_dict()

  def in_flight_peaks(self) -> dict[str, float]:
    """The most trajectories judged at once, and LLM calls in flight at once (0 without an
    LLM backend), since the last reading."""
    calls = self.client.calls_in_flight.take_peak() if self.client is not None else 0
    return {"judge/trajectories_in_flight_peak": float(self.trajectories_in_flight.take_peak()),
            "judge/calls_in_flight_peak": float(calls)}

  async def aclose(self) -> None:
    if self.client is not None:
      await self.client.aclose()

  async def score_input(self, inp: JudgeInput, *, outcome: bool = True,
                        rubric: bool = True) -> Breakdown:
    self._metrics.trajectories += 1
    breakdown = Breakdown(backend=self.backend.name)
    usage = Usage()
    try:
      with self.trajectories_in_flight:
        async with asyncio.timeout(self.config.deadline_s):
          await self._score(inp, outcome, rubric, breakdown, usage)
    except TimeoutError:
      self._past_deadline(breakdown)
    except Exception as e:  # last resort: a judge bug must not kill a training step
      logger.exception("judge failed on a trajectory")
      self._fail(breakdown, "outcome", f"internal judge error: {type(e).__name__}: {e}")
      self._fail(breakdown, "rubric", f"internal judge error: {type(e).__name__}: {e}")
    breakdown.judge_calls, breakdown.cache_hits = usage.calls, usage.cache_hits
    breakdown.prompt_tokens, breakdown.completion_tokens = (usage.prompt_tokens,
                                                            usage.completion_tokens)
    breakdown.reasks = usage.reasks
    return breakdown

  def _past_deadline(self, breakdown: Breakdown) -> None:
    """Zero on both rewards, whatever was judged before the deadline."""
    self._metrics.deadlines += 1
    reason = f"deadline: judging took more than {self.config.deadline_s:g} s"
    for which in ("outcome", "rubric"):
      self._fail(breakdown, which, reason)
    for score in breakdown.rubrics:
      score.connected = False

  def _fail(self, breakdown: Breakdown, which: str, reason: str) -> None:
    setattr(breakdown, f"{which}_reward", 0.0)
    setattr(breakdown, f"{which}_reason", reason)
    breakdown.errors.append(f"{which}: {reason}")
    self._metrics.step_errors += 1

  async def _guard(self, step: Awaitable[None], which: str, breakdown: Breakdown) -> None:
    try:
      await step
    except StepError as e:
      self._fail(breakdown, which, e.reason)
    except Exception as e:
      logger.exception("judge %s step failed", which)
      self._fail(breakdown, which, f"internal judge error: {type(e).__name__}: {e}")

  async def _score(self, inp: JudgeInput, outcome: bool, rubric: bool, breakdown: Breakdown,
                   usage: Usage) -> None:
    reason = inp.error or ("task unfinished" if inp.unfinished else None)
    response = None
    if reason is None:
      response, reason = final_response(inp.history, self.config.max_response_chars)
    if response is not None:
      if len(response) >= self.config.max_response_chars:
        breakdown.warnings.append(f"final answer cut to {self.config.max_response_chars} chars")
      response = cut_references(response)
      reason = "" if response else "nothing before the References heading"
      if exact_answer_sections(response) > 1:
        reason = "more than one Exact Answer section: no single answer"
    if reason:
      breakdown.outcome_reason = breakdown.rubric_reason = reason
      return
    steps = []
    if outcome:
      steps.append(self._guard(self._outcome(inp, response, breakdown, usage), "outcome",
                               breakdown))
    else:
      breakdown.outcome_reason = "not requested (rubric_reward_ratio = 1)"
    if rubric:
      steps.append(self._guard(self._rubric(inp, response, breakdown, usage), "rubric",
                               breakdown))
    else:
      breakdown.rubric_reason = "not requested (rubric_reward_ratio = 0)"
    await asyncio.gather(*steps)

  async def _outcome(self, inp: JudgeInput, response: str, breakdown: Breakdown,
                     usage: Usage) -> None:
    extracted, correct = await self.backend.grade_outcome(inp, response, usage)
    breakdown.extracted_answer = extracted
    breakdown.outcome_reward = 1.0 if correct else 0.0
    if extracted is None:
      breakdown.outcome_reason = "no final answer found in the response"
    else:
      breakdown.outcome_reason = ("answer matches the label" if correct
                                  else "answer does not match the label")

  async def _rubric(self, inp: JudgeInput, response: str, breakdown: Breakdown,
                    usage: Usage) -> None:
    if not inp.rubrics:
      breakdown.rubric_reason = "no rubrics for this question"
      return
    ids_per_rubric = [placeholders(r) for r in inp.rubrics]
    breakdown.rubrics = [RubricScore(i, r, ids)
                         for i, (r, ids) in enumerate(zip(inp.rubrics, ids_per_rubric))]
    breakdown.warnings += [f"rubric {i} has no placeholder and can never count"
                           for i, ids in enumerate(ids_per_rubric) if not ids]
    cited = extract_citations(response, self.config.max_citations,
                              self.config.accept_plain_links)
    pages, skipped = collect_pages(inp.history, self.config.max_tool_output_chars)
    breakdown.warnings += skipped
    context, used = build_context(cited, pages, self.config.max_context_chars)
    breakdown.cited_urls, breakdown.cited_visited = cited, len(used)
    breakdown.cited_opened = sum(pages[url].opened for url in used)
    answer = exact_answer(response)
    if answer and used:
      breakdown.answer_in_cited = contains(normalize(context), answer)
    ids = entity_ids(inp.rubrics)
    if "E0" not in ids:
      breakdown.rubric_reason = "no rubric mentions <E0>: nothing can connect to the answer"
    elif not cited:
      breakdown.rubric_reason = "the response cites no URL in the accepted form [[n](url)]"
    elif not used:
      breakdown.rubric_reason = (f"none of the {len(cited)} cited URLs appears in the "
                                 "trajectory's tool outputs")
    else:
      await self._judge_rubrics(inp, response, ids, context, breakdown, usage)

  async def _judge_rubrics(self, inp: JudgeInput, response: str, ids: list[str], context: str,
                           breakdown: Breakdown, usage: Usage) -> None:
    names = await self.backend.identify_entities(inp, response, ids, usage)
    if names.get("E0") is not None and not answer_agrees(names["E0"], exact_answer(response)):
      breakdown.warnings.append("the name identified for <E0> is not the Exact Answer's: "
                                "the answer entity is what the reply answers, so none counts")
      names = {**names, "E0": None}
    breakdown.entities = names
    statements: dict[str, str] = {}
    for score in breakdown.rubrics:
      score.entity_values = {e: names.get(e) for e in score.placeholders}
      filled, all_named = fill(score.text, names)
      score.identified = bool(score.placeholders) and all_named
      if score.identified:
        score.filled = filled
        statements[f"R{score.index + 1}"] = filled
    if not statements:
      breakdown.rubric_reason = "no rubric has all of its entities named in the response"
      return
    support = await self.backend.judge_support(inp, statements, context, usage)
    for key, ok in support.items():
      breakdown.rubrics[int(key[1:]) - 1].supported = ok
    supported = [r.supported for r in breakdown.rubrics]
    connected = (connected_rubrics([r.placeholders for r in breakdown.rubrics], supported)
                 if self.config.require_connected
                 else {i for i, ok in enumerate(supported) if ok})
    for index in connected:
      breakdown.rubrics[index].connected = True
    total = len(breakdown.rubrics)
    breakdown.rubric_reward = len(connected) / total
    breakdown.rubric_reason = (
        f"{len(connected)} of {total} rubrics count: {len(statements)} identified, "
        f"{sum(support.values())} supported by cited content, {len(connected)} connected "
        "to <E0>")
