"""carr_jax.model.hf_io against tiny random transformers checkpoints.

Checkpoints are built here with transformers (Qwen3 / Qwen3-MoE, random non-ones norm
weights) and `save_pretrained`; nothing is downloaded. Run:
  .venv/bin/python -m pytest tests/carr_jax/test_hf_io.py -x -q
"""
import asyncio
import json
import os
import shutil

import jax
import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.numpy import save_file
from safetensors.torch import save_file as torch_save_file
from transformers import (AutoModelForCausalLM, Qwen3Config as HFQwen3Config, Qwen3ForCausalLM,
                          Qwen3MoeConfig, Qwen3MoeForCausalLM)

from carr_jax.model import hf_config
from carr_jax.model import hf_io
from carr_jax.model import qwen3 as model
from carr_jax.model import sharding

VOCAB = 256


def make_hf_model(kind: str, tied: bool = False, seed: int = 0):
  """A tiny random HF model; norm weights random so norm-order bugs cannot hide."""
  torch.manual_seed(seed)
  common = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=32, tie_word_embeddings=tied,
                eos_token_id=7, bos_token_id=5)
  if kind == "dense":
    hf = Qwen3ForCausalLM(HFQwen3Config(intermediate_size=128, rope_theta=5e6, **common))
  else:
    hf = Qwen3MoeForCausalLM(Qwen3MoeConfig(
        moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, norm_topk_prob=True,
        rope_theta=1e7, **common))
  with torch.no_grad():
    for name, p in hf.named_parameters():
      if "norm" in name:
        p.uniform_(0.5, 1.5)
  return hf.eval()


def make_hf_dir(path, kind="dense", tied=False, dtype=torch.float32, max_shard_size=None):
  """Saves a tiny model to `path`; returns (path, fp32 torch model)."""
  hf = make_hf_model(kind, tied)
  kw = {"max_shard_size": max_shard_size} if max_shard_size else {}
  hf.to(dtype).save_pretrained(str(path), **kw)
  with open(os.path.join(path, "tokenizer.json"), "w") as f:
    json.dump({"fake": "tokenizer"}, f)  # only its copying is under test
  return str(path), hf.to(torch.float32)


def read_all(hf_dir) -> dict[str, np.ndarray]:
  out = {}
  for file in sorted(os.listdir(hf_dir)):
    if file.endswith(".safetensors"):
      with safe_open(os.path.join(hf_dir, file), "np") as f:
        out.update({k: f.get_tensor(k) for k in f.keys()})
  return out


def assert_same_tensors(a_dir, b_dir):
  a, b = read_all(a_dir), read_all(b_dir)
  assert sorted(a) == sorted(b)
  for name in a:
    assert a[name].dtype == b[name].dtype, name
    assert a[name].shape == b[name].shape, name
    assert a[name].tobytes() == b[name].tobytes(), f"{name} differs"


@pytest.fixture(scope="module")
def dense_dir(tmp_path_factory):
  return make_hf_dir(tmp_path_factory.mktemp("dense"), "dense", tied=False)


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory):
  return make_hf_dir(tmp_path_factory.mktemp("moe"), "moe")


def logits_of(params, cfg, hf_model):
  """(ours, transformers) fp32 logits on the same random tokens."""
  tokens = np.random.default_rng(1).integers(0, VOCAB, (2, 12))
  positions = np.tile(np.arange(12), (2, 1))
  ours = model.forward_logits(params, cfg, tokens, positions, np.ones_like(tokens))
  with torch.no_grad():
    ref = hf_model(torch.from_numpy(tokens)).logits.numpy()
  return np.asarray(ours), ref


# ---- config in a directory (the rest: test_hf_config.py) ----------------------------------

def test_unknown_architecture_in_directory(tmp_path):
  path, _ = make_hf_dir(tmp_path / "m", "dense")
  with open(os.path.join(path, "config.json")) as f:
    c = json.load(f)
  c["architectures"] = ["MistralForCausalLM"]
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(c, f)
  with pytest.raises(ValueError, match="'architectures'.*MistralForCausalLM"):
    hf_io.load_hf(path)


# ---- load ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_loaded_params_reproduce_transformers_logits(kind, dense_dir, moe_dir):
  path, hf_model = dense_dir if kind == "dense" else moe_dir
  cfg, params = hf_io.load_hf(path)
  ours, ref = logits_of(params, cfg, hf_model)
  assert np.max(np.abs(ours - ref)) <= 1e-4


