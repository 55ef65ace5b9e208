"""The multi-host path on one machine: 2 JAX processes x 2 CPU devices (gloo collectives).

Each test runs one worker script in 2 processes and compares with this single process on 4
of its 8 devices:
- RL step: process 0 alone holds the packed batch (as after its rollouts); `share_batch`
  broadcasts it, each process derives the loss positions from it, `global_batch` assembles
  one global array from each process's shards, and the jitted train step (logits at the loss
  slots, the trainer's default) runs as one SPMD program over the 4 devices.
- SFT steps: every process packs the same batch (as every `SFTTrainer` does) and runs the
  step the RL trainer's builder makes (`train_step.make_step`) on host arrays.
- HF export during a run: after a train step, the checkpointer's save calls the trainer's
  export hook (`run_setup.hf_export_fn` -> `hf_io.save_hf`) on every process, with the params
  split over both processes (fsdp 4). The exported safetensors must equal the single-process
  export of the same params, and the gathered params themselves.
Loss, gradient norm and a parameter checksum must equal the single-process run.
"""
import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import optax
import pytest
from safetensors.numpy import load_file

from rollout.engines.sglang_launcher import free_port
from tests.carr_jax.test_train_step import make_batch, run_steps

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MESH = {"data": 2, "fsdp": 2}
TIMEOUT_S = 600  # a process that waits on a collective its peer never joins fails the test

# argv: coordinator port, process id, output directory, mesh as JSON, the worker's argument
# as JSON; the repo on PYTHONPATH.
PRELUDE = textwrap.dedent("""
    import json, os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_default_matmul_precision", "highest")
    jax.distributed.initialize(coordinator_address="127.0.0.1:" + sys.argv[1], num_processes=2,
                               process_id=int(sys.argv[2]))
    import numpy as np
    from jax.experimental import multihost_utils
    from carr_jax.model import sharding
    from tests.carr_jax.test_multihost import checksum
    OUT = sys.argv[3]
    mesh = sharding.make_mesh(json.loads(sys.argv[4]))

    def report(state, metrics):
      params = multihost_utils.process_allgather(state.params, tiled=True)
      metrics = multihost_utils.process_allgather(metrics, tiled=True)
      if jax.process_index() == 0:
        print("RESULT " + json.dumps({"loss": float(metrics["loss"]),
                                      "grad_norm": float(metrics["grad_norm"]),
                                      "checksum": checksum(params)}), flush=True)
""")

RL_WORKER = """
    from carr_jax.rl import loss as loss_lib
    from carr_jax.rl import train_step as ts
    from carr_jax.jobs.rl_train import batch_keys, share_batch
    from carr_jax.rl import packing
    from tests.carr_jax.test_multihost import lead_batch, with_loss_positions
    from tests.carr_jax.test_train_step import CFG, SGD
    skip = json.loads(sys.argv[5])  # batch.skip_zero_gradient: the lead's loss_total too
    keys = batch_keys(packing.PackingConfig(), ts.StepConfig(skip_zero_gradient=skip))
    batch = share_batch(lead_batch(skip) if jax.process_index() == 0 else None, keys)
    batch = with_loss_positions(batch)  # every process, after the broadcast (Trainer.update)
    state, shardings = ts.create_train_state(CFG, SGD, mesh, seed=0)
    step_cfg = ts.StepConfig(micro_batches=2, loss_positions=True, skip_zero_gradient=skip)
    step = ts.make_train_step(CFG, loss_lib.LossConfig(), step_cfg, SGD, mesh, shardings)
    report(*step(state, batch))
"""

ROUTES_WORKER = """
    from carr_jax.jobs.rl_train import batch_keys, share_batch
    from tests.carr_jax.test_multihost import replay_case, replay_step
    cfg, batch, pack_cfg, step_cfg = replay_case()
    batch = share_batch(batch if jax.process_index() == 0 else None, batch_keys(pack_cfg, step_cfg))
    report(*replay_step(mesh, batch))
"""

SFT_WORKER = """
    from tests.carr_jax.test_multihost import sft_run
    report(*sft_run(mesh))
"""

