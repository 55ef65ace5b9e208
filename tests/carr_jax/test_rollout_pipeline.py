"""Rollouts ahead of the trainer (carr_jax/jobs/pipeline.py): order, staleness bound, idle time.

A controlled engine stands in for the rollouts: each collection's trajectories carry the weight
version the engine serves when it starts, and the test's trainer loop pushes version s + 1
after step s, as carr_jax/jobs/rl_train.py does. An engine that lags behind the pushes serves
trajectories k + 1 versions old: they must be dropped, never trained on.
"""
import asyncio
import concurrent.futures
import threading
import time

import numpy as np
import pytest

from carr_common.in_flight import InFlight
from carr_jax.jobs import components, pipeline
from carr_jax.jobs.tasks import TaskLoader
from carr_jax.runs.metrics import MetricsWriter
from configs import base

RECORDS = [{"id": i} for i in range(40)]


class ControlledEngine:
  """Serves `version`; a lag of L makes it serve L versions behind the last push."""

  def __init__(self, lag: int = 0):
    self.pushed, self.lag = 0, lag
    self.started: dict[int, int] = {}  # step -> version its collection started on

  def collect(self, records, step):
    version = max(self.pushed - self.lag, 0)
    self.started[step] = version
    groups = [[{"weight_version": str(version), "turn_weight_versions": [str(version)],
                "id": r["id"]}] * 2 for r in records]
    future = concurrent.futures.Future()
    future.set_result(groups)
    return future


def run_loop(k: int, steps: int, lag: int = 0, start: int = 0, position=None):
  """The trainer's order of calls; returns (engine, {step: ids trained}, dropped, positions)."""
  loader = TaskLoader(RECORDS, 4, seed=0, epochs=5)
  if position is not None:
    loader.position = position
  engine = ControlledEngine(lag)
  engine.pushed = start
  pipe = pipeline.Pipeline(loader, engine.collect, start=start, max_staleness=k, lead=True)
  trained, dropped, positions = {}, 0, {}
  for step in range(start, steps):
    pipe.launch_through(min(step + k, steps - 1))
    groups, _ = pipe.take(step)
    stale = pipeline.staleness(groups, step)
    fresh = pipeline.fresh_groups(stale, k)
    dropped += int(pipeline.staleness_metrics(stale, fresh, groups)["rollout/dropped_stale"])
    trained[step] = [g[0]["id"] for g, ok in zip(groups, fresh[:, 0]) if ok]
    assert (stale[fresh[:, 0]] <= k).all()  # nothing staler than k is trained on
    engine.pushed = step + 1  # the update, then the push
    positions[step] = pipe.position
  return engine, trained, dropped, positions


@pytest.mark.parametrize("k", [0, 1, 2])
def test_collections_start_k_versions_back_and_train_in_order(k):
  engine, trained, dropped, _ = run_loop(k, steps=8)
  assert dropped == 0
  for step, version in engine.started.items():
    assert version == max(step - k, 0)  # step s's collection starts on version s - k
  straight = TaskLoader(RECORDS, 4, seed=0, epochs=5)
  assert trained == {s: [r["id"] for r in straight.next()] for s in range(8)}


@pytest.mark.parametrize("k", [0, 1, 2])
def test_an_engine_lagging_one_version_too_many_is_never_trained_on(k):
  # the engine serves k + 1 versions behind the pushes: from step k + 1 on, every group is
  # k + 1 versions old
  engine, trained, dropped, _ = run_loop(k, steps=6, lag=1)
  late = [s for s in range(6) if s - engine.started[s] > k]
  assert late == list(range(k + 1, 6))
  assert all(trained[s] == [] for s in late)
  assert dropped == 2 * 4 * len(late)  # every trajectory of every late group, counted


def test_resume_trains_the_same_questions_none_twice_none_skipped():
  k, steps = 2, 10
  _, straight, _, positions = run_loop(k, steps)
  # a kill after step 4's checkpoint: collections of steps 5 and 6 were in flight and are lost
  _, first, _, _ = run_loop(k, 5)
  _, resumed, _, _ = run_loop(k, steps, start=5, position=positions[4])
  assert {**first, **resumed} == straight


def test_versions_that_are_no_step_number_count_as_stale():
  groups = [[{"weight_version": "3"}, {"weight_version": "default"}], [{"weight_version": "2"},
                                                                         {}]]
  stale = pipeline.staleness(groups, step=3)
  assert stale.tolist() == [[0.0, np.inf], [1.0, np.inf]]
  assert pipeline.fresh_groups(stale, 5).tolist() == [[False], [False]]


