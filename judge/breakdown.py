"""The per-trajectory judge result (`Breakdown`) and its reward-server (release) view.

A Breakdown always carries a reason for each reward (`outcome_reason`, `rubric_reason`), the
per-rubric chain (identified -> supported -> connected), the citations, the judge cost of this
trajectory, and the errors/warnings met on the way. `release_response(ratio)` gives the
authors' reward-server response: `{reward, outcome_reward, rubric_reward, rubric_scores}`
with `reward = (1 - ratio) * outcome + ratio * rubric` and rubric_scores keyed by index.
"""
from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class RubricScore:
  index: int
  text: str  # the rubric with placeholders
  placeholders: list[str]
  entity_values: dict[str, str | None] = dataclasses.field(default_factory=dict)
  filled: str = ""  # the rubric with the names the response gave (empty if never identified)
  identified: bool = False  # every placeholder named in the response
  supported: bool = False  # the cited content supports the filled rubric
  connected: bool = False  # reachable from E0 through supported rubrics (counts toward reward)


@dataclasses.dataclass
class Breakdown:
  backend: str = ""
  outcome_reward: float = 0.0
  outcome_reason: str = "not judged"
  extracted_answer: str | None = None
  rubric_reward: float = 0.0
  rubric_reason: str = "not judged"
  entities: dict[str, str | None] = dataclasses.field(default_factory=dict)
  rubrics: list[RubricScore] = dataclasses.field(default_factory=list)
  cited_urls: list[str] = dataclasses.field(default_factory=list)  # first N distinct citations
  cited_visited: int = 0  # cited URLs that appear in the trajectory's tool outputs
  cited_opened: int = 0  # ... whose page the agent actually opened
  # the Exact Answer occurs (whole words) in the content of the cited pages the agent received;
  # None when the reply has no Exact Answer or cites nothing it received
  answer_in_cited: bool | None = None
  judge_calls: int = 0  # LLM completions made for this trajectory (cache hits excluded)
  cache_hits: int = 0
  reasks: int = 0
  prompt_tokens: int = 0
  completion_tokens: int = 0
  errors: list[str] = dataclasses.field(default_factory=list)  # judge-side failures
  warnings: list[str] = dataclasses.field(default_factory=list)  # odd but tolerated input

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  def release_scores(self) -> dict[str, dict[str, Any]]:
    return {str(r.index): {
        "raw_rubric": r.text,
        "filled_rubric": r.filled or r.text,
        "entity_values": r.entity_values,
        "all_entity_identified": r.identified,
        "is_supported": r.supported,
        "connected_to_answer": r.connected,
        "score": int(r.connected),
    } for r in self.rubrics}

  def release_response(self, rubric_reward_ratio: float) -> dict[str, Any]:
    reward = ((1.0 - rubric_reward_ratio) * self.outcome_reward
              + rubric_reward_ratio * self.rubric_reward)
    return {"reward": reward, "outcome_reward": self.outcome_reward,
            "rubric_reward": self.rubric_reward, "rubric_scores": self.release_scores()}
