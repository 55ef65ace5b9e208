"""Rollouts ahead of the trainer, with bounded staleness: `rollout.max_staleness` (k).

Step s of a run trains the policy from weight version s to s + 1 on the trajectories collected
for step s: its questions' rollouts, then their judge calls. A collection may start once the
engine serves version s - k:
  * k = 0 (the default, the paper's synchronous step): step s's collection starts after step
    s - 1 trained and pushed version s, so every trajectory is on-policy;
  * k >= 1: the collections of steps s + 1 .. s + k run on the run's event loop (its own
    thread, `LoopThread`) while step s trains; the trainer waits only for what is not done.

Staleness of a trajectory trained at step s: s - v, with v its oldest weight version (the first
generated turn's, `weight_version`). A group holding a trajectory staler than k, or one whose
version is not a step number, is dropped and counted (`rollout/dropped_stale`). While the
engine serves what the trainer pushed none is, since a collection starts at version >= s - k.

Partial rollouts: an episode whose weights change between two of its turns is kept, every
turn of it. A turn in flight when new weights are pushed ends on the weights it started with
(the in-process engine finishes its running batch; the SGLang client holds new requests and
waits for those in flight before the servers load, `rollout/engines/sglang.py`), so each turn
records the version that sampled all of its tokens (`turn_weight_versions`), and its tokens'
rollout log-probs are that version's. With `loss.old_logprobs="rollout"` they are the clipped
ratio's denominator, so each token's ratio is against the weights that sampled it; with
"trainer", icepop weighs them against the trainer's. The episode's staleness counts from its
oldest turn; `rollout/partial_share` counts such episodes. Measured on the main job:
docs/history/2026-11-28-reference-world.md ("Rollouts one step ahead").

Resume: the checkpoint after step s stores the loader position after step s's questions
(`Pipeline.position`), not after the questions drawn ahead. Collections in flight at a kill are
lost; the resumed run draws the same questions again and collects them from its own weights.
So under overlap a resumed run trains the same questions at the same steps as the
uninterrupted one, none twice and none skipped; the samples differ (another version drew
them). With k >= 1 samples depend on timing even without a kill (when a push lands between
an episode's turns), so only k = 0 reproduces a run's episodes.

  pipe = Pipeline(loader, submit, start=start, max_staleness=k, lead=True)
  for step in range(start, end):
    pipe.launch_through(step + k)         # draws questions; the lead starts their collection
    result, waited_s = pipe.take(step)
    ...; checkpoint with pipe.position     # the loader right after the taken step's questions
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
  """How collections feed the trainer (the `rollout` section; carr_jax.jobs.components
  pipeline_config checks them against the loss)."""
  max_staleness: int = 0  # collections run up to k steps ahead of training (0: the paper's
  # synchronous step). k >= 1 needs a correction for stale tokens; the measured one is
  # loss.old_logprobs="rollout" with importance_sampling="none"
  dump_trajectories: bool = True  # workdir/trajectories/step_N.jsonl, N as the step

  def __post_init__(self):
    if not isinstance(self.max_staleness, int) or self.max_staleness < 0:
      raise ValueError(f"rollout.max_staleness must be an integer >= 0, got "
                       f"{self.max_staleness!r}")


class LoopThread:
  """An asyncio event loop running forever in a daemon thread; `run` waits for a coroutine."""

  def __init__(self):
    self.loop = asyncio.new_event_loop()
    self._thread = threading.Thread(target=self.loop.run_forever, name="carr-jax-loop",
                                    daemon=True)
    self._thread.start()

  def submit(self, coro: Coroutine) -> concurrent.futures.Future:
    return asyncio.run_coroutine_threadsafe(coro, self.loop)

  def run(self, coro: Coroutine) -> Any:
    return self.submit(coro).result()

  def close(self) -> None:
    """Cancels what still runs on the loop, then stops and closes it."""
    async def cancel_rest():
      rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
      for task in rest:
        task.cancel()
      await asyncio.gather(*rest, return_exceptions=True)
    if self.loop.is_running():
      self.run(cancel_rest())
      self.loop.call_soon_threadsafe(self.loop.stop)
      self._thread.join()
    self.loop.close()


class IdleClock:
  """Seconds with no collection in flight (the rollout side waiting for weights).

  `busy()` / `done()` bracket each collection (on the loop thread); `take()` returns the idle
  seconds since the last take and starts counting anew (from the trainer's thread).
  """

  def __init__(self, clock: Callable[[], float] = time.perf_counter):
    self._clock, self._lock = clock, threading.Lock()
    self._active, self._idle, self._since = 0, 0.0, clock()

  def busy(self) -> None:
    with self._lock:
      if self._active == 0:
        self._idle += self._clock() - self._since
      self._active += 1

  def done(self) -> None:
    with self._lock:
      self._active -= 1
      if self._active == 0:
        self._since = self._clock()

  def take(self) -> float:
    with self._lock:
      now = self._clock()
      idle = self._idle + (now - self._since if self._active == 0 else 0.0)
      self._idle, self._since = 0.0, now
      return idle


class Pipeline:
  """Draws each step's questions in order and keeps up to `max_staleness` collections ahead.

  `submit(records, step)` starts a collection and returns a concurrent.futures.Future of its
  result (called on the lead process only; other processes only draw, so every process's
  loader position agrees). `max_staleness` comes checked (components.pipeline_config).
  """

  def __init__(self, loader: Any, submit: Callable[[list, int], concurrent.futures.Future],
               *, start: int, max_staleness: int, lead: bool, idle: IdleClock | None = None):
    self.loader, self.submit, self.max_staleness, self.lead = loader, submit, max_staleness, lead
    self.idle = idle or IdleClock()
    self._pending: dict[int, tuple[Any, dict]] = {}  # step -> (future or None, position after)
    self._next = start  # the first step not drawn yet
    self.position = dict(loader.position)  # the loader right after the last taken step

  def launch_through(self, last_step: int) -> None:
    """Draws the questions of every step up to `last_step` not drawn yet; the lead starts
    their collections. Stops quietly at the end of the data."""
    while self._next <= last_step:
      try:
        records = self.loader.next()
      except StopIteration:
        return
      future = self.submit(records, self._next) if self.lead else None
      self._pending[self._next] = (future, dict(self.loader.position))
      self._next += 1

  def take(self, step: int) -> tuple[Any, float]:
    """(step `step`'s collection result, None off the lead; the seconds waited for it)."""
    future, position = self._pending.pop(step)
    start = time.perf_counter()
    result = future.result() if future is not None else None
    self.position = position
    return result, time.perf_counter() - start

  def cancel(self) -> None:
    """Cancels the collections still in flight (a run ending early)."""
    for future, _ in self._pending.values():
      if future is not None:
        future.cancel()
    self._pending.clear()


def staleness(groups: Sequence[Sequence[dict]], step: int) -> np.ndarray:
  """[P, G] steps between each trajectory's oldest weight version and `step`; inf where the
  version is not a step number (an engine serving weights the trainer did not push)."""
  def one(traj: dict) -> float:
    version = str(traj.get("weight_version", ""))
    return float(step - int(version)) if version.isdigit() else float("inf")
  return np.array([[one(t) for t in group] for group in groups], np.float64)


def fresh_groups(stale: np.ndarray, max_staleness: int) -> np.ndarray:
  """[P, 1] groups whose every trajectory is at most `max_staleness` steps old."""
  return (stale <= max_staleness).all(axis=1, keepdims=True)


def partial(traj: dict) -> bool:
  """Whether an episode's turns were generated by more than one weight version."""
  return len(set(traj.get("turn_weight_versions") or ())) > 1


def staleness_metrics(stale: np.ndarray, fresh: np.ndarray, groups: Sequence[Sequence[dict]],
                      prefix: str = "rollout/") -> dict[str, float]:
  """Mean and max staleness of the trained trajectories, trajectories dropped as too stale,
  share of partial rollouts. `stale` [P, G] from `staleness`; `fresh` [P, 1] usable groups."""
  kept = stale[np.broadcast_to(fresh, stale.shape)]
  flat = [t for group in groups for t in group]
  return {f"{prefix}staleness_mean": float(kept.mean()) if kept.size else 0.0,
          f"{prefix}staleness_max": float(kept.max()) if kept.size else 0.0,
          f"{prefix}dropped_stale": float(stale.size - kept.size),
          f"{prefix}partial_share": float(np.mean([partial(t) for t in flat])) if flat else 0.0}
