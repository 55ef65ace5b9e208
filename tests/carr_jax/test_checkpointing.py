"""Tests for carr_jax/runs/checkpointing.py on 8 fake CPU devices (a 2x2x2 mesh).

Run: .venv/bin/python -m pytest tests/carr_jax/test_checkpointing.py -x -q
`make_state` is also imported by the kill-and-resume child process, so both sides build
the same expected values from a seed.
"""
import os
import signal
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from carr_common.redaction import REDACTED
from carr_jax.runs import checkpointing as ck

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SECRET = "sk-checkpoint-test-0123456789"


def make_mesh():
  return Mesh(np.asarray(jax.devices()[:8]).reshape(2, 2, 2), ("data", "fsdp", "tensor"))


def make_state(mesh, seed):
  """A train-state-like pytree: sharded params, AdamW state after one update, step, rng."""
  rng = np.random.default_rng(seed)
  specs = {"embed": P("fsdp", "tensor"), "layers": {"w": P(None, "fsdp", "tensor"),
                                                    "scale": P(None, "tensor")},
           "bias": P()}
  shapes = {"embed": (16, 8), "layers": {"w": (2, 8, 4), "scale": (2, 8)}, "bias": (4,)}
  param_shardings = jax.tree.map(lambda s: NamedSharding(mesh, s), specs)
  params = jax.tree.map(
      lambda shape, sharding: jax.device_put(
          rng.standard_normal(shape).astype(np.float32), sharding),
      shapes, param_shardings, is_leaf=lambda x: isinstance(x, tuple))
  tx = optax.adamw(1e-3, weight_decay=0.1)
  grads = jax.tree.map(lambda p: 0.5 * p + 1.0, params)
  _, opt_state = tx.update(grads, tx.init(params), params)
  replicated = NamedSharding(mesh, P())
  opt_shardings = optax.tree_map_params(
      tx, lambda _, sharding: sharding, opt_state, param_shardings,
      transform_non_params=lambda _: replicated)
  return {"params": params, "opt_state": jax.device_put(opt_state, opt_shardings),
          "step": jax.device_put(jnp.int32(seed), replicated),
          "rng": jax.device_put(jax.random.key(seed), replicated)}


def _host(tree):
  """Leaves as NumPy (typed PRNG keys as their uint32 key data)."""
  def leaf(x):
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
      x = jax.random.key_data(x)
    return np.asarray(x)
  return jax.tree.map(leaf, tree)


def assert_bit_identical(restored, expected):
  assert jax.tree.structure(restored) == jax.tree.structure(expected)
  for (path, got), want in zip(jax.tree_util.tree_leaves_with_path(restored),
                               jax.tree.leaves(expected)):
    assert got.dtype == want.dtype, jax.tree_util.keystr(path)
    assert got.sharding == want.sharding, jax.tree_util.keystr(path)
  for (path, got), want in zip(jax.tree_util.tree_leaves_with_path(_host(restored)),
                               jax.tree.leaves(_host(expected))):
    assert np.array_equal(got, want), jax.tree_util.keystr(path)


def abstract_of(state):
  shardings = jax.tree.map(lambda x: x.sharding, state)
  return ck.with_shardings(jax.eval_shape(lambda: state), shardings)


@pytest.fixture(scope="module")
def mesh():
  return make_mesh()


def test_sharded_state_round_trip_bit_identical(tmp_path, mesh):
  state = make_state(mesh, seed=10)
  config = ml_collections.ConfigDict({"judge": {"api_key": SECRET, "model": "m"}, "lr": 1e-6})
  meta = {"config": config, "weight_version": "10"}
  with ck.TrainCheckpointer(str(tmp_path), save_every=5, keep=2) as ckpt:
    data = {"cursor": np.int64(40), "epoch": jnp.int32(1), "token_offset": 7,
            "seen": np.arange(3)}
    assert ckpt.save(10, state, data=data, meta=meta)
  fresh = ck.TrainCheckpointer(str(tmp_path), save_every=5, keep=2)
  assert fresh.latest_step() == 10
  restored = fresh.restore(abstract_of(state))
  fresh.close()
  assert restored.step == 10
  assert_bit_identical(restored.state, state)
  assert restored.state["params"]["embed"].sharding.spec == P("fsdp", "tensor")
  assert restored.data == {"cursor": 40, "epoch": 1, "token_offset": 7, "seen": [0, 1, 2]}
  assert type(restored.data["cursor"]) is int
  assert restored.meta == {"config": {"judge": {"api_key": REDACTED, "model": "m"},
                                      "lr": 1e-6},
                           "weight_version": "10"}
  for root, _, files in os.walk(tmp_path):
    for name in files:
      with open(os.path.join(root, name), "rb") as f:
        assert SECRET.encode() not in f.read(), name


