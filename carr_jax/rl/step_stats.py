"""Per-step statistics of rollouts, judge breakdowns and rewards, as prefixed metric dicts.

Pure host-side functions over plain records (trajectory dicts, judge `Breakdown`s and the
[P, G] arrays of `carr_jax.rl.rewards.GroupAdvantages`); the trainer writes their output to
TensorBoard (`rollout/`, `judge/`, `train/` keys) and prints a few in the step summary.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from carr_common.vocab import STATUSES, TOOL_KINDS, is_correct
from judge.rubric_graph import connected_rubrics


def _mean(values) -> float:
  values = list(values)
  return float(np.mean(values)) if values else 0.0


def turn_stats(traj: Mapping) -> dict[str, int]:
  """Assistant turns of an episode, how many were well-formed tool calls, how many ill-formed.

  A turn is ill-formed when the agent loop could not use it: unparsable, bad tool arguments
  (fed back in continue mode: `format_errors`; or the episode's last turn: status
  ill_formed), or cut off without a stop token (status truncated on an assistant message).
  """
  assistant = [m for m in traj.get("history", []) if m.get("role") == "assistant"]
  with_calls = sum(bool(m.get("tool_calls")) for m in assistant)
  errors = list(traj.get("format_errors") or [])
  bad_args = errors.count("bad_arguments")
  last = traj["history"][-1] if traj.get("history") else {}
  final_bad = traj["status"] == "ill_formed" or (
      traj["status"] == "truncated" and last.get("role") == "assistant"
      and not last.get("tool_calls"))
  if traj["status"] == "ill_formed" and traj.get("error_kind") == "bad_arguments":
    bad_args += 1
  return {"turns": len(assistant), "tool_call_turns": with_calls - bad_args,
          "ill_formed_turns": len(errors) + int(final_bad)}


def rollout_metrics(trajectories: Sequence[dict], prefix: str = "rollout/") -> dict:
  """Status rates, tool calls per episode by kind, well-formed turn rates, lengths."""
  n = max(len(trajectories), 1)
  out = {f"{prefix}{s}_rate": sum(t["status"] == s for t in trajectories) / n for s in STATUSES}
  out[f"{prefix}failed"] = float(sum(t["status"] == "failed" for t in trajectories))
  for kind in TOOL_KINDS:
    out[f"{prefix}tool_calls_{kind}"] = _mean(
        t.get("num_tool_calls", {}).get(kind, 0) for t in trajectories)
  out[f"{prefix}tool_calls"] = sum(out[f"{prefix}tool_calls_{k}"] for k in TOOL_KINDS)
  turns = [turn_stats(t) for t in trajectories]
  total = max(sum(s["turns"] for s in turns), 1)
  out[f"{prefix}turns"] = _mean(s["turns"] for s in turns)
  # carr_jax.jobs.evaluate reports the same two rates for a benchmark run.
  out[f"{prefix}well_formed_tool_call_rate"] = sum(s["tool_call_turns"] for s in turns) / total
  out[f"{prefix}well_formed_turn_rate"] = 1.0 - sum(s["ill_formed_turns"] for s in turns) / total
  ok = [t for t in trajectories if t["status"] != "failed"]
  out[f"{prefix}context_tokens"] = _mean(len(t["token_ids"]) for t in ok)
  out[f"{prefix}response_tokens"] = _mean(sum(t["loss_mask"]) for t in ok)
  out[f"{prefix}episodes"] = float(len(trajectories))
  return out


def judge_metrics(breakdowns: Sequence[Any], shortcut_threshold: float,
                  prefix: str = "judge/") -> dict:
  """Rewards, accuracy, shortcut rate, citations and judge health from `Breakdown`s."""
  outcome = np.array([b.outcome_reward for b in breakdowns], dtype=np.float64)
  rubric = np.array([b.rubric_reward for b in breakdowns], dtype=np.float64)
  correct = is_correct(outcome)
  out = {
      f"{prefix}outcome_reward_mean": _mean(outcome),
      f"{prefix}rubric_reward_mean": _mean(rubric),
      # Correct answers that the cited evidence does not back: skipped hops or guesses.
      f"{prefix}shortcut_rate": float(np.mean(rubric[correct] < shortcut_threshold))
      if correct.any() else 0.0,
      # Correct answers whose every rubric counts (on a chain, the whole chain cited).
      f"{prefix}full_chain_rate": float(np.mean(rubric[correct] >= 1.0))
      if correct.any() else 0.0,
      f"{prefix}cited_pages": _mean(len(b.cited_urls) for b in breakdowns),
      # Of the answers citing received pages (how many: answers_citing_received; 0 when none):
      # the exact answer is what those pages state.
      f"{prefix}answer_agrees_with_cited": _mean(
          b.answer_in_cited for b in breakdowns if b.answer_in_cited is not None),
      f"{prefix}answers_citing_received": float(
          sum(b.answer_in_cited is not None for b in breakdowns)),
      f"{prefix}cited_visited_pages": _mean(b.cited_visited for b in breakdowns),
      f"{prefix}rubrics_identified": _mean(_frac(b, "identified") for b in breakdowns),
      f"{prefix}rubrics_supported": _mean(_frac(b, "supported") for b in breakdowns),
      f"{prefix}rubrics_connected": _mean(_frac(b, "connected") for b in breakdowns),
      # Episodes with a supported rubric not connected to the answer E0 (a cited page about a
      # hop whose link to the answer is not cited); counted whether or not the check is on.
      f"{prefix}unconnected_rate": _mean(has_unconnected_support(b) for b in breakdowns),
      f"{prefix}errors": float(sum(bool(b.errors) for b in breakdowns)),
      f"{prefix}calls": float(sum(b.judge_calls for b in breakdowns)),
      f"{prefix}cache_hits": float(sum(b.cache_hits for b in breakdowns)),
      f"{prefix}tokens": float(sum(b.prompt_tokens + b.completion_tokens for b in breakdowns)),
  }
  return out


def has_unconnected_support(breakdown: Any) -> bool:
  """Whether a supported rubric of `breakdown` lies outside E0's component of the rubric graph."""
  rubrics = breakdown.rubrics
  supported = [r.supported for r in rubrics]
  kept = connected_rubrics([r.placeholders for r in rubrics], supported)
  return any(ok and i not in kept for i, ok in enumerate(supported))


