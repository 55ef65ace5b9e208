"""Tests for carr_jax/runs/metrics.py: event files read back by TensorBoard's own reader and server.

Run: .venv/bin/python -m pytest tests/carr_jax/test_metrics.py -x -q
"""
import glob
import io
import math
import os
import subprocess
import sys
import time

import httpx
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from PIL import Image
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.plugins.hparams import metadata as hparams_metadata
from tensorboard.plugins.hparams import plugin_data_pb2 as hparams_pb2
from tensorboard.util import tensor_util

from carr_common.redaction import REDACTED
from carr_jax.runs import metrics
from rollout.engines.sglang_launcher import free_port

SECRET = "sk-unit-test-secret-0123456789"


def _config():
  return {
      "model": {"preset": "tiny_dense", "max_tokens": 512, "tokenizer_path": "/tmp/tok"},
      "optim": {"learning_rate": 3e-4, "clip": True, "betas": (0.9, 0.999)},
      "judge": {"api_key": SECRET, "base_url": "http://127.0.0.1:1", "timeout": None},
      "seed": 7,
  }


def _write_run(logdir, rng):
  """A short run: 4 steps of scalars, one text, one image, hparams. Returns what was sent."""
  image = rng.integers(0, 256, size=(6, 5, 3), dtype=np.uint8)  # [H, W, C]
  losses = [1.0 / 3.0 + 0.25 * s for s in range(4)]
  with metrics.MetricsWriter(logdir) as writer:
    flat = writer.hparams(_config())
    for step, loss in enumerate(losses):
      writer.scalars(step, {"train/loss": loss, "perf/step_time_s": jnp.float32(step + 0.5)})
    writer.text(1, "rollout/sample", "**answer**: 42")
    writer.image(2, "eval/attention", image)
  return losses, image, flat


def _accumulator(logdir):
  acc = ea.EventAccumulator(logdir, size_guidance={
      ea.SCALARS: 0, ea.TENSORS: 0, ea.IMAGES: 0, ea.COMPRESSED_HISTOGRAMS: 0,
      ea.HISTOGRAMS: 0, ea.AUDIO: 0})
  acc.Reload()
  return acc


def test_written_run_reads_back_exactly(tmp_path):
  losses, image, flat = _write_run(str(tmp_path), np.random.default_rng(0))
  acc = _accumulator(str(tmp_path))
  tags = acc.Tags()
  assert sorted(tags["scalars"]) == ["perf/step_time_s", "train/loss"]
  assert tags["images"] == ["eval/attention"]
  assert sorted(tags["tensors"]) == sorted(
      ["rollout/sample", metrics.CONFIG_TEXT_TAG, hparams_metadata.SESSION_START_INFO_TAG])

  loss_events = acc.Scalars("train/loss")
  assert [e.step for e in loss_events] == [0, 1, 2, 3]
  # simple_value is a float32 field: exact equality after rounding to float32.
  assert [e.value for e in loss_events] == [float(np.float32(x)) for x in losses]
  assert [e.value for e in acc.Scalars("perf/step_time_s")] == [0.5, 1.5, 2.5, 3.5]

  (text_event,) = acc.Tensors("rollout/sample")
  assert text_event.step == 1
  assert tensor_util.make_ndarray(text_event.tensor_proto).item() == b"**answer**: 42"
  assert acc.PluginTagToContent("text").keys() >= {"rollout/sample", metrics.CONFIG_TEXT_TAG}

  (image_event,) = acc.Images("eval/attention")
  assert (image_event.step, image_event.height, image_event.width) == (2, 6, 5)
  decoded = np.asarray(Image.open(io.BytesIO(image_event.encoded_image_string)))
  np.testing.assert_array_equal(decoded, image)

  content = acc.PluginTagToContent("hparams")[hparams_metadata.SESSION_START_INFO_TAG]
  hparams = hparams_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
  assert hparams["optim.learning_rate"].number_value == 3e-4
  assert hparams["model.max_tokens"].number_value == 512
  assert hparams["optim.clip"].bool_value is True
  assert hparams["optim.betas"].string_value == "(0.9, 0.999)"
  assert hparams["judge.timeout"].string_value == "None"
  assert hparams["judge.api_key"].string_value == REDACTED
  assert set(hparams) == set(flat)

  (table_event,) = acc.Tensors(metrics.CONFIG_TEXT_TAG)
  assert table_event.step == 0
  table = tensor_util.make_ndarray(table_event.tensor_proto)  # [N, 2]
  rows = {k.decode(): v.decode() for k, v in table}
  assert rows["model.preset"] == "tiny_dense"
  assert rows["judge.api_key"] == REDACTED
  for path in glob.glob(os.path.join(str(tmp_path), "events.out.tfevents.*")):
    with open(path, "rb") as f:
      assert SECRET.encode() not in f.read()


