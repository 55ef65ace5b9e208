"""The real trainer on the tiny demo config: run, kill, resume; TensorBoard serves the run.

`python -m carr_jax.train` runs as a subprocess; it is SIGKILLed as soon as the checkpoint of
step 1 is on disk and then started again with the same command: it must resume at step 1
(not redo it), finish step 2, and leave TensorBoard scalars for steps 1 and 2, judge
breakdowns for every trajectory, and a final checkpoint. Its step-2 episodes must be exactly
those of the same run left uninterrupted (engine seeds follow the episode, not the timing).
A `tensorboard` process started on the workdir must serve the scalar, text and image tags over
HTTP. With `rollout.max_staleness=1` (rollouts one step ahead) the resumed run trains the
loader's questions in order, each step's once, and TensorBoard shows the staleness.
"""
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rollout.engines.sglang_launcher import free_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OVERRIDES = [
    "--config.world.entities=30", "--config.world.questions=12",
    "--config.data.prompts_per_step=2", "--config.data.group_size=2",
    "--config.rollout.max_turn_tokens=16", "--config.rollout.max_context_tokens=1024",
    "--config.batch.row_lengths=(1024,)", "--config.train.num_steps=2",
    "--config.train.eval_every=2", "--config.train.eval_questions=1",
    "--config.checkpoint.every=1"]


def train_cmd(workdir, extra=()):
  return [sys.executable, "-m", "carr_jax.train", "--config", "lab/configs/demo_cpu.py",
          "--workdir", str(workdir), *OVERRIDES, *extra]


def _env():
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  env.pop("XLA_FLAGS", None)  # one CPU device, as on a user's laptop
  return env


def run_killed_after_first_checkpoint(workdir, extra=(), timeout=900):
  proc = subprocess.Popen(train_cmd(workdir, extra), cwd=REPO, env=_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  deadline = time.time() + timeout
  while not (workdir / "checkpoints" / "1").is_dir():
    assert proc.poll() is None, proc.stdout.read()[-3000:]
    assert time.time() < deadline, "no checkpoint of step 1 in time"
    time.sleep(0.5)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  return proc


def scalars(workdir):
  acc = EventAccumulator(str(workdir / "tb"), size_guidance={"scalars": 0, "images": 0,
                                                             "tensors": 0})
  acc.Reload()
  return acc


@pytest.mark.slow
def test_train_kill_resume_and_tensorboard(tmp_path):
  workdir = tmp_path / "run"
  run_killed_after_first_checkpoint(workdir)
  resumed = subprocess.run(train_cmd(workdir), cwd=REPO, env=_env(), capture_output=True,
                           text=True, timeout=900)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert "init source: workdir_checkpoint" in resumed.stderr + resumed.stdout
  summaries = [l for l in resumed.stdout.splitlines() if l.startswith("step ")]
  assert [l.split()[1] for l in summaries] == ["2/2"]  # step 1 was not redone

  acc = scalars(workdir)
  steps = sorted({e.step for e in acc.Scalars("train/loss")})
  assert steps == [1, 2]  # continuous across the kill: one value per step, none missing
  for key in ("rollout/reward_mean", "judge/rubric_reward_mean", "perf/rollout_s",
              "perf/judge_s", "perf/train_s", "perf/sync_s", "rollout/tool_calls_search",
              "judge/shortcut_rate", "eval/outcome_reward_mean"):
    assert key in acc.Tags()["scalars"], key
  assert "eval/evidence_graph" in acc.Tags()["images"]
  assert sorted(os.listdir(workdir / "checkpoints")) >= ["1", "2"]

  for step in (1, 2):  # the judge scored every trajectory of every step (numbered as steps)
    rows = [json.loads(l) for l in open(workdir / "trajectories" / f"step_{step}.jsonl")]
    assert len(rows) == 4
    assert all(r["judge"]["backend"].startswith("gold") for r in rows)
    assert all(r["judge"]["outcome_reason"] != "not judged" for r in rows)
  check_tensorboard_serves(workdir)

  straight = tmp_path / "straight"
  whole = subprocess.run(train_cmd(straight), cwd=REPO, env=_env(), capture_output=True,
                         text=True, timeout=900)
  assert whole.returncode == 0, whole.stderr[-3000:]

  def episodes(run_dir):
    rows = [json.loads(l) for l in open(run_dir / "trajectories" / "step_2.jsonl")]
    return {(r["prompt_id"], r["sample_index"]): (r["token_ids"], r["weight_version"])
            for r in rows}
  assert episodes(workdir) == episodes(straight)


@pytest.mark.slow
def test_overlapped_run_resumes_without_a_question_twice_or_skipped(tmp_path):
  extra = ("--config.rollout.max_staleness=1", "--config.loss.importance_sampling=icepop",
           "--config.train.num_steps=3", "--config.train.eval_every=0")
  workdir = tmp_path / "run"
  run_killed_after_first_checkpoint(workdir, extra)  # step 2's collection was in flight
  resumed = subprocess.run(train_cmd(workdir, extra), cwd=REPO, env=_env(), capture_output=True,
                           text=True, timeout=900)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  summaries = [l.split()[1] for l in resumed.stdout.splitlines() if l.startswith("step ")]
  assert summaries == ["2/3", "3/3"]

  from carr_jax import cli
  from carr_jax.jobs import tasks as data_lib
  config = cli.load_config("lab/configs/demo_cpu.py", [o[len("--config."):] for o in
                                                      (*OVERRIDES, *extra)])
  train, _, _ = data_lib.load_tasks(config)
  loader = data_lib.TaskLoader(train, config.data.prompts_per_step, config.seed,
                               config.data.epochs)
  for step in (1, 2, 3):  # each step trained its own questions, in the loader's order
    rows = [json.loads(l) for l in open(workdir / "trajectories" / f"step_{step}.jsonl")]
    want = [str(r["id"]) for r in loader.next()]
    assert sorted({r["prompt_id"] for r in rows}) == sorted(want)
    assert len(rows) == len(want) * config.data.group_size
  acc = scalars(workdir)
  assert sorted(e.step for e in acc.Scalars("train/loss")) == [1, 2, 3]
  staleness = {e.step: e.value for e in sorted(acc.Scalars("rollout/staleness_max"),
                                                key=lambda e: e.wall_time)}  # the last write
  assert staleness == {1: 0.0, 2: 0.0, 3: 1.0}  # the resumed run started steps 2 and 3 on
  # version 1; step 3 trains version 2
  for key in ("rollout/dropped_stale", "perf/trainer_idle_s", "perf/rollout_idle_s",
              "judge/trajectories_in_flight_peak"):
    assert key in acc.Tags()["scalars"], key
  assert "rollout/staleness" in acc.Tags()["histograms"]


def check_tensorboard_serves(workdir):
  port = free_port()
  tb = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir",
                         str(workdir / "tb"), "--host", "127.0.0.1", "--port", str(port),
                         "--load_fast", "false"], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)
  try:
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while True:
      try:
        scalar_tags = httpx.get(f"{base}/data/plugin/scalars/tags", timeout=5).json()
        if scalar_tags:
          break
      except httpx.HTTPError:
        pass
      assert time.time() < deadline, "tensorboard did not serve in time"
      time.sleep(1)
    run = next(iter(scalar_tags))
    assert {"train/loss", "rollout/reward_mean", "judge/outcome_reward_mean"} <= set(
        scalar_tags[run])
    text_tags = httpx.get(f"{base}/data/plugin/text/tags", timeout=5).json()
    assert "eval/trajectory_0" in text_tags[run]
    image_tags = httpx.get(f"{base}/data/plugin/images/tags", timeout=5).json()
    assert "eval/evidence_graph" in image_tags[run]
  finally:
    tb.terminate()
    tb.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.sglang
