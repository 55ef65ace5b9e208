"""The reference our chat rendering is checked against: the real Qwen3 tokenizer's HF chat
template (tests/rollout/agent/test_episode.py, tests/lab/test_expert.py)."""
from __future__ import annotations

import json

from tests.carr_jax.test_tokenizer import qwen3_tokenizer


def hf_messages(history):
  """Judge-format (or HF) history -> HF chat messages: arguments as objects, one tool message
  per output."""
  out = []
  for m in history:
    if m["role"] == "tool" and isinstance(m["content"], list):
      out += [{"role": "tool", "content": c["output"]} for c in m["content"]]
    elif m.get("tool_calls"):
      out.append({**m, "tool_calls": [
          {"name": c["name"], "arguments": json.loads(c["arguments"]) if isinstance(
              c["arguments"], str) else c["arguments"]} for c in m["tool_calls"]]})
    else:
      out.append(m)
  return out


def template_ids(history, tools, add_generation_prompt=False):
  """The token ids the HF chat template renders `history` with `tools` to."""
  return list(qwen3_tokenizer().apply_chat_template(
      hf_messages(history), tools=tools, tokenize=True,
      add_generation_prompt=add_generation_prompt, return_dict=False))
