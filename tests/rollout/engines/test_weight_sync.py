"""The trainer's weight sync (rollout/engines/weight_sync.py) against recording engines.

In memory (the in-process engine): `start` leaves the engine as built, `push` hands it the
params. From disk (SGLang): every version is exported as an HF checkpoint under the export
directory and loaded by the engine; the export it replaces is deleted, one it did not write is
never touched. Run: python -m pytest tests/rollout/engines/test_weight_sync.py -q
"""
from __future__ import annotations

import asyncio
import os

import jax
import pytest

from carr_jax.model import hf_io
from carr_jax.model import qwen3 as model_lib
from carr_jax.model.config import get_preset
from rollout.engines.weight_sync import DiskSync, InMemorySync, weight_sync

CFG = get_preset("tiny_dense", vocab_size=256)


def export(params, path):
  hf_io.save_hf(params, CFG, path, overwrite=True)


class RecordingEngine:
  """Records the weight updates it is asked for."""

  def __init__(self):
    self.calls = []

  async def update_weights(self, params, weight_version):
    self.calls.append(("memory", params, weight_version))

  async def update_weights_from_disk(self, model_path, weight_version):
    assert os.path.exists(os.path.join(model_path, "config.json"))  # loadable when asked
    self.calls.append(("disk", model_path, weight_version))


@pytest.fixture(scope="module")
def params():
  return model_lib.init_params(CFG, jax.random.key(0))


def test_in_memory_sync_pushes_the_params_and_starts_as_built(params):
  engine = RecordingEngine()
  sync = weight_sync("jax", engine, export=export, export_dir="unused", lead=True)
  assert isinstance(sync, InMemorySync)
  asyncio.run(sync.start(params, "0"))
  assert engine.calls == []
  asyncio.run(sync.push(params, "1"))
  assert engine.calls == [("memory", params, "1")]


def test_disk_sync_exports_each_version_and_deletes_the_one_it_replaced(params, tmp_path):
  engine = RecordingEngine()
  sync = weight_sync("sglang", engine, export=export,
                     export_dir=str(tmp_path / "sync"), lead=True)
  assert isinstance(sync, DiskSync)
  asyncio.run(sync.start(params, "3"))  # a resumed run: the servers load step 3 first
  asyncio.run(sync.push(params, "4"))
  v3, v4 = str(tmp_path / "sync" / "v3"), str(tmp_path / "sync" / "v4")
  assert engine.calls == [("disk", v3, "3"), ("disk", v4, "4")]
  assert sorted(os.listdir(tmp_path / "sync")) == ["v4"] and sync.served_export == v4
  _, loaded = hf_io.load_hf(v4)
  assert jax.tree.structure(loaded) == jax.tree.structure(params)


def test_disk_sync_off_the_lead_process_only_exports(params, tmp_path):
  engine = RecordingEngine()
  sync = weight_sync("sglang", engine, export=export, export_dir=str(tmp_path),
                     lead=False)
  asyncio.run(sync.push(params, "1"))
  assert engine.calls == [] and sync.served_export is None


def test_an_unknown_engine_kind_is_refused():
  with pytest.raises(ValueError, match="'vllm'"):
    weight_sync("vllm", RecordingEngine(), export=export, export_dir="x", lead=True)
