"""Tests for the conversion CLI (carr_jax.model.convert): HF <-> ours round trips and --check.

The --check runs are real subprocesses (`python -m carr_jax.convert`, JAX_PLATFORMS=cpu)
against tiny random transformers checkpoints built in tmp dirs. Run:
  .venv/bin/python -m pytest tests/carr_jax/test_convert.py -x -q
"""
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
import torch

from carr_jax import convert as convert_cli
from carr_jax.model import convert
from carr_jax.model import qwen3 as model
from carr_jax.model import sharding
from tests.carr_jax.test_hf_io import assert_same_tensors, make_hf_dir, read_all

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_parse_size_and_mesh():
  assert convert.parse_size("5GB") == 5 * 10**9
  assert convert.parse_size("20kb") == 20_000
  assert convert.parse_size("1234") == 1234
  assert convert.parse_size("1.5MB") == 1_500_000
  with pytest.raises(ValueError, match="max-shard-size"):
    convert.parse_size("lots")
  assert convert.parse_mesh("data=2, fsdp=-1") == {"data": 2, "fsdp": -1}
  with pytest.raises(ValueError, match="--mesh"):
    convert.parse_mesh("fsdp")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("kind,tied", [("dense", True), ("dense", False), ("moe", False)],
                         ids=["dense_tied", "dense_untied", "moe"])
def test_hf_to_ours_to_hf_is_bit_identical(tmp_path, kind, tied, dtype):
  src, _ = make_hf_dir(tmp_path / "hf", kind, tied=tied, dtype=dtype)
  ours, back = str(tmp_path / "ours"), str(tmp_path / "back")
  assert convert_cli.main(["--hf-to-ours", "--hf", src, "--out", ours]) == 0
  stored = convert.read_ours_config(ours)
  assert stored.param_dtype == str(dtype).removeprefix("torch.")  # the checkpoint's own dtype
  assert stored.tie_word_embeddings == tied and stored.is_moe == (kind == "moe")
  assert convert_cli.main(["--ours-to-hf", "--ckpt", ours, "--out", back]) == 0
  assert_same_tensors(src, back)
  with open(os.path.join(back, "config.json")) as f:
    config = json.load(f)
  assert config["eos_token_id"] == 7 and config["bos_token_id"] == 5  # kept from the source
  assert os.path.exists(os.path.join(back, "tokenizer.json"))


def test_bf16_source_through_fp32_ours_and_back(tmp_path):
  src, _ = make_hf_dir(tmp_path / "hf", "moe", dtype=torch.bfloat16)
  ours, back = str(tmp_path / "ours"), str(tmp_path / "back")
  convert_cli.main(["--hf-to-ours", "--hf", src, "--out", ours, "--param-dtype", "float32"])
  cfg, params = convert.load_ours(ours)
  assert cfg.param_dtype == "float32"
  assert params["layers"]["moe"]["gate_proj"].dtype == np.float32
  convert_cli.main(["--ours-to-hf", "--ckpt", ours, "--out", back, "--dtype", "bfloat16",
                "--max-shard-size", "20KB"])
  assert os.path.exists(os.path.join(back, "model.safetensors.index.json"))
  assert_same_tensors(src, back)


def test_load_ours_onto_a_mesh(tmp_path):
  src, _ = make_hf_dir(tmp_path / "hf", "moe")
  ours = str(tmp_path / "ours")
  convert.hf_to_ours(src, ours, mesh_shape={"fsdp": 2, "expert": 2, "tensor": 2})
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  cfg, params = convert.load_ours(ours, lambda a: sharding.param_shardings(a, mesh))
  expected = sharding.param_shardings(model.abstract_params(cfg), mesh)
  for (path, leaf), want in zip(jax.tree_util.tree_leaves_with_path(params),
                                jax.tree.leaves(expected)):
    assert leaf.sharding == want, path
  raw = read_all(src)
  np.testing.assert_array_equal(np.asarray(params["layers"]["moe"]["down_proj"][0, 2]),
                                raw["model.layers.0.mlp.experts.2.down_proj.weight"].T)


def test_incomplete_or_existing_dirs_are_errors(tmp_path):
  src, _ = make_hf_dir(tmp_path / "hf", "dense")
  (tmp_path / "half").mkdir()
  with pytest.raises(FileNotFoundError, match="no model_config.json"):
    convert_cli.main(["--ours-to-hf", "--ckpt", str(tmp_path / "half"),
                  "--out", str(tmp_path / "x")])
  assert not (tmp_path / "x").exists()
  ours = str(tmp_path / "ours")
  convert_cli.main(["--hf-to-ours", "--hf", src, "--out", ours])
  with pytest.raises(FileExistsError, match="--overwrite"):
    convert_cli.main(["--hf-to-ours", "--hf", src, "--out", ours])
  assert convert_cli.main(["--hf-to-ours", "--hf", src, "--out", ours, "--overwrite"]) == 0
  assert convert_cli.main(["--ours-to-hf", "--ckpt", ours]) == 2  # usage error: no --out


def _run_check(hf_dir: str, *extra: str):
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO, "XLA_FLAGS": ""}
  proc = subprocess.run([sys.executable, "-m", "carr_jax.convert", "--check", "--hf", hf_dir,
                         *extra], cwd=REPO, env=env, capture_output=True, text=True,
                        timeout=300)
  last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
  assert last.startswith("max_abs_logit_diff="), proc.stdout + proc.stderr
  return proc.returncode, float(last.split("=", 1)[1])


@pytest.mark.slow  # a fresh interpreter imports jax, torch and transformers: ~10-35 s
@pytest.mark.parametrize("kind,tied", [("dense", True), ("moe", False)])
def test_check_cli_matches_transformers(tmp_path, kind, tied):
  src, _ = make_hf_dir(tmp_path / "hf", kind, tied=tied, dtype=torch.bfloat16)
  returncode, diff = _run_check(src)
  assert diff <= 1e-4
  assert returncode == 0


def test_check_exit_code_follows_atol(tmp_path, capsys):
  src, _ = make_hf_dir(tmp_path / "hf", "dense")
  returncode = convert_cli.main(["--check", "--hf", src, "--atol", "0", "--seq-len", "8"])
  last = capsys.readouterr().out.strip().splitlines()[-1]
  diff = float(last.removeprefix("max_abs_logit_diff="))
  assert diff <= 1e-4
  assert returncode == (1 if diff > 0 else 0)