def test_bad_prefix_is_rejected_and_nothing_of_the_batch_is_written(tmp_path):
  with metrics.MetricsWriter(str(tmp_path)) as writer:
    for bad in ("loss", "train/", "training/loss", "Train/loss"):
      with pytest.raises(ValueError, match="metric key") as info:
        writer.scalars(0, {"train/ok": 1.0, bad: 2.0})
      assert repr(bad) in str(info.value)
    with pytest.raises(ValueError, match="'sample'"):
      writer.text(0, "sample", "x")
    with pytest.raises(ValueError, match="'img'"):
      writer.image(0, "img", np.zeros((2, 2), np.uint8))
    with pytest.raises(ValueError, match="'train/vec'.*shape"):
      writer.scalars(0, {"train/vec": np.ones(3)})
  assert _accumulator(str(tmp_path)).Tags()["scalars"] == []


def test_image_encoding_floats_and_bad_shapes():
  gray = np.array([[0.0, 0.5], [1.0, 2.0]], np.float32)  # [H, W]; 2.0 clips to 1.0
  png, height, width, channels = metrics.encode_png(gray)
  assert (height, width, channels) == (2, 2, 1)
  np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(png))),
                                [[0, 128], [255, 255]])
  with pytest.raises(ValueError, match="shape"):
    metrics.encode_png(np.zeros((2, 2, 2), np.uint8))
  with pytest.raises(ValueError, match="int64"):
    metrics.encode_png(np.zeros((2, 2), np.int64))


def test_check_finite_names_every_bad_key():
  values = {"train/loss": jnp.float32(jnp.nan), "train/grad_norm": np.inf,
            "rollout/reward_mean": float("nan"), "perf/step_time_s": 1.0}
  with pytest.raises(metrics.NonFiniteError) as info:
    metrics.check_finite(values, step=7)
  assert info.value.step == 7
  assert info.value.keys == ["rollout/reward_mean", "train/grad_norm", "train/loss"]
  assert str(info.value).startswith("step 7: non-finite metrics: rollout/reward_mean=nan")
  with pytest.raises(metrics.NonFiniteError) as info:
    metrics.check_finite(values, step=7, keys=["train/loss", "perf/step_time_s"])
  assert info.value.keys == ["train/loss"]
  metrics.check_finite({"train/loss": 0.5, "train/grad_norm": jnp.ones(3)}, step=8)
  with pytest.raises(metrics.NonFiniteError, match="train/grad_norm"):
    metrics.check_finite({"train/grad_norm": np.array([1.0, -np.inf])}, step=9)
  with pytest.raises(KeyError, match="train/grad_norm"):
    metrics.check_finite({"train/loss": 0.5}, step=9, keys=["train/grad_norm"])


def test_redact_masks_secret_keys_and_secret_values(monkeypatch):
  env_secret = "hf_abcdefghijklmnop"
  monkeypatch.setenv("HF_TOKEN", env_secret)
  config = ml_collections.ConfigDict({
      "judge": {"api_key": SECRET, "openaiApiKey": "x", "max_tokens": 128,
                "backends": [{"name": "a", "password": "p"}, {"name": "b", "url": env_secret}]},
      "hf_token": "t", "client_secret": {"nested": 1}, "tokenizer": "qwen", "num_tokens": 3,
      "api_keys": ["k1"], "keyword": "api",
  })
  redacted = metrics.redact(config)
  assert redacted == {
      "judge": {"api_key": REDACTED, "openaiApiKey": REDACTED,
                "max_tokens": 128,
                "backends": [{"name": "a", "password": REDACTED},
                             {"name": "b", "url": REDACTED}]},
      "hf_token": REDACTED, "client_secret": REDACTED, "tokenizer": "qwen",
      "num_tokens": 3, "api_keys": REDACTED, "keyword": "api",
  }
  assert config.judge.api_key == SECRET  # the input is not modified