def test_restore_lands_in_the_requested_layout(tmp_path, mesh):
  state = make_state(mesh, seed=3)
  with ck.TrainCheckpointer(str(tmp_path), save_every=1, keep=1) as ckpt:
    ckpt.save(3, state, data={}, meta={})
    # Another layout than the saved one: everything sharded over "data" on axis 0 or
    # replicated, so orbax must reshard while reading.
    target = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(
            mesh, P("data") if x.ndim and x.shape[0] % 2 == 0 else P())), state)
    restored = ckpt.restore(target, step=3).state
  for got, want in zip(jax.tree.leaves(_host(restored)), jax.tree.leaves(_host(state))):
    assert np.array_equal(got, want)
  for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(target)):
    assert got.sharding == want.sharding


def test_save_every_n_keeps_the_newest_k(tmp_path, mesh):
  state = make_state(mesh, seed=0)
  with ck.TrainCheckpointer(str(tmp_path), save_every=2, keep=2) as ckpt:
    saved = [s for s in range(1, 9) if ckpt.save(s, state, data={"cursor": s}, meta={})]
    assert saved == [2, 4, 6, 8]
    ckpt.wait_until_finished()
    assert ckpt.all_steps() == [6, 8]
    assert ckpt.save(9, state, data={"cursor": 9}, meta={}, force=True)
  assert ck.finalized_steps(str(tmp_path)) == [8, 9]
  assert sorted(os.listdir(tmp_path)) == ["8", "9"]


def test_async_save_completes_before_close_returns(tmp_path, mesh):
  state = make_state(mesh, seed=4)
  ckpt = ck.TrainCheckpointer(str(tmp_path), save_every=1, keep=3, async_save=True)
  assert ckpt.save(4, state, data={"cursor": 4}, meta={})
  abstract = abstract_of(state)
  # The next train step donates the state; save has copied it off the devices already.
  for leaf in jax.tree.leaves(state):
    leaf.delete()
  ckpt.close()
  assert ck.finalized_steps(str(tmp_path)) == [4]
  with ck.TrainCheckpointer(str(tmp_path), save_every=1, keep=3) as again:
    assert_bit_identical(again.restore(abstract).state, make_state(mesh, seed=4))


def test_missing_steps_and_bad_targets_give_clear_errors(tmp_path, mesh):
  state = make_state(mesh, seed=2)
  with ck.TrainCheckpointer(str(tmp_path / "empty"), save_every=1, keep=1) as empty:
    assert empty.latest_step() is None
    with pytest.raises(ck.CheckpointNotFoundError, match="no checkpoint in .*empty"):
      empty.restore(abstract_of(state))
  with ck.TrainCheckpointer(str(tmp_path / "run"), save_every=1, keep=1) as ckpt:
    ckpt.save(2, state, data={}, meta={})
    with pytest.raises(ck.CheckpointNotFoundError,
                       match=r"no checkpoint for step 3 .*available steps: \[2\]"):
      ckpt.restore(abstract_of(state), step=3)
    unsharded = jax.eval_shape(lambda: state)
    with pytest.raises(ValueError, match=r"\['opt_state'\].*has no sharding"):
      ckpt.restore(unsharded)
    with pytest.raises(TypeError, match="'data' must be a dict"):
      ckpt.save(3, state, data=[1, 2], meta={})
  with pytest.raises(ValueError, match="save_every"):
    ck.TrainCheckpointer(str(tmp_path / "x"), save_every=0, keep=1)


def _config(init_dir="", hf_path=""):
  return {"init_dir": init_dir, "hf_path": hf_path}


