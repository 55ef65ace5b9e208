"""Judge backends: the three judgments behind one interface.

  grade_outcome(inp, response, usage)            -> (extracted answer | None, correct)
  identify_entities(inp, response, ids, usage)   -> {placeholder id: name | None}
  judge_support(inp, statements, context, usage) -> {statement key: supported}

`statements` maps keys `R<i+1>` (i = rubric index) to the rubric text with names filled in.
Failures raise `StepError(reason)`. Everything else (citation extraction, content collection,
filling, connectivity, reward arithmetic) is shared code in judge/pipeline.py, so both
backends are scored by the same pipeline.

* `LLMBackend`: any OpenAI-compatible chat endpoint, prompts from judge/prompts.py.
* `GoldBackend`: SYNTHETIC WORLD ONLY. Deterministic, no LLM: reads the gold annotations of
  the synthetic world (`metadata.gold`, docs/design.md section 3). An entity is named when the
  response states its gold name or an alias (normalized, case-insensitive, whole words); the
  answer entity E0 only when the `## Exact Answer` section is that name, read as the outcome
  judge reads it (so an explanation naming E0 beside a contradicting answer names nothing); a
  rubric is supported when its gold `evidence` sentence appears in the cited content (its
  placeholders were already identified, or it would not be asked); the outcome is a
  normalized exact match of the `## Exact Answer` section against the label, E0's name and
  E0's aliases. It cannot judge real-world data and refuses records without gold.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Protocol

from judge import parsing, prompts
from judge.llm import ChatClient, StepError, Usage
from judge.records import JudgeInput, exact_answer


class Backend(Protocol):
  name: str

  async def grade_outcome(self, inp: JudgeInput, response: str,
                          usage: Usage) -> tuple[str | None, bool]:
    ...

  async def identify_entities(self, inp: JudgeInput, response: str, ids: list[str],
                              usage: Usage) -> dict[str, str | None]:
    ...

  async def judge_support(self, inp: JudgeInput, statements: dict[str, str], context: str,
                          usage: Usage) -> dict[str, bool]:
    ...


class LLMBackend:
  """Judgments by an LLM behind an OpenAI-compatible endpoint."""

  def __init__(self, client: ChatClient):
    self.client = client
    self.name = f"llm:{client.config.model}"

  async def grade_outcome(self, inp, response, usage):
    messages = prompts.outcome_messages(inp.question, inp.label, response)
    return await self.client.ask(messages, parsing.parse_outcome, usage)

  async def identify_entities(self, inp, response, ids, usage):
    messages = prompts.identify_messages(inp.question, inp.rubrics, ids, response)
    return await self.client.ask(messages, lambda t: parsing.parse_entity_names(t, ids), usage)

  async def judge_support(self, inp, statements, context, usage):
    keys = list(statements)
    messages = prompts.support_messages(statements, context)
    return await self.client.ask(messages, lambda t: parsing.parse_support(t, keys), usage)


def normalize(text: str) -> str:
  """Casefolded words without accents or punctuation, single-spaced."""
  text = unicodedata.normalize("NFKD", text)
  text = "".join(c for c in text if not unicodedata.combining(c)).casefold()
  return " ".join(re.findall(r"\w+", text))


def contains(haystack_norm: str, needle: str) -> bool:
  """Whether `needle`, normalized, occurs as whole words in the normalized `haystack_norm`."""
  needle_norm = normalize(needle)
  return bool(needle_norm) and f" {needle_norm} " in f" {haystack_norm} "


def _strip_article(text: str) -> str:
  return re.sub(r"^(the|a|an) ", "", text)


def named_by_answer(answer: str | None, names: list[str]) -> str | None:
  """The first of `names` that the Exact Answer text `answer` states exactly (normalized, a
  leading article dropped), or None: how the gold backend reads an answer."""
  target = _strip_article(normalize(answer or ""))
  return next((n for n in names if target and normalize(n)
               and _strip_article(normalize(n)) == target), None)


class GoldBackend:
  """SYNTHETIC WORLD ONLY: deterministic judgments from `metadata.gold` (see module doc)."""

  name = "gold (synthetic world only)"

  @staticmethod
  def _gold(inp: JudgeInput) -> dict:
    gold = inp.gold
    if not isinstance(gold, dict) or not isinstance(gold.get("entities"), dict):
      raise StepError("no metadata.gold.entities: the gold backend only scores synthetic-world "
                      "records")
    return gold

  @staticmethod
  def _names(entity: object) -> list[str]:
    if not isinstance(entity, dict):
      return []
    names = [entity.get("name")]
    aliases = entity.get("aliases")
    names += aliases if isinstance(aliases, list) else []
    return [n for n in names if isinstance(n, str) and normalize(n)]

  async def grade_outcome(self, inp, response, usage):
    gold = self._gold(inp)
    extracted = exact_answer(response)
    if extracted is None:
      return None, False
    accepted = [inp.label] + self._names(gold["entities"].get("E0"))
    return extracted, named_by_answer(extracted, accepted) is not None

  async def identify_entities(self, inp, response, ids, usage):
    entities = self._gold(inp)["entities"]
    response_norm = normalize(response)
    answer = exact_answer(response)
    names: dict[str, str | None] = {}
    for entity_id in ids:
      candidates = self._names(entities.get(entity_id))
      if entity_id == "E0":  # the answer: read off the Exact Answer, as grade_outcome does
        names[entity_id] = named_by_answer(answer, candidates)
      else:
        names[entity_id] = next((n for n in candidates if contains(response_norm, n)), None)
    return names

  async def judge_support(self, inp, statements, context, usage):
    rubrics = self._gold(inp).get("rubrics")
    if not isinstance(rubrics, list) or len(rubrics) != len(inp.rubrics):
      raise StepError("metadata.gold.rubrics must list one entry per rubric")
    context_norm = normalize(context)
    supported: dict[str, bool] = {}
    for key in statements:
      gold_rubric = rubrics[int(key[1:]) - 1]
      evidence = gold_rubric.get("evidence") if isinstance(gold_rubric, dict) else None
      supported[key] = isinstance(evidence, str) and contains(context_norm, evidence)
    return supported
