"""The multi-host path on one machine: 2 JAX processes x 2 CPU devices (gloo collectives).

Process 0 alone holds the packed batch (as after its rollouts); `share_batch` broadcasts it,
each process derives the loss positions from it, `global_batch` assembles one global array
from each process's shards, and the jitted train step (logits at the loss slots, the
trainer's default) runs as one SPMD program over the 4 devices. Its loss, gradient norm and
a parameter checksum must equal the same step run by this single process on 4 devices.
"""
import json
import os
import socket
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from tests.test_train_step import make_batch, run_steps

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MESH = {"data": 2, "fsdp": 2}

WORKER = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, {repo!r})
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_default_matmul_precision", "highest")
    jax.distributed.initialize(coordinator_address="127.0.0.1:{port}", num_processes=2,
                               process_id={pid})
    import numpy as np
    from jax.experimental import multihost_utils
    from carr_jax import loss as loss_lib, sharding, train_step as ts
    from carr_jax.trainer import share_batch
    from tests.test_multihost import lead_batch, with_loss_positions
    from tests.test_train_step import CFG, SGD
    batch = share_batch(lead_batch() if jax.process_index() == 0 else None)
    batch = with_loss_positions(batch)  # every process, after the broadcast (Trainer.update)
    mesh = sharding.make_mesh({mesh!r})
    state, shardings = ts.create_train_state(CFG, SGD, mesh, seed=0)
    step_cfg = ts.StepConfig(micro_batches=2, loss_positions=True)
    step = ts.make_train_step(CFG, loss_lib.LossConfig(), step_cfg, SGD, mesh, shardings)
    state, metrics = step(state, batch)
    params = multihost_utils.process_allgather(state.params, tiled=True)
    metrics = multihost_utils.process_allgather(metrics, tiled=True)
    if jax.process_index() == 0:
      print("RESULT " + json.dumps({{"loss": float(metrics["loss"]),
          "grad_norm": float(metrics["grad_norm"]),
          "checksum": float(sum(np.abs(np.asarray(x)).sum() for x in
                               jax.tree.leaves(params)))}}), flush=True)
""")


def lead_batch():
  """The batch as process 0 holds it after packing (old log-probs are added afterwards)."""
  batch = make_batch()
  del batch["old_logprobs"]
  return batch


def with_loss_positions(batch):
  """What `Trainer.update` adds to the shared batch: old log-probs, loss positions."""
  from carr_jax import packing
  batch["old_logprobs"] = batch["rollout_logprobs"]
  batch["loss_index"], batch["loss_valid"] = packing.loss_positions(batch["loss_mask"] > 0, 8)
  return batch


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_equal_one():
  port = _free_port()
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  env.pop("XLA_FLAGS", None)
  procs = [subprocess.Popen([sys.executable, "-c", WORKER.format(repo=REPO, port=port, pid=pid,
                                                                 mesh=MESH)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for pid in (0, 1)]
  outs = [p.communicate(timeout=600) for p in procs]
  for p, (_, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  line = next(l for l in outs[0][0].splitlines() if l.startswith("RESULT "))
  multi = json.loads(line[len("RESULT "):])

  state, metrics = run_steps(MESH, 2, with_loss_positions(lead_batch()), loss_positions=True)
  single = jax.device_get(state)
  np.testing.assert_allclose(multi["loss"], metrics[0]["loss"], atol=1e-5, rtol=0)
  np.testing.assert_allclose(multi["grad_norm"], metrics[0]["grad_norm"], atol=1e-5, rtol=0)
  checksum = float(sum(np.abs(np.asarray(x)).sum() for x in jax.tree.leaves(single.params)))
  np.testing.assert_allclose(multi["checksum"], checksum, rtol=1e-6)