def test_resolve_init_source_decision_table(tmp_path, mesh):
  other_run = str(tmp_path / "sft" / "checkpoints")
  with ck.TrainCheckpointer(other_run, save_every=1, keep=1) as ckpt:
    ckpt.save(5, make_state(mesh, seed=5), data={}, meta={})
  work = str(tmp_path / "work")
  hf_dir = str(tmp_path / "hf")
  table = [
      (_config(), ck.InitSource.RANDOM),
      (_config(hf_path=hf_dir), ck.InitSource.HF_WEIGHTS),
      (_config(init_dir=other_run, hf_path=hf_dir), ck.InitSource.INIT_CHECKPOINT),
      (_config(init_dir=os.path.join(other_run, "5")), ck.InitSource.INIT_CHECKPOINT),
  ]
  for config, expected in table:
    assert ck.resolve_init_source(work, **config) == expected, config
  with pytest.raises(ck.CheckpointNotFoundError, match="checkpoint.init_dir=.*nowhere"):
    ck.resolve_init_source(work, **_config(init_dir=str(tmp_path / "nowhere")))
  # A write cut short leaves an orbax temporary directory: that is no checkpoint.
  os.makedirs(os.path.join(ck.checkpoint_dir(work), "7.orbax-checkpoint-tmp-1234", "state"))
  assert ck.resolve_init_source(work, **_config(hf_path=hf_dir)) == ck.InitSource.HF_WEIGHTS
  with ck.TrainCheckpointer(ck.checkpoint_dir(work), save_every=1, keep=1) as ckpt:
    ckpt.save(1, make_state(mesh, seed=1), data={}, meta={})
  for config in (_config(), _config(init_dir=other_run, hf_path=hf_dir)):
    assert ck.resolve_init_source(work, **config) == ck.InitSource.WORKDIR_CHECKPOINT


def test_restore_params_takes_only_params_from_another_run(tmp_path, mesh):
  state = make_state(mesh, seed=6)
  root = str(tmp_path / "ckpts")
  with ck.TrainCheckpointer(root, save_every=1, keep=2) as ckpt:
    ckpt.save(5, make_state(mesh, seed=5), data={}, meta={})
    ckpt.save(6, state, data={}, meta={})
  abstract_params = abstract_of(state["params"])
  assert_bit_identical(ck.restore_params(root, abstract_params), state["params"])
  from_step_dir = ck.restore_params(os.path.join(root, "5"), abstract_params)
  assert_bit_identical(from_step_dir, make_state(mesh, seed=5)["params"])
  with pytest.raises(ck.CheckpointNotFoundError, match=r"step 4 .*\[5, 6\]"):
    ck.restore_params(root, abstract_params, step=4)


def test_export_hook_gets_the_sharded_params_at_each_save(tmp_path, mesh):
  """The hook runs on every process with the state's own arrays (the export gathers them;
  tests/carr_jax/test_multihost.py runs it over 2 processes)."""
  state = make_state(mesh, seed=8)
  calls = []
  with ck.TrainCheckpointer(str(tmp_path), save_every=2, keep=1,
                            export_fn=lambda step, params: calls.append((step, params))) as c:
    for step in (1, 2, 3):
      c.save(step, state, data={}, meta={})
  assert [step for step, _ in calls] == [2]
  exported = calls[0][1]
  for got, want in zip(jax.tree.leaves(exported), jax.tree.leaves(state["params"])):
    assert got is want


_CHILD = textwrap.dedent("""
    import os, signal, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    os.environ["JAX_PLATFORMS"] = "cpu"
    from carr_jax.runs import checkpointing as ck
    from tests.carr_jax.test_checkpointing import make_mesh, make_state
    mesh = make_mesh()
    ckpt = ck.TrainCheckpointer(sys.argv[1], save_every=1, keep=3)
    for step in (1, 2):
      ckpt.save(step, make_state(mesh, step), data={"cursor": 10 * step}, meta={})
    ckpt.wait_until_finished()
    ckpt.save(3, make_state(mesh, 3), data={"cursor": 30}, meta={})  # still being written
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_checkpoint_survives_a_killed_process(tmp_path, mesh):
  directory = str(tmp_path / "ckpts")
  env = dict(os.environ, PYTHONPATH=REPO)
  child = subprocess.run([sys.executable, "-c", _CHILD, directory], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
  assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]
  with ck.TrainCheckpointer(directory, save_every=1, keep=3) as ckpt:
    latest = ckpt.latest_step()
    assert latest in (2, 3)  # step 3 counts only if its write finished before the kill
    assert ckpt.all_steps()[:2] == [1, 2]
    expected = make_state(mesh, latest)
    restored = ckpt.restore(abstract_of(expected))
    assert restored.step == latest and restored.data == {"cursor": 10 * latest}
    assert_bit_identical(restored.state, expected)
    assert_bit_identical(ckpt.restore(abstract_of(expected), step=1).state,
                         make_state(mesh, 1))
    # The resumed run goes on saving past the interrupted step.
    assert ckpt.save(latest + 1, make_state(mesh, latest + 1), data={}, meta={})
  assert ck.finalized_steps(directory)[-1] == latest + 1