def test_redact_removes_credentials_inside_innocent_strings(monkeypatch):
  monkeypatch.setenv("JUDGE_API_KEY", "abcdefgh-secret-value")
  config = ml_collections.ConfigDict({
      "judge": {"base_url": "https://user:hunter22@llm.example/v1", "model": "qwen"},
      "tools": {"search_url": "https://search.example/?q=x&key=sk-ABCDEFGHIJKLMNOP",
                "reader_url": "https://r.example/ask?k=abcdefgh-secret-value"},
      "rollout": {"system_prompt": "Think, then answer."}})
  redacted = metrics.redact(config)
  assert redacted["judge"] == {"base_url": f"https://{REDACTED}@llm.example/v1",
                               "model": "qwen"}
  tools = redacted["tools"]
  assert "sk-ABCDEFGHIJKLMNOP" not in tools["search_url"]
  assert tools["search_url"].startswith("https://search.example/?q=x&")
  assert tools["reader_url"] == f"https://r.example/ask?k={REDACTED}"
  assert redacted["rollout"] == {"system_prompt": "Think, then answer."}


def test_format_summary_is_one_compact_line():
  line = metrics.format_summary(12, {
      "train/loss": jnp.float32(0.314159), "train/grad_norm": 1.0712,
      "perf/step_time_s": 3.2149, "rollout/not_shown": 5.0})
  assert line == "step 12 | loss 0.3142 | grad_norm 1.071 | step_time_s 3.215"
  assert metrics.format_summary(3, {"eval/acc": 0.5}, keys=["eval/acc"]) == "step 3 | acc 0.5"


def test_progress_shows_step_of_total_and_an_eta_from_this_runs_steps():
  now = [100.0]
  progress = metrics.Progress(first_step=4, total=10, clock=lambda: now[0])  # resumed at 4
  now[0] = 130.0  # two steps (5 and 6) took 30 s: 15 s a step, 4 steps left
  line = progress.line(6, {"train/loss": 0.5})
  assert line == "step 6/10 | loss 0.5 | eta 1:00"
  now[0] = 190.0
  assert progress.line(10, {}) == "step 10/10 | eta 0:00"
  assert metrics.format_duration(3725.4) == "1:02:05" and metrics.format_duration(-3) == "0:00"


def test_only_process_zero_writes(tmp_path):
  logdir = os.path.join(str(tmp_path), "run")
  writer = metrics.MetricsWriter(logdir, process_index=1)
  assert not writer.active
  writer.hparams(_config())
  writer.scalars(0, {"train/loss": 1.0})
  with pytest.raises(ValueError, match="metric key"):  # same validation as on process 0
    writer.scalars(0, {"loss": 1.0})
  writer.close()
  assert not os.path.exists(logdir)


def test_write_after_close_is_an_error(tmp_path):
  writer = metrics.MetricsWriter(str(tmp_path))
  writer.close()
  with pytest.raises(RuntimeError, match="closed"):
    writer.scalars(1, {"train/loss": 1.0})


