"""rollout/chat.py against HF apply_chat_template with the thinking template, and the parser.

Run: python -m pytest tests/rollout/test_chat.py -q
(needs the tokenizer: tests/carr_jax/test_tokenizer.py)
The judge of the rendering rules is transformers' jinja rendering of
rollout/templates/qwen3_thinking.jinja; the Python renderer and the incremental token build of
the agent loop must give the same text and the same token ids.
"""
from __future__ import annotations

import json

import pytest

from rollout import chat
from tests.carr_jax.test_tokenizer import qwen3_tokenizer

TOOLS = [
    {"name": "browser.search", "description": "Search the web.",
     "parameters": {"type": "object", "properties": {
         "query": {"type": "string"}, "num": {"type": "integer"}}, "required": ["query"]}},
    {"name": "browser.open", "description": "Open a result index or a URL.",
     "parameters": {"type": "object", "properties": {"id": {"type": ["integer", "string"]}},
                    "required": ["id"]}},
    {"name": "browser.find", "description": "Find a pattern on the open page.",
     "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}},
                    "required": ["pattern"]}},
]
SYSTEM = "You are a careful research agent. Cite what you read."
QUESTION = "Which river flows past the town where the 1887 Ümlaut Society was founded?"

# One agentic episode: each step is (reasoning, content, tool calls, tool outputs).
EPISODE = [
    ("I should search for the society first.", "",
     [{"name": "browser.search", "arguments": {"query": "Ümlaut Society 1887", "num": 5}}],
     ["[0] Title: Ümlaut Society\n[0] URL Source: https://wiki.example/umlaut\n"
      "[0] Description: Founded in 1887 in Kleinstadt."]),
    ("The first result looks right.\nLet me open it and look for the river.",
     "Opening the page.",
     [{"name": "browser.open", "arguments": {"id": 0}},
      {"name": "browser.find", "arguments": {"pattern": "river"}}],
     ["Title: Ümlaut Society\nURL Source: https://wiki.example/umlaut\nMarkdown Content:\n"
      "The society met in Kleinstadt on the Weißbach.", "[Match 1] ... on the Weißbach ..."]),
    ("Kleinstadt lies on the Weißbach.", "## Exact Answer\nWeißbach\n\n## References\n"
     "[[1](https://wiki.example/umlaut)]", [], []),
]


def episode_messages(steps=EPISODE, system=SYSTEM):
  msgs = ([{"role": "system", "content": system}] if system is not None else [])
  msgs.append({"role": "user", "content": QUESTION})
  for reasoning, content, calls, outputs in steps:
    msg = {"role": "assistant", "reasoning_content": reasoning, "content": content}
    if calls:
      msg["tool_calls"] = calls
    msgs.append(msg)
    msgs.extend({"role": "tool", "content": o} for o in outputs)
  return msgs


def hf_text(messages, tools, add_generation_prompt):
  return qwen3_tokenizer().apply_chat_template(
      messages, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt)


def hf_ids(messages, tools):
  return list(qwen3_tokenizer().apply_chat_template(
      messages, tools=tools, tokenize=True, add_generation_prompt=True, return_dict=False))


CONVERSATIONS = {
    "episode": episode_messages(),
    "no_system": episode_messages(system=None),
    "multi_query": [  # reasoning of turns before the last query is dropped
        {"role": "user", "content": "First question?"},
        {"role": "assistant", "reasoning_content": "old thought", "content": "Old answer."},
        {"role": "user", "content": "Second question?"},
        {"role": "assistant", "reasoning_content": "new thought", "content": "",
         "tool_calls": [{"name": "browser.search", "arguments": {"query": "q"}}]},
        {"role": "tool", "content": "result"},
        {"role": "assistant", "reasoning_content": "", "content": "Final."},
    ],
    "think_in_content_and_openai_calls": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "<think>\nhidden plan\n</think>\n\nLet me look.",
         "tool_calls": [{"type": "function", "function": {
             "name": "browser.open", "arguments": '{"id": "https://a.example/x"}'}}]},
        {"role": "tool", "content": "page"},
        {"role": "assistant", "content": "no reasoning at all"},
        {"role": "user", "content": "<tool_response>\nwrapped\n</tool_response>"},
    ],
}


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
@pytest.mark.parametrize("with_tools", [False, True])
def test_render_matches_hf_template_on_every_prefix(name, with_tools):
  messages = CONVERSATIONS[name]
  tools = TOOLS if with_tools else None
  for k in range(1, len(messages) + 1):
    for gen in (False, True):
      assert chat.render(messages[:k], tools, gen) == hf_text(messages[:k], tools, gen), (k, gen)


def test_multi_query_drops_earlier_reasoning_only():
  text = chat.render(CONVERSATIONS["multi_query"], TOOLS)
  assert "old thought" not in text and "new thought" in text
  # The last assistant turn keeps an (empty) think block; the earlier answer has none.
  assert "<|im_start|>assistant\nOld answer.<|im_end|>" in text
  assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\nFinal.<|im_end|>\n")