@pytest.mark.parametrize("k", [0, 1])
def test_train_with_a_real_sglang_server(tmp_path, k):
  """Rollouts from a real SGLang CPU server (weights synced each step): 2 synchronous steps,
  or 3 with the rollouts one step ahead (`rollout.max_staleness=1`)."""
  from rollout.engines import sglang_launcher
  from tests.sglang_server import make_tiny_qwen3
  if not sglang_launcher.venv_python().exists():
    pytest.skip("SGLang venv missing; build it with scripts/setup_sglang_cpu.sh")
  model_dir = make_tiny_qwen3(tmp_path / "policy", seed=0)
  server = sglang_launcher.launch(str(model_dir), dtype="float32", context_length=1024,
                                  max_total_tokens=8192, timeout=300.0)
  steps = 2 + k
  overlap = [f"--config.rollout.max_staleness={k}", "--config.loss.old_logprobs=rollout",
             "--config.loss.importance_sampling=none",
             f"--config.train.num_steps={steps}", "--config.train.eval_every=0"] if k else []
  try:
    workdir = tmp_path / "run"
    proc = subprocess.run(
        train_cmd(workdir, ["--config.rollout.engine=sglang",
                            f"--config.rollout.sglang_urls={server.url}",
                            f"--config.model.hf_path={model_dir}",
                            f"--config.checkpoint.every={steps}", *overlap]),
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "init source: hf_weights" in proc.stderr + proc.stdout
    served = httpx.get(f"{server.url}/model_info", timeout=10).json()["weight_version"]
    assert served == str(steps)
    assert sorted(os.listdir(workdir / "sync")) == [f"v{steps}"]  # replaced exports deleted
    acc = scalars(workdir)
    assert sorted({e.step for e in acc.Scalars("train/loss")}) == list(range(1, steps + 1))
    for step in range(2, steps + 1):  # sampled at most k versions before the trained one
      rows = [json.loads(l) for l in open(workdir / "trajectories" / f"step_{step}.jsonl")]
      assert len(rows) == 4 and all(r["status"] != "failed" for r in rows)
      assert {r["weight_version"] for r in rows} <= {str(v) for v in range(step - 1 - k, step)}
      assert all(set(r["turn_weight_versions"]) <= {str(v) for v in range(step - 1 - k, step)}
                 for r in rows)
    if k:
      assert [e.value for e in acc.Scalars("rollout/dropped_stale")] == [0.0] * steps
      assert max(e.value for e in acc.Scalars("rollout/staleness_max")) <= k
  finally:
    server.stop()