@pytest.mark.parametrize("kind,mesh_shape", [
    ("dense", {"data": 2, "fsdp": 2, "tensor": 2}),
    ("moe", {"data": 2, "fsdp": 2, "tensor": 2}),
    ("moe", {"fsdp": 2, "expert": 2, "tensor": 2}),
])
def test_sharded_load_places_leaves_by_the_rules(kind, mesh_shape, dense_dir, moe_dir):
  path, _ = dense_dir if kind == "dense" else moe_dir
  cfg, single = hf_io.load_hf(path)
  mesh = sharding.make_mesh(mesh_shape)
  expected = sharding.param_shardings(model.abstract_params(cfg), mesh)
  params = hf_io.load_hf_params(path, cfg, expected)
  flat_params = jax.tree_util.tree_leaves_with_path(params)
  flat_expected = dict(jax.tree_util.tree_leaves_with_path(expected))
  flat_single = dict(jax.tree_util.tree_leaves_with_path(single))
  assert len(flat_params) == len(flat_expected)
  for path_, leaf in flat_params:
    assert leaf.sharding == flat_expected[path_], path_
    assert leaf.sharding.spec == sharding.spec_for(sharding.path_str(path_))
    np.testing.assert_array_equal(np.asarray(leaf), np.asarray(flat_single[path_]))
  # Sharded for real: a tensor-sharded leaf holds a strict slice on each device.
  q = params["layers"]["attn"]["q_proj"]
  assert q.addressable_shards[0].data.shape == (2, 64 // 2, 4 // 2, 32)


def test_bf16_checkpoint_loads_exactly_into_either_dtype(tmp_path):
  path, _ = make_hf_dir(tmp_path / "bf16", "moe", dtype=torch.bfloat16)
  raw = read_all(path)
  assert raw["model.embed_tokens.weight"].dtype == np.dtype("bfloat16")
  _, p16 = hf_io.load_hf(path, param_dtype="bfloat16")
  _, p32 = hf_io.load_hf(path, param_dtype="float32")
  assert p16["embed"]["embedding"].dtype == np.dtype("bfloat16")
  assert p32["embed"]["embedding"].dtype == np.float32
  np.testing.assert_array_equal(np.asarray(p16["embed"]["embedding"]),
                                raw["model.embed_tokens.weight"])
  np.testing.assert_array_equal(np.asarray(p32["layers"]["moe"]["up_proj"][1, 3]),
                                raw["model.layers.1.mlp.experts.3.up_proj.weight"].T
                                .astype(np.float32))


def test_fused_expert_layout_loads_like_per_expert(tmp_path, moe_dir):
  """transformers 5.x keeps experts fused in memory; its raw state_dict is that layout."""
  path, hf_model = moe_dir
  state = hf_model.state_dict()
  assert tuple(state["model.layers.0.mlp.experts.gate_up_proj"].shape) == (4, 2 * 32, 64)
  assert tuple(state["model.layers.0.mlp.experts.down_proj"].shape) == (4, 64, 32)
  fused_dir = tmp_path / "fused"
  fused_dir.mkdir()
  shutil.copy(os.path.join(path, "config.json"), fused_dir)
  torch_save_file({k: v.contiguous() for k, v in state.items()},
                  str(fused_dir / "model.safetensors"), metadata={"format": "pt"})
  cfg, expected = hf_io.load_hf(path)
  mesh = sharding.make_mesh({"fsdp": 2, "expert": 2, "tensor": 2})
  shardings = sharding.param_shardings(model.abstract_params(cfg), mesh)
  got = hf_io.load_hf_params(str(fused_dir), cfg, shardings)
  for a, b in zip(jax.tree.leaves(expected), jax.tree.leaves(got)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _rewrite(hf_dir, edit):
  """Applies `edit(tensors) -> tensors` to a single-file checkpoint."""
  file = os.path.join(hf_dir, "model.safetensors")
  tensors = edit(read_all(hf_dir))
  save_file(tensors, file, metadata={"format": "pt"})


def test_missing_tensor_is_named(tmp_path, dense_dir):
  path = shutil.copytree(dense_dir[0], tmp_path / "m")
  name = "model.layers.1.self_attn.k_norm.weight"
  _rewrite(path, lambda t: {k: v for k, v in t.items() if k != name})
  with pytest.raises(hf_io.CheckpointError, match=f"missing tensor '{name}'"):
    hf_io.load_hf(str(path))


def test_missing_tensor_in_sharded_index_is_named(tmp_path):
  path, _ = make_hf_dir(tmp_path / "m", "moe", max_shard_size="20KB")
  index_file = os.path.join(path, "model.safetensors.index.json")
  with open(index_file) as f:
    index = json.load(f)
  name = "model.layers.1.mlp.experts.2.down_proj.weight"
  del index["weight_map"][name]
  with open(index_file, "w") as f:
    json.dump(index, f)
  with pytest.raises(hf_io.CheckpointError, match=f"missing tensor '{name}'"):
    hf_io.load_hf(path)


def test_shape_mismatch_names_tensor_expected_and_got(tmp_path, dense_dir):
  path = shutil.copytree(dense_dir[0], tmp_path / "m")
  name = "model.layers.0.mlp.up_proj.weight"
  _rewrite(path, lambda t: {**t, name: t[name][:100]})
  with pytest.raises(hf_io.CheckpointError,
                     match=rf"'{name}' has shape \[100, 64\], expected \[128, 64\]"):
    hf_io.load_hf(str(path))


def test_unused_tensor_is_an_error_unless_not_strict(tmp_path, dense_dir, caplog):
  path = shutil.copytree(dense_dir[0], tmp_path / "m")
  extra = "model.layers.0.self_attn.q_proj.bias"
  _rewrite(path, lambda t: {**t, extra: np.zeros(128, np.float32)})
  with pytest.raises(hf_io.CheckpointError, match=extra):
    hf_io.load_hf(str(path))
  _, params = hf_io.load_hf(str(path), strict=False)
  assert extra in caplog.text
  assert params["layers"]["attn"]["q_proj"].shape == (2, 64, 4, 32)


def test_tied_checkpoint_with_stored_lm_head(tmp_path):
  path, _ = make_hf_dir(tmp_path / "t", "dense", tied=True)
  _rewrite(path, lambda t: {**t, "lm_head.weight": t["model.embed_tokens.weight"].copy()})
  cfg, params = hf_io.load_hf(path)  # an exact copy of the embedding is accepted
  assert cfg.tie_word_embeddings and "lm_head" not in params
  _rewrite(path, lambda t: {**t, "lm_head.weight": t["lm_head.weight"] + 1.0})
  with pytest.raises(hf_io.CheckpointError, match="lm_head.weight differs"):
    hf_io.load_hf(path)


# ---- export --------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,tied", [("dense", True), ("dense", False), ("moe", False)])
def test_export_loads_in_transformers_with_identical_weights(tmp_path, kind, tied):
  path, hf_model = make_hf_dir(tmp_path / "src", kind, tied=tied)
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  cfg, params = hf_io.load_hf(
      path, lambda a: sharding.param_shardings(a, mesh))
  out = str(tmp_path / "out")
  hf_io.save_hf(params, cfg, out, tokenizer_dir=path,
                base_config=hf_config.read_config_json(path))
  assert_same_tensors(path, out)  # also: lm_head.weight present exactly when untied
  assert os.path.exists(os.path.join(out, "tokenizer.json"))
  reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
  assert type(reloaded) is type(hf_model)
  assert reloaded.config.eos_token_id == 7
  original = hf_model.state_dict()
  for name, tensor in reloaded.state_dict().items():
    assert torch.equal(tensor, original[name]), name


def test_sharded_export_with_small_threshold_reloads(tmp_path, moe_dir):
  path, hf_model = moe_dir
  cfg, params = hf_io.load_hf(path)
  out = str(tmp_path / "out")
  limit = 30_000
  hf_io.save_hf(params, cfg, out, max_shard_bytes=limit)
  with open(os.path.join(out, "model.safetensors.index.json")) as f:
    index = json.load(f)
  files = sorted(set(index["weight_map"].values()))
  assert len(files) > 3 and not os.path.exists(os.path.join(out, "model.safetensors"))
  assert files == sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))
  tensors = read_all(out)
  assert index["metadata"]["total_size"] == sum(t.nbytes for t in tensors.values())
  for file in files:
    with safe_open(os.path.join(out, file), "np") as f:
      sizes = [f.get_tensor(k).nbytes for k in f.keys()]
    assert sum(sizes) <= limit or len(sizes) == 1, file
  assert_same_tensors(path, out)
  reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
  _, again = hf_io.load_hf(out)
  ours, ref = logits_of(again, cfg, reloaded)
  assert np.max(np.abs(ours - ref)) <= 1e-4


