"""Judge throughput: both LLM transports at the default concurrency vs sequential judging.

  python benchmarks/bench_judge.py               # 256 trajectories, 200 ms per judge call
  python benchmarks/bench_judge.py --trajectories 32 --delay 0.05   # quick look
  python benchmarks/bench_judge.py --concurrency 128                 # another setting

A scripted OpenAI-compatible server (judge/testing.py, canned valid replies) runs in its own
process on 127.0.0.1 and sleeps `--delay` seconds per call. Each trajectory costs 3 judge
calls (outcome, entity identification, support). Measured in one run, `--rounds` times in
turn for each transport (openai: the judge's ChatClient on the openai SDK; httpx: the former
raw-httpx transport, benchmarks/judge_httpx_client.py):
  concurrent  the judge with the default concurrency, the whole batch at once;
  re-run      the same batch again on the same judge: every judgment comes from the cache;
then once the peer, sequential: one judge call at a time (concurrency=1, trajectories one by
one, no cache, openai transport), what a plain loop over a blocking client does.
Prints the load average, wall and judge-process CPU times, the sequential/concurrent ratios
(target >= 50x) and the calls saved.
"""
import argparse
import asyncio
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks.common import scripted_judge  # noqa: E402
from benchmarks.judge_httpx_client import HttpxChatClient  # noqa: E402
from judge import Judge, JudgeConfig  # noqa: E402
from judge import example_world as ew  # noqa: E402
from judge.backends import LLMBackend  # noqa: E402
from judge.cache import JudgeCache  # noqa: E402
from judge.llm import ChatClient  # noqa: E402

TRANSPORTS = {"openai": ChatClient, "httpx": HttpxChatClient}


def trajectory(i: int) -> dict:
  """A full-reward trajectory whose three judge prompts are unique to sample i."""
  builder = ew.TrajectoryBuilder()
  for entity in ("E0", "E1", "E2"):
    url = ew.URLS[entity]
    builder.open(url, content=f"{ew.PAGES[url][1]} (page copy {i})")
  return builder.answer(ew.good_answer(extra=f"(sample {i})"))


async def timed_batch(judge: Judge, items) -> tuple[float, float, list]:
  """(wall seconds, CPU seconds of this process, breakdowns)."""
  start, cpu = time.perf_counter(), time.process_time()
  results = await judge.score_batch(items)
  return time.perf_counter() - start, time.process_time() - cpu, results


async def timed_sequential(judge: Judge, items) -> float:
  start = time.perf_counter()
  for trajectory, task in items:
    await judge.score(trajectory, task)
  return time.perf_counter() - start


def check(results, expected_calls: int) -> None:
  assert all(r.outcome_reward == 1.0 and r.rubric_reward == 1.0 and not r.errors
             for r in results), "canned judge should give full rewards"
  assert sum(r.judge_calls + r.cache_hits for r in results) == expected_calls


async def measure(transport: str, config: JudgeConfig, items, warm) -> dict:
  """One transport: a warm-up batch, the measured batch, then the cache re-run."""
  client = TRANSPORTS[transport](config, cache=JudgeCache())
  judge = Judge(config, backend=LLMBackend(client))
  try:
    await judge.score_batch(warm)  # opens the connections; not measured, not reused below
    wall, cpu, results = await timed_batch(judge, items)
    check(results, 3 * len(items))
    rerun, _, again = await timed_batch(judge, items)
    check(again, 3 * len(items))
  finally:
    await client.aclose()
  return {"transport": transport, "wall": wall, "cpu": cpu, "rerun": rerun,
          "calls": sum(r.judge_calls for r in results),
          "rerun_calls": sum(r.judge_calls for r in again),
          "hits": sum(r.cache_hits for r in again)}


def row_line(row: dict, sequential: float | None) -> str:
  speedup = f"speed-up {sequential / row['wall']:6.1f}x  " if sequential else ""
  return (f"{row['transport']:<7} concurrent {row['wall']:7.2f} s  judge CPU {row['cpu']:.2f} s "
          f"({1000 * row['cpu'] / max(row['calls'], 1):.2f} ms per call)  {speedup}"
          f"re-run {row['rerun']:.2f} s ({row['rerun_calls']} calls, {row['hits']} cache hits)")


async def run(args) -> None:
  load = os.getloadavg()
  print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
  process, base_url = scripted_judge(["--delay", str(args.delay)])
  try:
    task = ew.example_task()
    items = [(trajectory(i), task) for i in range(args.trajectories)]
    base = JudgeConfig(base_url=base_url, model="scripted", api_key_env="",
                       concurrency=args.concurrency)
    print(f"{len(items)} trajectories x 3 judge calls, {args.delay * 1000:.0f} ms per call, "
          f"concurrency {base.concurrency}", flush=True)
    rows = []
    for _ in range(args.rounds):
      for transport in TRANSPORTS:
        warm = [(trajectory(-1 - i - 1000 * len(rows)), task) for i in range(64)]
        rows.append(await measure(transport, base, items, warm))
        print(row_line(rows[-1], None), flush=True)
    sequential_judge = Judge(base.replace(concurrency=1, use_cache=False))
    sequential = await timed_sequential(sequential_judge, items)
    await sequential_judge.aclose()
  finally:
    process.terminate()
    process.wait()
  print(f"sequential (peer, concurrency=1, openai): {sequential:8.2f} s; speed-ups "
        f"(target >= 50x):")
  for row in rows:
    print(row_line(row, sequential))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--trajectories", type=int, default=256, help="batch size")
  parser.add_argument("--delay", type=float, default=0.2, help="seconds per judge call")
  parser.add_argument("--concurrency", type=int, default=JudgeConfig.concurrency,
                      help="concurrent run's judge concurrency (default: JudgeConfig's)")
  parser.add_argument("--rounds", type=int, default=2,
                      help="concurrent measurements per transport, taken in turn")
  asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
  main()