def _frac(breakdown: Any, field: str) -> float:
  rubrics = breakdown.rubrics
  return sum(getattr(r, field) for r in rubrics) / len(rubrics) if rubrics else 0.0


def reward_metrics(groups: Any, prefix: str = "rollout/") -> dict:
  """Mixed reward and advantage statistics of a `GroupAdvantages`."""
  return {
      f"{prefix}reward_mean": float(np.mean(groups.rewards)),
      f"{prefix}reward_std": float(np.std(groups.rewards)),
      f"{prefix}accuracy": float(np.mean(is_correct(groups.outcome))),
      # pass@G: groups with at least one correct episode (RL has a signal only there).
      f"{prefix}pass_at_group": float(np.mean(np.any(is_correct(groups.outcome), axis=1))),
      f"{prefix}zero_gradient_groups": float(np.mean(groups.zero_gradient)),
      f"{prefix}advantage_abs_mean": float(np.mean(np.abs(groups.advantages))),
      f"{prefix}valid_rate": float(np.mean(groups.valid)),
  }


def render_trajectory_markdown(trajectory: dict, breakdown: Any, max_chars: int = 6000) -> str:
  """A readable summary of one episode for the TensorBoard TEXT tab."""
  lines = [f"**status** {trajectory['status']} | **outcome** {breakdown.outcome_reward} | "
           f"**rubric** {breakdown.rubric_reward:.3f} | **tools** "
           f"{trajectory.get('num_tool_calls', {})}", ""]
  for message in trajectory.get("history", []):
    role = message.get("role", "?")
    if role == "tool":
      body = "\n".join(str(c.get("output", ""))[:400] for c in message.get("content", []))
    else:
      calls = message.get("tool_calls") or []
      body = str(message.get("content", "")) + "".join(
          f"\n-> {c.get('name')}({c.get('arguments')})" for c in calls)
    lines.append(f"**{role}**\n\n```\n{body[:1500]}\n```")
  text = "\n\n".join(lines)
  return text[:max_chars]