def test_export_bf16_rounds_like_torch(tmp_path, dense_dir):
  path, hf_model = dense_dir
  cfg, params = hf_io.load_hf(path)
  out = str(tmp_path / "bf16")
  hf_io.save_hf(params, cfg, out, dtype="bfloat16")
  torch_bf16 = tmp_path / "torch_bf16"
  make_hf_model("dense", tied=False).to(torch.bfloat16).save_pretrained(str(torch_bf16))
  assert_same_tensors(str(torch_bf16), out)
  with open(os.path.join(out, "config.json")) as f:
    assert json.load(f)["torch_dtype"] == "bfloat16"


def test_failed_export_leaves_no_target_and_no_temp(tmp_path, dense_dir):
  cfg, params = hf_io.load_hf(dense_dir[0])
  bad = jax.tree.map(lambda x: x, params)
  bad["final_norm"]["scale"] = bad["final_norm"]["scale"].at[3].set(np.nan)
  parent = tmp_path / "exports"
  parent.mkdir()
  with pytest.raises(ValueError, match="model.norm.weight.*non-finite"):
    # Tiny shards: several files are already written when the last tensor fails.
    hf_io.save_hf(bad, cfg, str(parent / "v1"), max_shard_bytes=20_000)
  assert os.listdir(parent) == []


