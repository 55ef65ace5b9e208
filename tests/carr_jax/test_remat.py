"""Rematerialization policies (`carr_jax.model.remat`): every one trains exactly as "none" does,
and recomputes in the backward the matmuls `carr_jax.model.flops` counts for it, and the
attention kernel's forward exactly when it lists the core. (The same on the compiled TPU
program: scripts/check_remat_kernels.py, in the TPU virtualenv.)"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.cudnn import fused_attention_stablehlo as jax_cudnn
from jax._src.interpreters import partial_eval as pe
from jax.extend import core as jax_core

from carr_jax.model import flops as F
from carr_jax.model import fused_attention
from carr_jax.model import qwen3 as M
from carr_jax.model import remat, sharding
from carr_jax.model.config import get_preset
from carr_jax.rl import loss as loss_lib
from carr_jax.rl import train_step as ts
from tests.carr_jax.test_attention import _inputs
from tests.carr_jax.test_train_step import SGD, assert_trees_close, make_batch

SELECTIVE = [name for name in remat.POLICIES if name != "none"]


@functools.cache
def _step(preset: str, name: str):
  """(params, metrics) after one RL train step of `preset` under remat `name`, SGD at lr 1:
  params after = params before - gradient."""
  cfg = get_preset(preset, vocab_size=256, remat=name)
  mesh = sharding.make_mesh({"data": 1}, jax.devices()[:1])
  state, shardings = ts.create_train_state(cfg, SGD, mesh, seed=0)
  step = ts.make_train_step(cfg, loss_lib.LossConfig(), ts.StepConfig(), SGD, mesh, shardings)
  state, metrics = step(state, make_batch())
  return jax.device_get(state.params), jax.device_get(metrics)


# Every policy on the dense model; on the MoE (whose experts every policy recomputes) one
# policy per kind of saving: by dot, by name, by name into host memory, nothing.
CASES = ([("tiny_dense", name) for name in SELECTIVE]
         + [("tiny_moe", name) for name in ("dots_attn", "attn_core_offload", "full")])


@pytest.mark.slow  # a train step compile per policy: ~30 s each on 2 cores
@pytest.mark.parametrize("preset, name", CASES)
def test_every_policy_gives_the_loss_and_gradients_of_none(preset, name):
  """Recomputation repeats the forward's own ops on the same inputs, so fp32 results agree to
  round-off (MoE: the recomputed router picks the same experts)."""
  params, metrics = _step(preset, "none")
  got_params, got_metrics = _step(preset, name)
  for key in ("loss", "grad_norm"):
    np.testing.assert_allclose(got_metrics[key], metrics[key], atol=1e-6, rtol=0, err_msg=key)
  assert_trees_close(got_params, params, 1e-6)


# The dot_generals each part of a layer's forward lowers to on the CPU (blockwise attention's
# core: the scores and PV; ragged_dot: one dot per expert matmul).
DOTS = {"qkv": 3, "o": 1, "core": 2, "mlp_in": 2, "mlp_out": 1, "router": 1, "experts": 3}


def _lowered_dots(cfg) -> int:
  """dot_generals in the lowered (not yet optimized) gradient of a one-layer model."""
  tokens = jnp.zeros((2, 16), jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(16), (2, 16))
  params = M.abstract_params(cfg)

  def loss(p):
    return jnp.sum(M.Qwen3(cfg).apply({"params": p}, tokens, positions, tokens + 1) ** 2)
  return jax.jit(jax.grad(loss)).lower(params).as_text().count("stablehlo.dot_general")


@pytest.mark.parametrize("preset", ["tiny_dense", "tiny_moe"])
def test_each_policy_recomputes_the_parts_it_lists(preset):
  """The backward's extra matmuls under each policy are those of `Policy.recomputes`, the
  parts flops.py counts: e.g. "full" leaves the dense MLP's down projection out, and every
  policy but "none" repeats the MoE experts."""
  cfg = get_preset(preset, vocab_size=256, num_layers=1)
  base = _lowered_dots(cfg)
  for name in SELECTIVE:
    extra = _lowered_dots(cfg.replace(remat=name)) - base
    listed = remat.policy(name).recomputes
    assert extra == sum(DOTS[part] for part in listed if F.layer_part_flops(cfg, 1, 1)[part]), \
        name


def _equations(jaxpr):
  """Every equation of `jaxpr` and of the jaxprs inside it (scans, custom rules, remat)."""
  for eqn in jaxpr.eqns:
    yield eqn
    for param in eqn.params.values():
      for sub in param if isinstance(param, (tuple, list)) else (param,):
        if isinstance(sub, (jax_core.Jaxpr, jax_core.ClosedJaxpr)):
          yield from _equations(getattr(sub, "jaxpr", sub))


def _splash_kernel_runs(name: str) -> list[str]:
  """The Pallas kernels that value_and_grad of splash attention (interpret mode) under policy
  `name` runs, after dead-code elimination (what jit's lowering keeps)."""
  q, k, v, seg, w = _inputs(1, 128, 1, 2, 32)

  def loss(q, k, v):
    return jnp.sum(fused_attention.splash(q, k, v, seg, interpret=True) * w)
  saveable = remat.policy(name).saveable
  if saveable is not None:
    loss = jax.checkpoint(loss, policy=saveable)
  jaxpr = jax.make_jaxpr(jax.value_and_grad(loss, argnums=(0, 1, 2)))(q, k, v).jaxpr
  live, _ = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars))
  return sorted(str(e.params["name"]) for e in _equations(live)
                if e.primitive.name == "pallas_call")


