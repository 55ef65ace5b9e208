"""SFT and RL keep their books alike (carr_jax/jobs/run_setup.py): the same checkpoint meta, with
secrets in the config redacted, and the same metric names.

One SFT run (tests/lab/test_sft.py's tiny conversations) and one RL step (lab/configs/demo_cpu.py
shrunk as in tests/carr_jax/test_trainer.py) each get a judge API key in their config and a secret's
value under an innocent key; neither value may appear in any file of either run directory
(checkpoints, TensorBoard), and both checkpoints' meta is {config: the redacted config,
weight_version: the step}. Run: python -m pytest tests/lab/test_run_setup.py -q
"""
from __future__ import annotations

import json
import pathlib

import orbax.checkpoint as ocp
import pytest

from carr_common.redaction import REDACTED
from carr_jax.jobs import rl_train as trainer
from carr_jax.jobs import run_setup
from carr_jax.jobs import sft_train
from carr_jax.runs import checkpointing as ckpt_lib
from carr_jax.runs import metrics as metrics_lib
from lab.configs import demo_cpu
from tests.lab.test_sft import conversations, demo_config

API_KEY = "sk-carr-test-0123456789abcdef"  # under judge.api_key: masked by its name
ENV_SECRET = "carr-env-secret-9876543210"  # a secret env var's value under judge.model


def add_secrets(config, monkeypatch):
  monkeypatch.setenv("CARR_TEST_API_KEY", ENV_SECRET)
  with config.unlocked():
    config.judge.api_key = API_KEY
  config.judge.model = ENV_SECRET
  return config


def rl_config():
  c = demo_cpu.get_config()
  c.world.entities, c.world.questions = 30, 12
  c.data.prompts_per_step, c.data.group_size = 2, 2
  c.rollout.max_turn_tokens, c.rollout.max_context_tokens = 16, 1024
  c.batch.row_lengths = (1024,)
  c.train.num_steps, c.train.eval_every = 1, 0
  c.checkpoint.every = 1
  return c


def checkpoint_meta(workdir: pathlib.Path, step: int) -> dict:
  """The meta item of checkpoint `step`, read alone (without the state)."""
  with ocp.CheckpointManager(ckpt_lib.checkpoint_dir(str(workdir))) as manager:
    return manager.restore(step, args=ocp.args.Composite(
        **{ckpt_lib.META: ocp.args.JsonRestore()}))[ckpt_lib.META]


def assert_no_secret_in(workdir: pathlib.Path) -> None:
  for path in workdir.rglob("*"):
    if path.is_file():
      data = path.read_bytes()
      assert API_KEY.encode() not in data and ENV_SECRET.encode() not in data, path


def test_sft_and_rl_checkpoints_carry_the_same_redacted_meta(tmp_path, monkeypatch):
  data = tmp_path / "conv.jsonl"
  data.write_text("".join(json.dumps(r) + "\n" for r in conversations(8)))
  sft_config = add_secrets(demo_config(data), monkeypatch)
  sft_config.sft.num_steps = 1
  rl = add_secrets(rl_config(), monkeypatch)
  (sft_metrics,) = sft_train.train_sft(sft_config, str(tmp_path / "sft"))
  rl_metrics = trainer.train_and_evaluate(rl, str(tmp_path / "rl"))
  for config, workdir in ((sft_config, tmp_path / "sft"), (rl, tmp_path / "rl")):
    assert_no_secret_in(workdir)
    meta = checkpoint_meta(workdir, 1)
    redacted = json.loads(json.dumps(metrics_lib.redact(config.to_dict()), default=str))
    assert meta == {"config": redacted, "weight_version": 1}
    assert meta["config"]["judge"]["api_key"] == meta["config"]["judge"]["model"] == (
        REDACTED)
  perf = {"perf/train_s", "perf/step_time_s", "perf/train_tokens_per_s"}
  assert perf <= set(sft_metrics) and perf <= set(rl_metrics)
  for m in (sft_metrics, rl_metrics):  # loss tokens per second of the train phase
    assert m["perf/train_tokens_per_s"] == pytest.approx(
        m.get("train/packing_loss_tokens", 0.0) / m["perf/train_s"])
    assert m["perf/train_s"] <= m["perf/step_time_s"]


def test_perf_metrics_are_loss_tokens_per_second_of_training():
  assert run_setup.perf_metrics({"train/packing_loss_tokens": 300.0}, 2.0, 5.0) == {
      "perf/train_s": 2.0, "perf/step_time_s": 5.0, "perf/train_tokens_per_s": 150.0}
  assert run_setup.perf_metrics({}, 1.0, 1.0)["perf/train_tokens_per_s"] == 0.0  # skipped


def test_train_metrics_stop_on_a_non_finite_loss():
  assert run_setup.train_metrics({"loss": 1.5, "grad_norm": 2.0}, 3) == {
      "train/loss": 1.5, "train/grad_norm": 2.0}
  with pytest.raises(metrics_lib.NonFiniteError, match="step 7.*train/loss"):
    run_setup.train_metrics({"loss": float("nan"), "grad_norm": 2.0}, 7)
