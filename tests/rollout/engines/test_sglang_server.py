"""SGLangEngine against a real SGLang CPU server (scripts/setup_sglang_cpu.sh; one server is
started for the session): greedy and sampled log-probs against transformers, stop tokens and
aborts, weight updates from disk, a server killed mid-batch; and the sgl_kernel stand-in.

    python -m pytest tests/rollout/engines/test_sglang_server.py -q -m sglang

Tolerances: SGLang (fp32, torch_native attention) vs HF transformers fp32 log-probs of the same
32 tokens, measured on three prompts: max |diff| <= 5e-6 for greedy and T = 1, <= 2.7e-5 at
T = 0.5 (1/T doubles any logit error, and sampled requests get log(softmax(.)) rather than
log_softmax, which loses relative precision on unlikely tokens). The tests demand 1e-4, the
house fp32 tolerance for logits. The client's own behaviour against a scripted server:
test_sglang_engine.py.
"""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import pathlib
import time

import numpy as np
import pytest

from rollout.engines import SamplingParams, SGLangEngine
from tests.rollout.engines.test_sglang_engine import PROMPT, one, run

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12, stop_token_ids=())


@functools.cache
def hf_model(model_dir):
  import torch
  from transformers import AutoModelForCausalLM
  return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()


def hf_logits(model_dir, prompt, output_ids):
  """HF fp32 logits that scored each output token: [O, V] (float64 for the comparison)."""
  import torch
  with torch.no_grad():
    logits = hf_model(model_dir)(torch.tensor([list(prompt) + list(output_ids)])).logits
  return logits[0, len(prompt) - 1: len(prompt) - 1 + len(output_ids)].double()


def hf_logprobs(model_dir, prompt, output_ids, temperature=1.0):
  import torch
  logits = hf_logits(model_dir, prompt, output_ids) / temperature
  picked = torch.tensor(output_ids)[:, None]
  return torch.log_softmax(logits, -1).gather(1, picked)[:, 0].numpy()


def max_diff(a, b):
  return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def prompts_for_test():
  from rollout.chat import ChatFormat
  from tests.carr_jax.test_tokenizer import qwen3_tokenizer
  chat_prompt = ChatFormat(qwen3_tokenizer()).prompt_ids(
      [{"role": "user", "content": "Which river flows past Kleinstadt?"}])
  return [PROMPT, chat_prompt, [151644, 9707, 11, 1879, 0]]


async def with_engine(url, fn, **kw):
  engine = SGLangEngine(url, **kw)
  try:
    await engine.wait_until_ready(timeout=60)
    return await fn(engine)
  finally:
    await engine.close()


@pytest.mark.sglang
@pytest.mark.slow
def test_greedy_is_deterministic_and_matches_hf(sglang_server):
  prompts = prompts_for_test()

  async def go(engine):
    batched = await engine.generate_many(prompts, GREEDY)
    single = [await engine.generate(p, GREEDY) for p in prompts]
    return batched, single

  batched, single = run(with_engine(sglang_server.url, go))
  model_dir = sglang_server.model_path
  for prompt, b, s in zip(prompts, batched, single):
    assert b.finish_reason == s.finish_reason == "length" and b.prompt_tokens == len(prompt)
    assert b.output_ids == s.output_ids and len(b.output_ids) == 12
    assert max_diff(b.logprobs, s.logprobs) < 1e-4
    # The greedy path is HF's argmax path, and the log-probs are HF's log_softmax(logits).
    assert b.output_ids == hf_logits(model_dir, prompt, b.output_ids).argmax(-1).tolist()
    assert max_diff(b.logprobs, hf_logprobs(model_dir, prompt, b.output_ids)) < 1e-4


@pytest.mark.sglang
@pytest.mark.slow
def test_logprobs_are_after_temperature(sglang_server):
  """SGLang reports log softmax(logits / T), not renormalized by top-k (module docstring)."""
  model_dir = sglang_server.model_path
  cases = [SamplingParams(temperature=t, top_k=k, max_new_tokens=10, stop_token_ids=())
           for t, k in ((0.5, -1), (1.5, -1), (1.0, 3))]

  async def go(engine):
    return [await engine.generate(PROMPT, p) for p in cases]

  for params, r in zip(cases, run(with_engine(sglang_server.url, go))):
    scaled = hf_logprobs(model_dir, PROMPT, r.output_ids, params.temperature)
    raw = hf_logprobs(model_dir, PROMPT, r.output_ids, 1.0)
    assert max_diff(r.logprobs, scaled) < 1e-4
    if params.temperature != 1.0:
      assert max_diff(r.logprobs, raw) > 0.05
    if params.top_k > 0:  # top-k applied to sampling, but log-probs keep the full softmax
      top = hf_logits(model_dir, PROMPT, r.output_ids).topk(params.top_k, -1).indices
      assert all(t in row for t, row in zip(r.output_ids, top.tolist()))
      assert float(np.max(r.logprobs)) < -0.01


@pytest.mark.sglang
@pytest.mark.slow
def test_stop_token_ends_and_is_returned_and_abort_by_rid(sglang_server):
  async def go(engine):
    free = await engine.generate(PROMPT, GREEDY)
    k = next(i for i in range(2, 12) if free.output_ids[i] not in free.output_ids[:i])
    stopped = await engine.generate(PROMPT, dataclasses.replace(
        GREEDY, stop_token_ids=(free.output_ids[k],)))
    long = asyncio.create_task(engine.generate(
        PROMPT, dataclasses.replace(GREEDY, max_new_tokens=400), rid="to-abort"))
    await asyncio.sleep(1.0)
    await engine.abort("to-abort")
    return free, k, stopped, await long

  free, k, stopped, aborted = run(with_engine(sglang_server.url, go))
  assert stopped.finish_reason == "stop" and stopped.output_ids == free.output_ids[:k + 1]
  assert len(stopped.logprobs) == k + 1
  assert aborted.finish_reason == "abort" and len(aborted.output_ids) < 400
  assert aborted.rid == "to-abort"