# Offloading policies: the jaxpr holds the host transfers and the forward kernel twice; which
# the program runs is the TPU compiler's choice (one forward per layer under
# attn_core_offload), so they are checked on the compiled program
# (scripts/check_remat_kernels.py, CI step 4), not here.
@pytest.mark.parametrize("name", [n for n in remat.POLICIES if not n.endswith("_offload")])
def test_splash_forward_runs_again_only_where_the_policy_recomputes_the_core(name):
  """The kernel's own names on its output and log-sum-exp (`remat.ATTN_CORE`) let a policy
  keep them; then the backward runs only the dq / dkv kernels. (value_and_grad needs the
  attention's value, as the model's next layer does, so the forward kernel runs once before
  the backward under every policy.)"""
  forward = ["splash_mha_fwd_segmented_residuals"]
  again = forward if "core" in remat.policy(name).recomputes else []
  backward = ["splash_mha_dkv_segmented_no_residuals", "splash_mha_dq_segmented_no_residuals"]
  assert _splash_kernel_runs(name) == sorted(forward + again + backward)


def test_the_cudnn_forward_is_matched_by_the_primitive_jax_binds():
  """jax's cuDNN attention names nothing; the policies match the primitive its training
  forward binds (no GPU here to run it: the name is all that can be checked)."""
  assert jax_cudnn._dot_product_attention_fwd_p_wrapper.name == remat.CUDNN_FORWARD
  cudnn_forward = jax_cudnn._dot_product_attention_fwd_p_wrapper
  for name, policy in remat.POLICIES.items():
    keeps = policy.saveable is not None and policy.saveable(cudnn_forward) is True
    by_name_only = name.endswith("_offload")  # offloading goes by name: cuDNN's is recomputed
    assert keeps == (name != "none" and "core" not in policy.recomputes
                     and not by_name_only), name


def test_executed_flops_by_hand():
  """tiny_dense (D 64, 4 heads / 2 kv of 32, F 128, 2 layers) on 2 rows of 8 (16 tokens); per
  layer: q / k / v 2*16*64*8*32, o 2*16*128*64, gate + up 2*16*2*64*128, core 4*4*32*2*36."""
  cfg = get_preset("tiny_dense")
  qkv, o, mlp_in, core = 524_288, 262_144, 524_288, 36_864
  recomputed = {"none": 0, "dots": core, "dots_attn": 0, "attn_proj": core + mlp_in,
                "attn_proj_core": mlp_in, "attn_core": qkv + o + mlp_in,
                "attn_core_offload": qkv + o + mlp_in,
                "attn_proj_offload": core + mlp_in,
                "full": qkv + o + core + mlp_in}
  assert set(recomputed) == set(remat.POLICIES)
  assert set(F.layer_part_flops(cfg, 2, 8)) == set(remat.PARTS)
  assert all(set(p.recomputes) <= set(remat.PARTS) for p in remat.POLICIES.values())
  model, _ = F.train_step_flops(cfg, 2, 8, 8)
  for name, per_layer in recomputed.items():
    assert F.train_step_flops(cfg.replace(remat=name), 2, 8, 8) == (model, model + 2 * per_layer)


def test_executed_flops_rise_as_the_policy_keeps_less():
  """The paper's 4B model on 64k rows: each policy keeps less than the one before and pays
  more ("attn_proj_core" and "attn_core" keep the core, "dots" the MLP, and at 64k the core
  costs more);
  "full" repeats less than a whole layers forward (4/3 of the model FLOPs at most). The dense
  model's "dots_attn" recomputes no matmul."""
  cfg = get_preset("qwen3_4b_thinking_2507")
  order = ["none", "attn_proj_core", "attn_core", "dots", "attn_proj", "full"]
  ratio = {}
  for name in remat.POLICIES:
    model, executed = F.train_step_flops(cfg.replace(remat=name), 2, 65_536, 65_536)
    ratio[name] = executed / model
  assert ratio["none"] == 1.0
  assert all(ratio[a] < ratio[b] for a, b in zip(order, order[1:])), ratio
  assert ratio["attn_proj_offload"] == ratio["attn_proj"]
  assert ratio["dots_attn"] == ratio["none"]
  assert ratio["full"] < 4 / 3


def test_an_unknown_policy_is_refused_with_the_known_names():
  names = ("none, dots, dots_attn, attn_proj, attn_proj_core, attn_core, attn_core_offload, "
           "attn_proj_offload, full")
  with pytest.raises(ValueError, match=names):
    M.init_params(get_preset("tiny_dense", remat="minimal"), jax.random.key(0))
