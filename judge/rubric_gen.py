"""Rubric initialization: a question file -> CaRR records with hidden entities and rubrics.

  python scripts/generate_rubrics.py --input questions.jsonl --output carr.jsonl \\
      --base-url https://api.deepseek.com --model deepseek-chat \\
      --api-key-env DEEPSEEK_API_KEY --cache-path rubric_cache.sqlite

Input: JSONL, one question a line: `{id?, question, answer}` (DeepDive) or a CaRR-like
`{id?, input_messages, label}`. Output: one CaRR record a line (docs/design.md section 3)
with `metadata.remote_env_info.rubrics` and, as an addition, `metadata.hidden_entities`
(placeholder id -> short description). The LLM's reply must pass validation (every rubric
has a placeholder, `<E0>` appears, ids are contiguous E0..En and match the declared
entities) or it is re-asked `max_reasks` times; a question that still fails is listed in
`<output>.errors.jsonl` and retried on the next run. Resuming: ids already in the output are
skipped, a torn last line (interrupted write) is dropped, and the judge cache (sqlite at
`--cache-path`) replays replies already paid for.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
from typing import Any

from judge import parsing, prompts
from judge.cache import JudgeCache
from judge.config import JudgeConfig, add_config_arguments, config_from_args, setup_logging
from judge.llm import ChatClient, Metrics, StepError
from judge.rubric_graph import rubric_set_problems

ANSWER_FORMAT = (
    "\n\nWrite your final reply in exactly three sections:\n\n"
    "## Explanation with Citations\n{how you reached the answer; after every claim, cite the "
    "page it comes from as [[n](url)]}\n\n"
    "## Exact Answer\n{only the final answer, as short as possible}\n\n"
    "## References\n{the cited pages, numbered as in your citations}")
TOOLS = [
    {"name": "browser.search", "description": "Search the web.",
     "parameters": {"type": "object", "required": ["query"], "properties": {
         "query": {"type": "string", "description": "search query"},
         "num": {"type": "integer", "description": "number of results", "default": 10}}}},
    {"name": "browser.open", "description": "Open a search result by index or a URL.",
     "parameters": {"type": "object", "required": ["id"], "properties": {
         "id": {"type": ["integer", "string"], "description": "result index or URL"}}}},
    {"name": "browser.find", "description": "Find a pattern in the open page.",
     "parameters": {"type": "object", "required": ["pattern"], "properties": {
         "pattern": {"type": "string", "description": "text to look for"}}}},
]


def parse_generation(text: Any) -> tuple[dict[str, str], list[str]]:
  """(entities, rubrics) from a generation reply; OutputError lists every problem."""
  value = parsing.json_block(text)
  if not isinstance(value, dict) or set(value) != {"entities", "rubrics"}:
    raise parsing.OutputError('expected an object with exactly "entities" and "rubrics"')
  entities, rubrics = value["entities"], value["rubrics"]
  if not isinstance(entities, dict) or not all(isinstance(v, str) for v in entities.values()):
    raise parsing.OutputError('"entities" must map placeholder ids to descriptions')
  if not isinstance(rubrics, list) or not all(isinstance(r, str) and r.strip()
                                              for r in rubrics):
    raise parsing.OutputError('"rubrics" must be a list of non-empty strings')
  rubrics = [" ".join(r.split()) for r in rubrics]
  problems = rubric_set_problems(rubrics, list(entities))
  if problems:
    raise parsing.OutputError("; ".join(problems))
  return entities, rubrics


def _question(item: Any, line_no: int) -> dict[str, str]:
  if not isinstance(item, dict):
    raise ValueError("not a JSON object")
  question, messages = item.get("question"), item.get("input_messages")
  if question is None and isinstance(messages, list) and messages and isinstance(messages[0],
                                                                                 dict):
    question = messages[0].get("content")
  answer = item.get("answer", item.get("label"))
  if not isinstance(question, str) or not question.strip():
    raise ValueError("question: missing or not a string")
  if not isinstance(answer, (str, int, float)) or not str(answer).strip():
    raise ValueError("answer: missing or not a string")
  return {"id": str(item.get("id", f"q{line_no}")), "question": question.strip(),
          "answer": str(answer).strip(), "source": str(item.get("source", "generated"))}


def read_questions(path: str) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
  questions, errors = [], []
  with open(path, encoding="utf-8", errors="replace") as f:
    for line_no, line in enumerate(f):
      if line.strip():
        try:
          questions.append(_question(json.loads(line), line_no))
        except ValueError as e:
          errors.append({"line": line_no, "reason": str(e)})
  return questions, errors


def completed_ids(out_path: str) -> set[str]:
  """Ids already written; rewrites the file without a torn (unparsable) line."""
  if not os.path.exists(out_path):
    return set()
  good, torn = [], False
  with open(out_path, encoding="utf-8", errors="replace") as f:
    for line in f:
      try:
        good.append((json.loads(line)["id"], line if line.endswith("\n") else line + "\n"))
      except (ValueError, KeyError, TypeError):
        torn = True
  if torn:
    with open(out_path, "w", encoding="utf-8") as f:
      f.writelines(line for _, line in good)
  return {record_id for record_id, _ in good}


def make_record(item: dict[str, str], entities: dict[str, str],
                rubrics: list[str]) -> dict[str, Any]:
  return {"id": item["id"], "source": item["source"],
          "input_messages": [{"role": "user", "content": item["question"] + ANSWER_FORMAT}],
          "label": item["answer"], "tools": TOOLS,
          "metadata": {"remote_env_info": {"search_forbidden_strs": [item["question"]],
                                           "rubrics": rubrics},
                       "hidden_entities": entities}}


async def generate_file(in_path: str, out_path: str, config: JudgeConfig) -> dict[str, Any]:
  """Generates the missing records of `in_path` into `out_path`; returns a summary."""
  questions, bad_lines = read_questions(in_path)
  done = completed_ids(out_path)
  pending = [q for q in questions if q["id"] not in done]
  cache = JudgeCache(config.cache_path) if config.use_cache else None
  client = ChatClient(config, Metrics(), cache)
  failures: list[dict[str, Any]] = [{"id": None, **e} for e in bad_lines]
  write_lock = asyncio.Lock()

  async def one(item: dict[str, str], out) -> None:
    messages = prompts.rubric_generation_messages(item["question"], item["answer"])
    try:
      entities, rubrics = await client.ask(messages, parse_generation)
    except StepError as e:
      failures.append({"id": item["id"], "reason": e.reason})
      return
    async with write_lock:
      out.write(json.dumps(make_record(item, entities, rubrics), ensure_ascii=False) + "\n")
      out.flush()

  try:
    with open(out_path, "a", encoding="utf-8") as out:
      await asyncio.gather(*(one(item, out) for item in pending))
  finally:
    await client.aclose()
    if cache is not None:
      cache.close()
  with open(out_path + ".errors.jsonl", "w", encoding="utf-8") as f:
    f.writelines(json.dumps(e, ensure_ascii=False) + "\n" for e in failures)
  return {"questions": len(questions), "already_done": len(questions) - len(pending),
          "written": len(pending) - sum(1 for e in failures if e["id"] is not None),
          "failed": len(failures), "metrics": client.metrics.as_dict()}


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python scripts/generate_rubrics.py",
                              description="Generate CaRR hidden entities and rubrics.")
  p.add_argument("--input", required=True, help="question JSONL")
  p.add_argument("--output", required=True, help="CaRR record JSONL (appended, resumed)")
  add_config_arguments(p)
  return p


def main(argv: list[str] | None = None) -> dict[str, Any]:
  p = parser()
  args = p.parse_args(argv)
  setup_logging(args.verbose)
  summary = asyncio.run(generate_file(args.input, args.output, config_from_args(args, p)))
  print(json.dumps(summary, indent=2))
  return summary


if __name__ == "__main__":
  main()
