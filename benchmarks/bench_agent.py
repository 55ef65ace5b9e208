"""Agent-loop overhead: incremental token building vs re-rendering the chat template each turn.

Our loop (rollout/agent.py) appends each turn's tokens: the engine's ids as they are, then the
observation rendered and tokenized alone.  Peer, measured in the same run on the same
episodes: the common chat-loop pattern that keeps a message list and, before every turn,
re-renders the whole conversation with HF `tokenizer.apply_chat_template(...,
tokenize=True)` (same thinking template, same tools, same parser and browser sessions).
Its cost grows with the square of the episode length; deep-search episodes run to 100 calls.

The engine is scripted and precomputed (search -> open -> find, repeated, then an answer on
the world corpus), so the time measured is the loop's own: templating, tokenizing, parsing
and the tools (the tools are the same for both; their time is shown apart).  Both loops must
produce identical token ids, which is checked.

Run (about a minute on 2 CPU cores):
    .venv/bin/python benchmarks/bench_agent.py --turns 10 40 100 --episodes 3
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lab.world import build_world  # noqa: E402
from rollout import chat  # noqa: E402
from rollout.agent import RolloutConfig, run_episode  # noqa: E402
from rollout.engines.base import QWEN3_VOCAB_SIZE, Engine, GenerationResult  # noqa: E402
from rollout.tools import BrowserSession  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]


def load_tokenizer():
  from transformers import AutoTokenizer
  out = subprocess.run([sys.executable, str(REPO / "scripts" / "fetch_tokenizer.py")],
                       capture_output=True, text=True, check=True).stdout
  return AutoTokenizer.from_pretrained(out.strip().splitlines()[-1])


def script(record: dict, names: list[str], turns: int) -> list[str]:
  """Turn texts: (search, open 0, find) repeated over entity names, then the answer."""
  e0 = record["metadata"]["gold"]["entities"]["E0"]
  out = []
  for t in range(turns):
    name = names[t // 3 % len(names)]
    calls = [{"name": "browser.search", "arguments": {"query": name, "num": 5}},
             {"name": "browser.open", "arguments": {"id": 0}},
             {"name": "browser.find", "arguments": {"pattern": name.split()[0]}}][t % 3]
    out.append(chat.completion_text(f"Step {t}: look at {name}.", "", [calls]))
  out.append(chat.completion_text("Done.", f"## Exact Answer\n{e0['name']}\n\n## References\n"
                                  f"1. {e0['url']}"))
  return out


class ReplayEngine(Engine):
  """Returns precomputed ids per turn (the turn number is the last part of the rid)."""

  vocab_size = QWEN3_VOCAB_SIZE
  weight_version = "bench"

  def __init__(self, turn_ids: list[list[int]]):
    self.turn_ids = turn_ids

  async def generate(self, prompt_ids, params, rid=None, routes_from=None):
    ids = self.turn_ids[int(rid.rsplit("/", 1)[1])]
    return GenerationResult(ids, [-1.0] * len(ids), "stop", "bench", len(prompt_ids), rid)

  async def abort(self, rid):
    pass


async def peer_episode(tokenizer, backend, record, turn_ids, fmt) -> tuple[list[int], float]:
  """The re-render loop; returns (final token ids, seconds spent in tools)."""
  tools, messages = record["tools"], [dict(m) for m in record["input_messages"]]
  session = BrowserSession(backend, forbidden_strs=record["metadata"]["remote_env_info"][
      "search_forbidden_strs"])
  names, tool_s = chat.tool_names_of(tools), 0.0
  for ids in turn_ids:
    prompt = list(tokenizer.apply_chat_template(messages, tools=tools, tokenize=True,
                                                add_generation_prompt=True, return_dict=False))
    turn = chat.parse_assistant(fmt.decode(ids), names)
    messages.append(turn.to_message())
    if not turn.tool_calls:
      return prompt + ids, tool_s
    start = time.perf_counter()
    for c in turn.tool_calls:
      messages.append({"role": "tool", "content": (await session.call(c.name, c.arguments)).text})
    tool_s += time.perf_counter() - start
  raise AssertionError("the script has no answer turn")


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--turns", type=int, nargs="+", default=[10, 40, 100])
  p.add_argument("--episodes", type=int, default=3)
  args = p.parse_args()
  tokenizer = load_tokenizer()
  fmt = chat.ChatFormat(tokenizer)
  world = build_world(0, 300, max(args.episodes, 10))
  backend = world.corpus_backend()
  names = [page["title"] for page in world.corpus()]
  cfg = RolloutConfig(max_context_tokens=10**7, max_turn_tokens=10**6, max_tool_calls=10**4)
  print(f"{'turns':>5} {'tokens':>7} | {'ours s/ep':>9} {'(tools)':>8} | {'peer s/ep':>9} "
        f"{'(tools)':>8} | {'loop overhead peer/ours':>23}")
  for turns in args.turns:
    ours = peer = ours_tools = peer_tools = 0.0
    tokens = 0
    for k in range(args.episodes):
      record = world.train[k]
      turn_ids = [fmt.encode(text) for text in script(record, names[k:] + names[:k], turns)]
      start = time.perf_counter()
      traj = asyncio.run(run_episode(ReplayEngine(turn_ids), fmt, backend, record, 0, cfg))
      ours += time.perf_counter() - start
      ours_tools += traj["timings"]["tool_s"]
      start = time.perf_counter()
      peer_ids, tool_s = asyncio.run(peer_episode(tokenizer, backend, record, turn_ids, fmt))
      peer += time.perf_counter() - start
      peer_tools += tool_s
      assert traj["status"] == "completed", traj["error"]
      assert peer_ids == traj["token_ids"], "the two loops built different token ids"
      tokens += len(peer_ids)
    n = args.episodes
    ratio = (peer - peer_tools) / max(ours - ours_tools, 1e-9)
    print(f"{turns:>5} {tokens // n:>7} | {ours / n:>9.3f} {ours_tools / n:>8.3f} | "
          f"{peer / n:>9.3f} {peer_tools / n:>8.3f} | {ratio:>22.1f}x")
  print(json.dumps({"note": "token ids identical between the two loops on every episode"}))


if __name__ == "__main__":
  main()