def test_incremental_agent_loop_ids_equal_full_render():
  """prompt + generated + observations, appended turn by turn == apply_chat_template ids."""
  fmt = chat.ChatFormat(qwen3_tokenizer())
  messages = episode_messages([])
  ids = fmt.prompt_ids(messages, TOOLS)
  assert ids == hf_ids(messages, TOOLS)
  assert ids[-2:] == [chat.THINK_ID, 198]  # ... <think> "\n"
  for reasoning, content, calls, outputs in EPISODE:
    generated = fmt.encode(chat.completion_text(reasoning, content, calls))
    assert generated[-1] == chat.IM_END_ID
    ids += generated
    msg = {"role": "assistant", "reasoning_content": reasoning, "content": content}
    if calls:
      msg["tool_calls"] = calls
    messages.append(msg)
    if outputs:
      ids += fmt.observation_ids(outputs, generated)
      messages.extend({"role": "tool", "content": o} for o in outputs)
      assert ids == hf_ids(messages, TOOLS)
  # The episode ends on the answer turn: the template closes it with "\n".
  full = qwen3_tokenizer().apply_chat_template(messages, tools=TOOLS, tokenize=True,
                                               return_dict=False)
  assert ids + fmt.encode("\n") == list(full)


def test_observation_after_truncated_turn_closes_it():
  fmt = chat.ChatFormat(qwen3_tokenizer())
  cut = fmt.encode("thinking without end")
  obs = fmt.observation_ids(["out"], cut)
  assert obs[:2] == [chat.IM_END_ID, 198]
  assert fmt.decode(obs).endswith("<|im_start|>assistant\n<think>\n")


def test_judge_history_tool_messages_render_like_hf_messages():
  judge_style = [
      {"role": "user", "content": QUESTION},
      {"role": "assistant", "reasoning_content": "r", "content": "",
       "tool_calls": [{"tool_call_id": "c0", "name": "browser.search",
                       "arguments": json.dumps({"query": "x"})},
                      {"tool_call_id": "c1", "name": "browser.find",
                       "arguments": json.dumps({"pattern": "y"})}]},
      {"role": "tool", "content": [{"tool_call_id": "c0", "output": "o0"},
                                   {"tool_call_id": "c1", "output": "o1"}]},
  ]
  hf_style = judge_style[:2] + [{"role": "tool", "content": "o0"},
                                {"role": "tool", "content": "o1"}]
  assert chat.render(judge_style, TOOLS, True) == hf_text(hf_style, TOOLS, True)


# ---------------------------------------------------------------------------- parsing

NAMES = chat.tool_names_of(TOOLS)


@pytest.mark.parametrize("reasoning,content,calls", [(r, c, k) for r, c, k, _ in EPISODE])
def test_parse_inverts_completion_text(reasoning, content, calls):
  text = chat.completion_text(reasoning, content, calls)
  turn = chat.parse_assistant(text, NAMES)
  assert turn.reasoning == reasoning and turn.content == content
  assert [(c.name, c.arguments) for c in turn.tool_calls] == [
      (c["name"], c["arguments"]) for c in calls]
  # The parsed turn re-renders to the same text.
  prompt = chat.render([{"role": "user", "content": "q"}], None, True)
  assert chat.render([{"role": "user", "content": "q"}, turn.to_message()]) == (
      prompt + text + "\n")


def test_parse_from_real_token_ids_decoded():
  fmt = chat.ChatFormat(qwen3_tokenizer())
  reasoning, content, calls, _ = EPISODE[1]
  ids = fmt.encode(chat.completion_text(reasoning, content, calls))
  turn = chat.parse_assistant(fmt.decode(ids), NAMES)
  assert [c.name for c in turn.tool_calls] == ["browser.open", "browser.find"]
  assert turn.tool_calls[0].arguments == {"id": 0}


def test_parse_accepts_string_arguments_and_no_tool_list():
  turn = chat.parse_assistant(
      'r\n</think>\n\n<tool_call>\n{"name": "anything", "arguments": "{\\"a\\": 1}"}\n'
      "</tool_call><|im_end|>")
  assert turn.tool_calls[0].arguments == {"a": 1} and turn.content == ""


@pytest.mark.parametrize("text,kind", [
    ("still thinking and never stops", "missing_think_end"),
    ("a</think>b</think>c", "multiple_think_end"),
    ("r</think>\n<tool_call>\n{\"name\": \"browser.search\"", "unclosed_tool_call"),
    ("r</think>\n</tool_call><tool_call>{}", "unclosed_tool_call"),
    ("r</think>\n<tool_call>\n{\"name\": \"browser.search\", arguments: {}}\n</tool_call>",
     "bad_tool_call_json"),
    ("r</think>\n<tool_call>\n[1, 2]\n</tool_call>", "tool_call_not_object"),
    ("r</think>\n<tool_call>\n{\"arguments\": {}}\n</tool_call>", "missing_tool_name"),
    ("r</think>\n<tool_call>\n{\"name\": \"browser.search\"}\n</tool_call>",
     "missing_arguments"),
    ("r</think>\n<tool_call>\n{\"name\": \"browser.open\", \"arguments\": 3}\n</tool_call>",
     "arguments_not_object"),
    ("r</think>\n<tool_call>\n{\"name\": \"browser.open\", \"arguments\": \"x\"}\n</tool_call>",
     "arguments_not_object"),
    ("r</think>\n<tool_call>\n{\"name\": \"python\", \"arguments\": {}}\n</tool_call>",
     "unknown_tool"),
])
def test_parse_errors_have_kinds(text, kind):
  with pytest.raises(chat.ChatFormatError) as err:
    chat.parse_assistant(text, NAMES)
  assert err.value.kind == kind
  assert kind in str(err.value)