def test_export_refuses_existing_target_and_replaces_with_overwrite(tmp_path, dense_dir):
  cfg, params = hf_io.load_hf(dense_dir[0])
  out = tmp_path / "out"
  out.mkdir()
  (out / "stale.txt").write_text("old")
  with pytest.raises(FileExistsError):
    hf_io.save_hf(params, cfg, str(out))
  hf_io.save_hf(params, cfg, str(out), overwrite=True)
  assert not (out / "stale.txt").exists()
  assert_same_tensors(dense_dir[0], str(out))
  assert sorted(os.listdir(tmp_path)) == ["out"]


def test_export_rejects_params_of_another_config(tmp_path, dense_dir):
  cfg, params = hf_io.load_hf(dense_dir[0])
  with pytest.raises(ValueError, match="lm_head"):
    hf_io.save_hf(params, cfg.replace(tie_word_embeddings=True), str(tmp_path / "x"))
  assert not (tmp_path / "x").exists()


# ---- serving -------------------------------------------------------------------------------

def _greedy_reference(hf_dir, prompt, steps):
  """Greedy continuation and its log-probs from transformers (fp32), step by step."""
  hf = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32).eval()
  ids, logprobs = list(prompt), []
  with torch.no_grad():
    for _ in range(steps):
      logits = hf(torch.tensor([ids])).logits[0, -1]
      log_softmax = torch.log_softmax(logits, dim=-1)
      token = int(torch.argmax(logits))
      ids.append(token)
      logprobs.append(float(log_softmax[token]))
  return ids[len(prompt):], logprobs


async def _push_weights(url: str, model_path: str, version: str) -> None:
  from rollout.engines.sglang import SGLangEngine
  engine = SGLangEngine(url)
  try:
    await engine.update_weights_from_disk(model_path, version)
  finally:
    await engine.close()


@pytest.mark.sglang
@pytest.mark.slow
def test_sglang_serves_exported_weights_after_update_from_disk(tmp_path):
  """A real SGLang server swaps to our export and generates exactly what transformers does."""
  import httpx
  from rollout.engines import sglang_launcher
  from tests.sglang_server import make_tiny_qwen3
  if not sglang_launcher.venv_python().exists():
    pytest.skip("SGLang venv missing; build it with scripts/setup_sglang_cpu.sh")
  served = make_tiny_qwen3(tmp_path / "a", seed=0)
  target = make_tiny_qwen3(tmp_path / "b", seed=1)
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  cfg, params = hf_io.load_hf(str(target), lambda a: sharding.param_shardings(a, mesh))
  exported = tmp_path / "exported"
  hf_io.save_hf(params, cfg, str(exported), tokenizer_dir=str(target),
                base_config=hf_config.read_config_json(str(target)))
  prompt, steps = [151644, 872, 198, 9707, 11, 1879, 0], 8
  expected_tokens, expected_logprobs = _greedy_reference(target, prompt, steps)

  server = sglang_launcher.launch(str(served), dtype="float32", timeout=300.0)
  try:
    with httpx.Client(base_url=server.url, timeout=120.0) as client:
      def generate():
        body = {"input_ids": prompt, "return_logprob": True, "sampling_params": {
            "temperature": 0.0, "max_new_tokens": steps, "ignore_eos": True}}
        out = client.post("/generate", json=body).raise_for_status().json()
        return out["output_ids"], [lp for lp, _, _ in out["meta_info"]["output_token_logprobs"]]

      before, _ = generate()
      asyncio.run(_push_weights(server.url, str(exported), "exported-1"))  # the trainer's path
      assert client.get("/model_info").json()["weight_version"] == "exported-1"
      tokens, logprobs = generate()
  finally:
    server.stop()
  assert before != expected_tokens  # the two random models really differ
  assert tokens == expected_tokens
  np.testing.assert_allclose(logprobs, expected_logprobs, atol=1e-4)