@pytest.mark.sglang
@pytest.mark.slow
def test_update_weights_from_disk_changes_outputs_and_version(sglang_server, tiny_qwen3_dirs):
  model_a, model_b = tiny_qwen3_dirs

  async def go(engine):
    base = await engine.generate(PROMPT, GREEDY)
    await engine.update_weights_from_disk(str(model_b), "step-1")
    served_b = await engine.served_weight_version(sglang_server.url)
    on_b = await engine.generate(PROMPT, GREEDY)
    await engine.update_weights_from_disk(str(model_a), "step-2")
    on_a = await engine.generate(PROMPT, GREEDY)
    return base, served_b, on_b, on_a, engine.weight_version

  base, served_b, on_b, on_a, version = run(with_engine(sglang_server.url, go))
  assert served_b == on_b.weight_version == "step-1" and version == on_a.weight_version
  assert on_b.output_ids != base.output_ids
  assert max_diff(on_b.logprobs, hf_logprobs(model_b, PROMPT, on_b.output_ids)) < 1e-4
  assert on_a.output_ids == base.output_ids and on_a.weight_version == "step-2"
  assert max_diff(on_a.logprobs, base.logprobs) < 1e-4


@pytest.mark.sglang
@pytest.mark.slow
def test_update_weights_while_the_last_request_finishes(sglang_server, tiny_qwen3_dirs):
  """A sync sent while a straggler still decodes waits for it, then flushes and serves the
  new weights (CI, stop 9: SGLang's in-update flush refused a just-finished batch)."""
  model_a, model_b = tiny_qwen3_dirs
  straggler = SamplingParams(temperature=0.0, max_new_tokens=48, stop_token_ids=())

  async def go(engine):
    base = await engine.generate(PROMPT, GREEDY)
    for i, model in enumerate([model_b, model_a] * 3):
      running = asyncio.create_task(engine.generate(PROMPT, straggler))
      await asyncio.sleep(0.02 * i)
      await engine.update_weights_from_disk(str(model), f"overlap-{i}")
      assert (await running).ok
      after = await engine.generate(PROMPT, GREEDY)
      assert after.weight_version == f"overlap-{i}"
    return base, after

  base, after = run(with_engine(sglang_server.url, go))
  assert after.output_ids == base.output_ids  # back on model A, nothing stale in the cache
  assert max_diff(after.logprobs, base.logprobs) < 1e-4


@pytest.mark.sglang
@pytest.mark.slow
def test_server_killed_mid_batch(sglang_server):
  """Retries carry a batch across a crash + restart; without a restart, results are failed."""
  prompts = prompts_for_test()
  params = dataclasses.replace(GREEDY, max_new_tokens=64)
  reference = run(with_engine(sglang_server.url, lambda e: e.generate_many(prompts, params)))

  async def crash_and_restart(engine):
    batch = asyncio.create_task(engine.generate_many(prompts, params))
    deadline = time.monotonic() + 10
    while engine.inflight < len(prompts) and time.monotonic() < deadline:
      await asyncio.sleep(0.005)  # until the whole batch is on the server
    await asyncio.sleep(0.05)
    sglang_server.kill()
    await asyncio.to_thread(sglang_server.restart)
    return await batch

  results = run(with_engine(sglang_server.url, crash_and_restart, max_retries=60,
                            backoff_base=0.5, backoff_max=4.0))
  assert [r.output_ids for r in results] == [r.output_ids for r in reference]
  assert all(r.ok for r in results) and max(r.attempts for r in results) > 1

  sglang_server.kill()
  t0 = time.monotonic()
  failed = run(one(sglang_server.url, max_retries=2))
  assert failed.finish_reason == "failed" and failed.attempts == 3
  assert time.monotonic() - t0 < 30  # the next test's fixture restarts the server


def test_sgl_kernel_standin_assign_matches_kernel_semantics():
  """The stand-in's assign_req_to_token_pool_cpu vs a per-request loop (the Triton kernel's)."""
  import importlib.util
  import torch
  path = (pathlib.Path(__file__).resolve().parents[3]
          / "scripts" / "sglang_compat" / "sgl_kernel" / "__init__.py")
  spec = importlib.util.spec_from_file_location("sgl_kernel_standin", path)
  standin = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(standin)
  gen = torch.Generator().manual_seed(0)
  table = torch.full((6, 32), -1, dtype=torch.int32)  # [R, pool_len]
  rows = torch.tensor([4, 0, 2, 5])
  start = torch.tensor([0, 7, 3, 10])
  end = torch.tensor([5, 7, 11, 12])  # request 1 adds nothing
  slots = torch.randint(0, 4096, (int((end - start).sum()),), generator=gen)  # int64
  expected = table.clone()
  offset = 0
  for r, s, e in zip(rows.tolist(), start.tolist(), end.tolist()):
    expected[r, s:e] = slots[offset: offset + e - s].to(torch.int32)
    offset += e - s
  standin.assign_req_to_token_pool_cpu(rows, table, start, end, slots, table.shape[1])
  assert torch.equal(table, expected)
  with pytest.raises(NotImplementedError, match="speculative decoding"):
    standin.verify_tree_greedy_cpu()
