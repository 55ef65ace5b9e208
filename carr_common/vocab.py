"""The words of the trajectory record (docs/design.md section 2) that more than one room uses.

The rollout writes each episode's `status` and counts its tool calls by kind under names the
model calls; the judge reads those names back out of the history and grades the answer with an
outcome reward; the trainer and the evaluation count statuses, tool kinds and right answers.
Each of these words is spelt here once, so a room cannot drift to a spelling the others never
count. Standard library only; `is_correct` works on a float and on a NumPy array alike.
"""
from __future__ import annotations

# How an episode ended (rollout/agent.py says when each is set); only "completed" earns reward.
STATUSES = ("completed", "truncated", "ill_formed", "tool_limit", "failed")

# Browser tools: the name the model calls and the kind its calls are counted under
# (`num_tool_calls` keys).
TOOL_KINDS = ("search", "open", "find")
SEARCH, OPEN, FIND = "browser.search", "browser.open", "browser.find"
TOOL_NAMES = (SEARCH, OPEN, FIND)
KIND_OF_TOOL = dict(zip(TOOL_NAMES, TOOL_KINDS))  # "browser.open" -> "open"

# The judge grades an answer 1.0 (right) or 0.0 (wrong); halfway separates the two without
# relying on exact float equality.
CORRECT_THRESHOLD = 0.5


def is_correct(outcome):
  """Whether an outcome reward means a right answer: a bool for a float, elementwise for an
  array."""
  return outcome > CORRECT_THRESHOLD
