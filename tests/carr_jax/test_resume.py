"""Kill-and-resume of the train step: step n+1 after a restore equals the uninterrupted run.

A child process trains on a 2x2x2 fake-CPU mesh, checkpoints every step and SIGKILLs itself
right after step n is on disk. This process restores step n into the sharded layout, takes
step n+1, and compares with an uninterrupted run of n+1 steps: bit-identical parameters and
optimizer state.
"""
import os
import signal
import subprocess
import sys
import textwrap

import jax
import numpy as np

from carr_jax.model import sharding
from carr_jax.model.config import get_preset
from carr_jax.rl import loss as loss_lib
from carr_jax.rl import optim
from carr_jax.rl import train_step as ts
from carr_jax.runs import checkpointing as ckpt_lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CFG = get_preset("tiny_dense", vocab_size=256)
MESH = {"data": 2, "fsdp": 2, "tensor": 2}


def batch_for(step: int) -> dict:
  rng = np.random.default_rng(step)
  tokens = rng.integers(0, 256, (8, 16)).astype(np.int32)
  mask = (rng.random((8, 16)) < 0.6).astype(np.float32)
  mask[:, -1] = 0
  old = (-rng.random((8, 16)) * 4).astype(np.float32)
  return {"tokens": tokens, "positions": np.tile(np.arange(16), (8, 1)).astype(np.int32),
          "segment_ids": np.ones_like(tokens), "targets": np.roll(tokens, -1, axis=1),
          "loss_mask": mask, "advantages": np.repeat(rng.standard_normal((8, 1)), 16, 1)
          .astype(np.float32), "old_logprobs": old, "rollout_logprobs": old}


def setup():
  mesh = sharding.make_mesh(MESH)
  tx = optim.make_optimizer(optim.OptimConfig(learning_rate=1e-3))
  state, shardings = ts.create_train_state(CFG, tx, mesh, seed=0)
  step = ts.make_train_step(CFG, loss_lib.LossConfig(), ts.StepConfig(micro_batches=2), tx,
                            mesh, shardings)
  return mesh, tx, state, shardings, step


CHILD = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {repo!r})
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax
    jax.config.update("jax_default_matmul_precision", "highest")
    from tests.carr_jax.test_resume import setup, batch_for
    from carr_jax.runs import checkpointing as ckpt_lib
    mesh, tx, state, shardings, step = setup()
    ckpt = ckpt_lib.TrainCheckpointer({ckpt!r}, save_every=1, keep=5,
                                      export_params=lambda s: s.params)
    for n in range(1, 10):
      state, _ = step(state, batch_for(n))
      ckpt.save(n, state, data={{"next": n + 1}}, meta={{}})
      if n == {kill_after}:
        ckpt.wait_until_finished()
        os.kill(os.getpid(), signal.SIGKILL)
""")


def test_resume_after_kill_is_bit_identical(tmp_path):
  n = 2
  ckpt_dir = str(tmp_path / "ckpt")
  script = CHILD.format(repo=REPO, ckpt=ckpt_dir, kill_after=n)
  proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                        env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=600)
  assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]

  mesh, tx, fresh, shardings, step = setup()
  abstract, _ = ts.abstract_train_state(CFG, tx, mesh)
  restored = ckpt_lib.TrainCheckpointer(ckpt_dir, save_every=1, keep=5).restore(
      ckpt_lib.with_shardings(abstract, shardings))
  assert restored.step == n and restored.data == {"next": n + 1}
  resumed, _ = step(restored.state, batch_for(n + 1))

  state = fresh
  for k in range(1, n + 2):
    state, _ = step(state, batch_for(k))
  assert int(resumed.step) == int(state.step) == n + 1
  for a, b in zip(jax.tree.leaves(jax.device_get(resumed)), jax.tree.leaves(jax.device_get(state))):
    assert np.array_equal(a, b)