EXPORT_WORKER = """
    from carr_jax.runs import checkpointing as ckpt_lib
    from carr_jax.rl import loss as loss_lib
    from carr_jax.rl import train_step as ts
    from carr_jax.jobs.run_setup import hf_export_fn
    from tests.carr_jax.test_train_step import CFG, SGD, make_batch
    state, shardings = ts.create_train_state(CFG, SGD, mesh, seed=0)
    step = ts.make_train_step(CFG, loss_lib.LossConfig(), ts.StepConfig(), SGD, mesh, shardings)
    state, _ = step(state, make_batch())
    with ckpt_lib.TrainCheckpointer(os.path.join(OUT, "checkpoints"), save_every=1, keep=1,
                                    export_fn=hf_export_fn(1, CFG, OUT),
                                    export_params=lambda s: s.params) as checkpointer:
      assert checkpointer.save(1, state, data={}, meta={})
    params = multihost_utils.process_allgather(state.params, tiled=True)
    if jax.process_index() == 0:
      np.savez(os.path.join(OUT, "params.npz"), *jax.tree.leaves(params))
      print("RESULT {}", flush=True)
"""


def lead_batch(skip: bool = False):
  """The batch as process 0 holds it after packing (old log-probs are added afterwards);
  with `skip`, a `loss_total` above its own loss tokens (groups left out of it)."""
  batch = make_batch()
  del batch["old_logprobs"]
  if skip:
    batch["loss_total"] = np.float32(batch["loss_mask"].sum() + 17)
  return batch


def with_loss_positions(batch):
  """What `Trainer.update` adds to the shared batch: old log-probs, loss positions."""
  from carr_jax.rl import packing
  batch["old_logprobs"] = batch["rollout_logprobs"]
  batch["loss_index"], batch["loss_valid"] = packing.loss_positions(batch["loss_mask"] > 0, 8)
  return batch


def replay_case():
  """(tiny_moe, a batch of 4 rows with routes to replay [4, 12, layers, k] (k distinct random
  experts per slot), its packing and step configs) for the routing-replay step."""
  from carr_jax.model.config import get_preset
  from carr_jax.rl import packing
  from carr_jax.rl import train_step as ts
  cfg = get_preset("tiny_moe", vocab_size=256)
  rng = np.random.default_rng(2)
  tokens = rng.integers(0, cfg.vocab_size, (4, 12)).astype(np.int32)
  routes = np.argsort(rng.random((4, 12, cfg.num_layers, cfg.num_experts)), axis=-1)
  batch = {"tokens": tokens, "positions": np.broadcast_to(np.arange(12), (4, 12)).copy(),
           "segment_ids": np.ones((4, 12), np.int32), "targets": np.roll(tokens, -1, 1),
           "loss_mask": (np.arange(12)[None] >= 4).repeat(4, 0).astype(np.float32),
           "advantages": np.repeat(rng.standard_normal((4, 1)), 12, 1).astype(np.float32),
           "rollout_logprobs": np.zeros((4, 12), np.float32),
           "routes": routes[..., :cfg.num_experts_per_tok].astype(np.int32)}
  pack_cfg = packing.PackingConfig(routes=(cfg.num_layers, cfg.num_experts_per_tok))
  return cfg, batch, pack_cfg, ts.StepConfig(on_policy=True, routing_replay=True)


def replay_step(mesh, batch):
  """One SGD step of `replay_case`'s model on `batch`: (state, metrics)."""
  from carr_jax.rl import loss as loss_lib
  from carr_jax.rl import train_step as ts
  cfg, _, _, step_cfg = replay_case()
  tx = optax.sgd(1.0)
  state, shardings = ts.create_train_state(cfg, tx, mesh, seed=0)
  step = ts.make_train_step(cfg, loss_lib.LossConfig(), step_cfg, tx, mesh, shardings)
  return step(state, batch)


def sft_run(mesh, steps=2):
  """Two SFT steps (SGD 1, 2 micro-batches) on sft_batch.py's packed batch of 8 rows:
  (state, metrics of the last step)."""
  from carr_jax.coldstart import step as sft_step
  from carr_jax.rl import train_step as ts
  from tests.carr_jax.sft_batch import CFG, packed_batch
  tx = optax.sgd(1.0)
  _, batch = packed_batch(rows=8)
  state, shardings = ts.create_train_state(CFG, tx, mesh, seed=0)
  step = sft_step.make_sft_step(
      CFG, sft_step.SFTStepConfig(micro_batches=2, logprob_chunk=8), tx, mesh, shardings)
  for _ in range(steps):
    state, metrics = step(state, batch)
  return state, metrics