def test_partial_rollouts_are_counted():
  one = {"weight_version": "2", "turn_weight_versions": ["2", "2"]}
  mixed = {"weight_version": "2", "turn_weight_versions": ["2", "3"]}
  groups = [[one, mixed], [one, one]]
  stale = pipeline.staleness(groups, 3)
  metrics = pipeline.staleness_metrics(stale, pipeline.fresh_groups(stale, 1), groups)
  assert metrics == {"rollout/staleness_mean": 1.0, "rollout/staleness_max": 1.0,
                     "rollout/dropped_stale": 0.0, "rollout/partial_share": 0.25}


def test_idle_clock_counts_only_time_with_nothing_in_flight():
  now = [0.0]
  clock = pipeline.IdleClock(lambda: now[0])
  now[0] = 2.0
  clock.busy()  # idle 0 -> 2
  now[0] = 3.0
  clock.busy()
  now[0] = 5.0
  clock.done()
  now[0] = 6.0
  assert clock.take() == 2.0  # still one in flight
  clock.done()  # at 6
  now[0] = 9.5
  assert clock.take() == 3.5
  now[0] = 10.0
  assert clock.take() == 0.5


def test_in_flight_gauge_peaks_per_reading():
  gauge = InFlight()
  with gauge:
    with gauge:
      pass
    assert gauge.take_peak() == 2
    assert gauge.take_peak() == 1  # the next period starts at what is in flight
  assert gauge.take_peak() == 1
  assert gauge.take_peak() == 0


def test_loop_thread_runs_coroutines_and_cancels_the_rest_on_close():
  loop = pipeline.LoopThread()

  async def here():
    return threading.current_thread().name

  assert loop.run(here()) == "carr-jax-loop"
  never = loop.submit(asyncio.sleep(3600))
  start = time.perf_counter()
  loop.close()
  assert never.cancelled() and time.perf_counter() - start < 5


def test_pipeline_cancels_what_is_in_flight():
  loop = pipeline.LoopThread()
  loader = TaskLoader(RECORDS, 4, seed=0, epochs=1)
  pipe = pipeline.Pipeline(loader, lambda records, step: loop.submit(asyncio.sleep(3600)),
                           start=0, max_staleness=2, lead=True)
  pipe.launch_through(2)
  futures = [f for f, _ in pipe._pending.values()]
  pipe.cancel()
  loop.close()
  assert len(futures) == 3 and all(f.cancelled() for f in futures)


def test_off_the_lead_questions_are_drawn_but_nothing_collected():
  loader = TaskLoader(RECORDS, 4, seed=0, epochs=1)
  pipe = pipeline.Pipeline(loader, lambda *a: pytest.fail("collected"), start=0,
                           max_staleness=1, lead=False)
  pipe.launch_through(1)
  assert pipe.take(0)[0] is None and pipe.position == {"epoch": 0, "index": 4}
  assert loader.position == {"epoch": 0, "index": 8}


def test_staleness_config_is_checked():
  config = base.get_config()
  assert components.pipeline_config(config).max_staleness == 0
  config.rollout.max_staleness = 1
  with pytest.raises(ValueError, match="icepop"):
    components.pipeline_config(config)  # no importance correction for stale tokens
  config.loss.importance_sampling = "icepop"
  assert components.pipeline_config(config).max_staleness == 1
  config.loss.old_logprobs, config.loss.importance_sampling = "rollout", "none"
  assert components.pipeline_config(config).max_staleness == 1  # the clipped ratio corrects
  config.loss.importance_sampling = "icepop"
  with pytest.raises(ValueError, match="old_logprobs='trainer'"):
    components.loss_config(config)  # icepop compares the trainer's with the rollout's
  config.loss.importance_sampling, config.rollout.max_staleness = "none", -1
  with pytest.raises(ValueError, match=">= 0"):
    components.pipeline_config(config)


def test_staleness_histogram_reaches_tensorboard(tmp_path):
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
  writer = MetricsWriter(str(tmp_path), process_index=0)
  writer.histogram(3, "rollout/staleness", [0, 1, 1, 2], limits=[0.5, 1.5, 2.5])
  writer.close()
  events = EventAccumulator(str(tmp_path), size_guidance={"histograms": 0})
  events.Reload()
  (event,) = events.Histograms("rollout/staleness")
  assert event.step == 3 and event.histogram_value.num == 4
  assert list(event.histogram_value.bucket)[:3] == [1.0, 2.0, 1.0]
  assert event.histogram_value.max == 2.0
