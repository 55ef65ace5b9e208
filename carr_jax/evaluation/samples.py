"""Per-sample statistics of one evaluated trajectory: the entry of a results.jsonl line.

`sample_row` is shared by the evaluation job (carr_jax/jobs/evaluate.py) and by re-judging in
the reports (carr_jax/evaluation/report.py).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from carr_common.vocab import TOOL_KINDS
from carr_jax.rl.step_stats import turn_stats


def citation_stats(history: Sequence[Mapping], rules: Any) -> dict[str, int]:
  """Cited URLs of the final answer, with the judge's rules (`rules`, its JudgeConfig: the
  citation syntax, at most max_citations, before `## References`), and how many the agent saw
  in a tool output / opened. Computed here because the judge only collects citations when a
  record has rubrics."""
  from judge.citations import build_context, collect_pages, extract_citations
  from judge.records import cut_references, final_response
  response, _ = final_response(list(history), rules.max_response_chars)
  if not response:
    return {"cited_pages": 0, "cited_visited": 0, "cited_opened": 0}
  cited = extract_citations(cut_references(response), rules.max_citations,
                            rules.accept_plain_links)
  pages, _ = collect_pages(list(history), rules.max_tool_output_chars)
  _, used = build_context(cited, pages, rules.max_context_chars)
  return {"cited_pages": len(cited), "cited_visited": len(used),
          "cited_opened": sum(pages[url].opened for url in used)}


def sample_row(traj: Mapping, breakdown: Any, max_context_tokens: int,
               rules: Any) -> dict[str, Any]:
  """The per-sample entry of a results.jsonl line; `rules`: the judge's JudgeConfig."""
  rubrics = breakdown.rubrics
  return {
      "sample_index": traj["sample_index"], "status": traj["status"],
      "error_kind": traj.get("error_kind"), "outcome": breakdown.outcome_reward,
      "extracted_answer": breakdown.extracted_answer,
      "rubric_reward": breakdown.rubric_reward, "rubrics_total": len(rubrics),
      **{f"rubrics_{k}": sum(getattr(r, k) for r in rubrics)
         for k in ("identified", "supported", "connected")},
      **citation_stats(traj.get("history") or [], rules),
      "tool_calls": dict(traj.get("num_tool_calls") or dict.fromkeys(TOOL_KINDS, 0)),
      **turn_stats(traj),
      "context_tokens": len(traj.get("token_ids", [])),
      "context_fraction": len(traj.get("token_ids", [])) / max_context_tokens,
      "generated_tokens": int(sum(traj.get("loss_mask", []))),
      "judge_errors": len(breakdown.errors), "outcome_reason": breakdown.outcome_reason,
  }