def run_two_processes(worker: str, out_dir, mesh=MESH, arg=None) -> dict:
  """Runs PRELUDE + worker in processes 0 and 1 (`arg` as JSON in sys.argv[5]); process 0's
  RESULT line, parsed."""
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO}
  env.pop("XLA_FLAGS", None)
  script, port = PRELUDE + textwrap.dedent(worker), str(free_port())
  procs = [subprocess.Popen([sys.executable, "-c", script, port, str(pid), str(out_dir),
                             json.dumps(mesh), json.dumps(arg)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
           for pid in (0, 1)]
  try:
    outs = [p.communicate(timeout=TIMEOUT_S) for p in procs]
  except subprocess.TimeoutExpired:
    for p in procs:
      p.kill()
    pytest.fail(f"the 2-process run did not finish in {TIMEOUT_S} s (a hung collective?)")
  for p, (_, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  line = next(l for l in outs[0][0].splitlines() if l.startswith("RESULT "))
  return json.loads(line[len("RESULT "):])


def checksum(tree) -> float:
  return float(sum(np.abs(np.asarray(x)).sum() for x in jax.tree.leaves(tree)))


def assert_same_step(multi: dict, metrics: dict, params) -> None:
  np.testing.assert_allclose(multi["loss"], metrics["loss"], atol=1e-5, rtol=0)
  np.testing.assert_allclose(multi["grad_norm"], metrics["grad_norm"], atol=1e-5, rtol=0)
  np.testing.assert_allclose(multi["checksum"], checksum(params), rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("skip", [False, True])
def test_two_processes_equal_one(tmp_path, skip):
  multi = run_two_processes(RL_WORKER, tmp_path, arg=skip)
  state, metrics = run_steps(MESH, 2, with_loss_positions(lead_batch(skip)), loss_positions=True,
                             skip_zero_gradient=skip)
  assert_same_step(multi, metrics[0], jax.device_get(state).params)


@pytest.mark.slow
def test_replayed_routes_reach_every_process(tmp_path):
  """Routing replay on 2 processes: the lead's routes are broadcast with the batch (they were
  not before 2026-11-29: the other process stepped without them) and the step equals one
  process's on the same mesh."""
  multi = run_two_processes(ROUTES_WORKER, tmp_path)
  from carr_jax.model import sharding
  _, batch, _, _ = replay_case()
  state, metrics = replay_step(sharding.make_mesh(MESH, jax.devices()[:4]), batch)
  assert_same_step(multi, jax.device_get(metrics), jax.device_get(state.params))


@pytest.mark.slow
def test_sft_steps_two_processes_equal_one(tmp_path):
  """Host batches into a step sharded over 2 processes (was: "Passing non-trivial shardings
  for numpy inputs is not allowed")."""
  multi = run_two_processes(SFT_WORKER, tmp_path)
  from carr_jax.model import sharding
  state, metrics = sft_run(sharding.make_mesh(MESH, jax.devices()[:4]))
  assert_same_step(multi, jax.device_get(metrics), jax.device_get(state.params))


@pytest.mark.slow
def test_hf_export_during_a_two_process_run(tmp_path):
  """The checkpointer's HF export (hf_export_every) with params split over 2 processes: it
  used to run on process 0 only and hang in save_hf's final collective."""
  from carr_jax.model import hf_io
  from carr_jax.model import qwen3 as model_lib
  from tests.carr_jax.test_train_step import CFG
  run_two_processes(EXPORT_WORKER, tmp_path, mesh={"fsdp": 4})
  exported = tmp_path / "hf" / "step_1"
  with np.load(tmp_path / "params.npz") as f:
    leaves = [f[f"arr_{i}"] for i in range(len(f.files))]
  params = jax.tree.unflatten(jax.tree.structure(model_lib.abstract_params(CFG)), leaves)
  hf_io.save_hf(params, CFG, str(tmp_path / "single"))
  files = sorted(p.name for p in (tmp_path / "single").iterdir())
  assert sorted(p.name for p in exported.iterdir()) == files
  for name in files:
    if name.endswith(".safetensors"):
      got, want = load_file(exported / name), load_file(tmp_path / "single" / name)
      assert sorted(got) == sorted(want)
      for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    else:
      assert (exported / name).read_text() == (tmp_path / "single" / name).read_text()
  loaded = hf_io.load_hf_params(str(exported), CFG)
  for got, want in zip(jax.tree.leaves(loaded), leaves):
    np.testing.assert_array_equal(np.asarray(got), want)