# "false": TensorBoard's Python reader; "auto": the default, its Rust data server if present.
@pytest.mark.parametrize("load_fast", ["false", "auto"])
def test_tensorboard_server_serves_the_tags(tmp_path, load_fast):
  _write_run(str(tmp_path), np.random.default_rng(1))
  port = free_port()
  proc = subprocess.Popen(
      [sys.executable, "-m", "tensorboard.main", "--logdir", str(tmp_path),
       "--host", "127.0.0.1", "--port", str(port), "--load_fast", load_fast],
      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  base = f"http://127.0.0.1:{port}/data/plugin"
  try:
    deadline = time.monotonic() + 60
    scalars = {}
    while "." not in scalars:  # the run appears once the first logdir scan is done
      assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
      assert time.monotonic() < deadline, "tensorboard did not serve the run within 60 s"
      try:
        scalars = httpx.get(f"{base}/scalars/tags", timeout=5).json()
      except httpx.TransportError:
        pass
      time.sleep(0.5)
    assert sorted(scalars["."]) == ["perf/step_time_s", "train/loss"]
    text = httpx.get(f"{base}/text/tags", timeout=5).json()
    assert sorted(text["."]) == sorted(["rollout/sample", metrics.CONFIG_TEXT_TAG])
    images = httpx.get(f"{base}/images/tags", timeout=5).json()
    assert list(images["."]) == ["eval/attention"]
    experiment = httpx.post(f"{base}/hparams/experiment", json={"experimentName": ""},
                            timeout=5).json()
    names = {info["name"] for info in experiment["hparamInfos"]}
    assert {"optim.learning_rate", "judge.api_key", "model.preset"} <= names
    values = httpx.get(f"{base}/scalars/scalars",
                       params={"run": ".", "tag": "train/loss"}, timeout=5).json()
    assert [row[1] for row in values] == [0, 1, 2, 3]
    assert math.isclose(values[0][2], 1.0 / 3.0, rel_tol=1e-7)
  finally:
    proc.terminate()
    try:
      proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
      proc.kill()
      proc.wait()


def test_closing_summary_names_both_ends_and_every_output_then_ends_on_heldout(tmp_path):
  from carr_jax.evaluation import heldout
  workdir = str(tmp_path)
  for sub in ("tb", "checkpoints", "hf"):
    os.makedirs(os.path.join(workdir, sub))
  heldout.save(workdir, 0, np.array([0.0, 1.0]), 2, {})
  heldout.save(workdir, 4, np.array([1.0, 1.0]), 2, {})
  lines = heldout.closing_summary("trained", workdir, {"rollout/reward_mean": 0.5},
                                  {"rollout/reward_mean": 0.25, "rollout/pass_at_group": 0.75})
  assert lines[1].startswith("first step: reward_mean 0.2500 | outcome nan | pass@G 0.7500")
  assert lines[2].startswith("last step: reward_mean 0.5000")
  assert lines[3:6] == [f"tensorboard: {workdir}/tb", f"checkpoints: {workdir}/checkpoints",
                        f"hf_exports: {workdir}/hf"]
  assert lines[-1] == "heldout_accuracy start=0.5000 end=1.0000 n=2 samples=2"
  assert len(heldout.closing_summary("trained", workdir, {})) == len(lines) - 1  # no first


def test_closing_summary_agreement_of_a_run_that_cites_nothing_is_none():
  """The trainer logs answer_agrees_with_cited 0 when no answer cited a received page; the
  closing summary says none, not 0.0000 (which would read as every cited answer contradicted)."""
  from carr_jax.evaluation import heldout
  start = {"eval/answer_agrees_with_cited": 1.0, "eval/answers_citing_received": 12.0,
           "eval/tool_calls": 0.5}
  end = {"eval/answer_agrees_with_cited": 0.0, "eval/answers_citing_received": 0.0,
         "eval/tool_calls": 0.0}
  assert heldout.subset_lines(start, end) == [
      "held-out answers agreeing with the page they cite: 1.0000 -> none (no answer cited a "
      "received page)", "held-out tool calls per episode: 0.5000 -> 0.0000"]
  opened = heldout.subset_lines({"eval/tool_calls_open": 0.25}, {"eval/tool_calls_open": 1.0})
  assert opened == ["held-out open calls per episode: 0.2500 -> 1.0000"]


def test_pass_at_group_counts_groups_with_any_correct_episode():
  from carr_jax.rl import rewards
  from carr_jax.rl import step_stats
  outcome = np.array([[0, 0, 0, 0], [0, 1, 0, 0], [1, 1, 1, 1]], np.float64)  # [P, G]
  groups = rewards.compute_group_advantages(outcome, np.zeros_like(outcome),
                                            np.ones_like(outcome, bool))
  got = step_stats.reward_metrics(groups)
  assert got["rollout/pass_at_group"] == 2 / 3
  assert got["rollout/accuracy"] == 5 / 12


def test_unconnected_rate_counts_supported_rubrics_cut_off_from_the_answer():
  """Rubrics "link 417 continues under <E1>" and "<E1> is of the kind <E0>": the first
  supported alone is cut off from E0 whatever the judge's connectivity setting said."""
  from carr_jax.rl import step_stats
  from judge.breakdown import Breakdown, RubricScore

  def breakdown(first, second, said_connected=False):
    return Breakdown(rubrics=[
        RubricScore(0, "Link 417 continues under <E1>.", ["E1"], supported=first,
                    connected=said_connected),
        RubricScore(1, "<E1> is of the kind <E0>.", ["E1", "E0"], supported=second)])
  assert step_stats.has_unconnected_support(breakdown(True, False))
  assert step_stats.has_unconnected_support(breakdown(True, False, said_connected=True))
  assert not step_stats.has_unconnected_support(breakdown(True, True))
  assert not step_stats.has_unconnected_support(breakdown(False, True))
  assert not step_stats.has_unconnected_support(breakdown(False, False))
  got = step_stats.judge_metrics([breakdown(True, False), breakdown(True, True),
                                  breakdown(False, False), Breakdown()], 0.5)
  assert got["judge/unconnected_rate"] == 0.25


def test_sft_closing_summary_gives_the_loss_at_both_ends_and_the_outputs(tmp_path):
  from carr_jax import sft
  os.makedirs(tmp_path / "checkpoints")
  lines = sft.closing_summary([{"train/loss": 2.5}, {"train/loss": 0.75}], str(tmp_path))
  assert lines == ["sft: 2 steps run by this process",
                   "loss: first step 2.5000 -> last step 0.7500",
                   f"checkpoints: {tmp_path}/checkpoints"]
