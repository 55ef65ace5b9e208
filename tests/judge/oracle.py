"""A scripted judge that answers like a competent LLM judge, from the example world's gold.

It reads only what the prompt shows it (the fenced blocks and the stated keys), so tests that
run the LLM backend against it check that the pipeline sends the right response, statements
and cited content, and maps the answers back correctly.
  outcome:  `## Exact Answer` of the RESPONSE block matches the reference or an E0 alias.
  identify: a placeholder is named when the gold name or an alias appears in the RESPONSE
            (E0: in its Exact Answer section, as the prompt asks).
  support:  statement R<k> is true when rubric k-1's gold evidence is in the CONTENT block and
            the statement names every placeholder by a gold name or alias (a judge rejects wrong
            names).
"""
import json

from judge.backends import normalize
from judge.records import exact_answer
from judge.testing import Reply, prompt_blocks, prompt_kind, prompt_keys


def _contains(haystack: str, needle: str) -> bool:
  return f" {normalize(needle)} " in f" {normalize(haystack)} "


def _names(gold: dict, entity_id: str) -> list[str]:
  entity = gold["entities"][entity_id]
  return [entity["name"]] + entity["aliases"]


def oracle_value(task: dict, body: dict):
  gold = task["metadata"]["gold"]
  kind, keys = prompt_kind(body), prompt_keys(body)
  blocks = prompt_blocks(body["messages"][1]["content"])
  if kind == "outcome":
    answer = exact_answer(blocks["RESPONSE"])
    accepted = [blocks["REFERENCE"]] + _names(gold, "E0")  # a judge knows common aliases
    correct = answer is not None and any(normalize(answer) == normalize(a) for a in accepted)
    return {"extracted_final_answer": answer, "reasoning": "", "correct":
            "yes" if correct else "no"}
  if kind == "identify":
    names = {}
    answer = exact_answer(blocks["RESPONSE"]) or ""
    for key in keys:  # as the prompt asks: the answer entity from the Exact Answer only
      where = answer if key == "E0" else blocks["RESPONSE"]
      names[key] = next((n for n in _names(gold, key) if _contains(where, n)), None)
    return names
  if kind == "support":
    statements = dict(line.split(": ", 1) for line in blocks["STATEMENTS"].splitlines())
    result = {}
    for key in keys:
      rubric = gold["rubrics"][int(key[1:]) - 1]
      names_ok = all(any(_contains(statements[key], n) for n in _names(gold, e))
                     for e in rubric["placeholders"])
      result[key] = names_ok and _contains(blocks["CONTENT"], rubric["evidence"])
    return result
  raise AssertionError(f"unexpected prompt kind {kind!r}")


def oracle(task: dict):
  """Script for ScriptedServer: a fenced JSON reply computed by `oracle_value`."""
  return lambda body: Reply(f"Here is my verdict.\n```json\n"
                            f"{json.dumps(oracle_value(task, body))}\n```")
