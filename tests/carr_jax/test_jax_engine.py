"""The in-process JAX engine against a step-by-step loop over `model.forward_logits`.

  .venv/bin/python -m pytest tests/carr_jax/test_jax_engine.py -q
"""
import asyncio
import threading

import jax
import numpy as np
import pytest

from carr_jax.model import decode as D
from carr_jax.model import hf_io
from carr_jax.model import qwen3 as M
from carr_jax.model.engine import JaxEngine, bucket, length_bucket
from rollout.engines.base import InvalidTokenIdsError, SamplingParams
from tests.carr_jax.test_decode import tiny_setup

REF_LEN = 32  # reference sequences are padded to one shape: one compile
_forward_jit = jax.jit(M.forward_logits, static_argnums=1)


@pytest.fixture(scope="module")
def tiny():
  return tiny_setup("tiny_dense")


def next_logits(params, cfg, seq):
  """fp32 logits [V] after `seq` from the full forward pass (no cache)."""
  tokens = np.zeros((1, REF_LEN), np.int32)
  segments = np.zeros((1, REF_LEN), np.int32)
  tokens[0, :len(seq)], segments[0, :len(seq)] = seq, 1
  positions = np.arange(REF_LEN)[None]
  return np.asarray(_forward_jit(params, cfg, tokens, positions, segments))[0, len(seq) - 1]


def log_softmax(x):
  x = x - x.max()
  return x - np.log(np.exp(x).sum())


def greedy_reference(params, cfg, prompt, steps):
  seq, logprobs = list(prompt), []
  for _ in range(steps):
    logits = next_logits(params, cfg, seq)
    seq.append(int(np.argmax(logits)))
    logprobs.append(log_softmax(logits)[seq[-1]])
  return seq[len(prompt):], logprobs


def run(coro):
  return asyncio.run(coro)


def gather(engine, prompts, params_list):
  async def go():
    return await asyncio.gather(*(engine.generate(p, sp) for p, sp in zip(prompts, params_list)))
  return run(go())


PROMPTS = [[5, 17, 300], [1, 2, 3, 4, 5, 6, 7, 8, 9], [42]]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=8, stop_token_ids=())


def test_greedy_equals_argmax_loop_with_its_logprobs(tiny):
  cfg, params = tiny
  engine = JaxEngine(params, cfg, weight_version="v0", max_batch=4)
  first = gather(engine, PROMPTS, [GREEDY] * 3)
  again = gather(engine, PROMPTS, [GREEDY] * 3)
  for prompt, result, repeat in zip(PROMPTS, first, again):
    want_ids, want_logprobs = greedy_reference(params, cfg, prompt, 8)
    assert result.output_ids == want_ids
    np.testing.assert_allclose(result.logprobs, want_logprobs, atol=1e-5, rtol=0)
    assert (result.finish_reason, result.weight_version) == ("length", "v0")
    assert result.prompt_tokens == len(prompt)
    assert repeat.output_ids == result.output_ids
  assert engine.batch_sizes == [3, 3]  # requests arriving together share a batch


def test_stop_token_ends_its_row_while_others_continue(tiny):
  cfg, params = tiny
  rng = np.random.default_rng(3)
  for _ in range(50):  # find a stop id row 0 emits at step 2 and row 1 never emits
    prompts = [rng.integers(0, cfg.vocab_size, n).tolist() for n in (4, 7)]
    ref = [greedy_reference(params, cfg, p, 6)[0] for p in prompts]
    stop = ref[0][2]
    if stop not in ref[0][:2] and stop not in ref[1]:
      break
  else:
    pytest.fail("no usable stop token found")
  sp = SamplingParams(temperature=0.0, max_new_tokens=6, stop_token_ids=(stop, 7777))
  engine = JaxEngine(params, cfg, max_batch=4)
  stopped, running = gather(engine, prompts, [sp, sp])
  assert stopped.output_ids == ref[0][:3] and stopped.finish_reason == "stop"
  assert stopped.output_ids[-1] == stop and len(stopped.logprobs) == 3
  assert running.output_ids == ref[1] and running.finish_reason == "length"


def test_max_new_tokens_per_request_gives_length(tiny):
  cfg, params = tiny
  engine = JaxEngine(params, cfg, max_batch=4)
  short = SamplingParams(temperature=0.0, max_new_tokens=3, stop_token_ids=())
  results = gather(engine, PROMPTS[:2], [short, GREEDY])
  assert [len(r.output_ids) for r in results] == [3, 8]
  assert [r.finish_reason for r in results] == ["length", "length"]
  assert results[0].output_ids == greedy_reference(params, cfg, PROMPTS[0], 3)[0]


def test_samples_follow_the_rid_not_the_call_order(tiny):
  """A resumed run reaches the engine in another order and batching: the draws of a request
  depend only on (engine seed, weight version, rid)."""
  cfg, params = tiny
  sp = SamplingParams(temperature=1.0, max_new_tokens=8, stop_token_ids=())
  rids = ["q0/0/0", "q0/1/0", "q1/0/2"]

  def sample(engine, order):
    async def go():
      return await asyncio.gather(*(engine.generate(PROMPTS[i], sp, rids[i]) for i in order))
    return {r.rid: r.output_ids for r in run(go())}

  first = sample(JaxEngine(params, cfg, max_batch=4, seed=3), [0, 1, 2])
  again = sample(JaxEngine(params, cfg, max_batch=1, seed=3), [2, 0, 1])
  assert first == again
  later = sample(JaxEngine(params, cfg, max_batch=4, seed=3, weight_version="5"), [0, 1, 2])
  assert later != first  # the next step's episodes (same rids, new version) draw anew


def test_sampling_is_reproducible_and_stays_in_top_p(tiny):
  cfg, params = tiny
  sp = SamplingParams(temperature=0.8, top_p=0.6, max_new_tokens=8, stop_token_ids=())
  runs = [gather(JaxEngine(params, cfg, max_batch=4, seed=seed), PROMPTS, [sp] * 3)
          for seed in (7, 7, 8)]
  assert [r.output_ids for r in runs[0]] == [r.output_ids for r in runs[1]]
  assert [r.output_ids for r in runs[0]] != [r.output_ids for r in runs[2]]
  for prompt, result in zip(PROMPTS, runs[0]):
    seq = list(prompt)
    for token, logprob in zip(result.output_ids, result.logprobs):
      scaled = log_softmax(next_logits(params, cfg, seq) / 0.8)
      order = np.argsort(-scaled)
      probs = np.exp(scaled[order])
      kept = order[(np.cumsum(probs) - probs) <= 0.6]
      assert token in kept, (token, kept)
      assert abs(logprob - scaled[token]) <= 1e-5
      seq.append(token)


def test_update_weights_changes_outputs_and_version(tiny, tmp_path):
  cfg, params = tiny
  _, new_params = tiny_setup("tiny_dense", seed=1)
  engine = JaxEngine(params, cfg, weight_version="0", max_batch=4)
  before = gather(engine, PROMPTS[:1], [GREEDY])[0]
  run(engine.update_weights(new_params, weight_version="1"))
  after = gather(engine, PROMPTS[:1], [GREEDY])[0]
  assert engine.weight_version == after.weight_version == "1"
  assert before.weight_version == "0"
  assert after.output_ids == greedy_reference(new_params, cfg, PROMPTS[0], 8)[0]
  assert after.output_ids != before.output_ids
  with pytest.raises(ValueError, match="structure, shape or dtype"):
    run(engine.update_weights(dict(params, final_norm={"scale": np.ones(3, np.float32)}), "2"))
  # From an HF checkpoint, as with SGLang's update_weights_from_disk.
  hf_io.save_hf(params, cfg, str(tmp_path / "hf"))
  run(engine.update_weights_from_disk(str(tmp_path / "hf"), weight_version="3"))
  from_disk = gather(engine, PROMPTS[:1], [GREEDY])[0]
  assert from_disk.output_ids == before.output_ids and from_disk.weight_version == "3"


def test_invalid_ids_raise_and_too_long_prompts_fail(tiny):
  cfg, params = tiny
  engine = JaxEngine(params, cfg, max_batch=4, max_total_len=16)
  with pytest.raises(InvalidTokenIdsError, match=r"prompt_ids\[1\] = 512"):
    run(engine.generate([3, 512], GREEDY))
  with pytest.raises(InvalidTokenIdsError, match=r"prompt_ids\[0\] = -1"):
    run(engine.generate([-1], GREEDY))
  result = run(engine.generate(list(range(10)), GREEDY))
  assert result.finish_reason == "failed" and "max_total_len 16" in result.error


def test_abort_queued_and_running_requests(tiny):
  cfg, params = tiny
  engine = JaxEngine(params, cfg, max_batch=2)
  # The first batch waits for the aborts, so a loaded machine cannot finish it unseen.
  gate, generate_batch = threading.Event(), engine._generate_batch
  engine._generate_batch = lambda *a: gate.wait(60) and generate_batch(*a)

  async def go():
    tasks = [asyncio.create_task(engine.generate(p, GREEDY, rid=f"r{i}"))
             for i, p in enumerate(PROMPTS)]
    while "r0" not in engine.running_rids:  # r0 and r1 run as one batch, r2 is queued
      await asyncio.sleep(0.001)
    await engine.abort("r2")
    await engine.abort("r0")
    gate.set()
    return await asyncio.gather(*tasks)
  r0, r1, r2 = run(go())
  assert (r2.finish_reason, r2.output_ids) == ("abort", [])
  assert r0.finish_reason == "abort" and len(r0.output_ids) == 8
  assert r1.finish_reason == "length"


def test_shapes_are_bucketed(tiny):
  cfg, params = tiny
  assert [bucket(n, 16) for n in (1, 16, 17, 100)] == [16, 16, 32, 128]
  # Prompt lengths: quarter steps between powers of two, so at most 1.25x padding above the
  # minimum and four shapes per doubling.
  assert [length_bucket(n, 16) for n in (1, 16, 17, 257, 280, 350, 448, 449)] == [
      16, 16, 20, 320, 320, 384, 448, 512]
  sizes = [length_bucket(n, 16) for n in range(1, 2049)]
  assert all(n <= b <= max(16, 1.25 * n) for n, b in zip(range(1, 2049), sizes))
  assert len(set(b for b in sizes if 512 < b <= 1024)) == 4
  engine = JaxEngine(params, cfg, max_batch=4)
  gather(engine, PROMPTS[:2], [GREEDY] * 2)
  compiled = D.generate_jit._cache_size()
  other = SamplingParams(temperature=0.5, top_k=4, max_new_tokens=11, stop_token_ids=(9,))
  gather(engine, [[1] * 13, [2, 3]], [other, GREEDY])  # same buckets: no new compile
  assert D.generate_jit._cache_size() == compiled


def test_engine_dtype_sets_the_in_process_engines_precision(tiny):
  """rollout.engine_dtype: the engine computes in it, the trainer's config is untouched; an
  unknown dtype, or one asked of an SGLang server, is refused."""
  from carr_jax.jobs import components
  from configs import base
  cfg, params = tiny
  config = base.get_config()
  config.rollout.engine_dtype = "bfloat16"
  engine = components.engine(config, params, cfg, weight_version="0")
  try:
    assert engine.cfg.compute_dtype == "bfloat16" and cfg.compute_dtype == "float32"
  finally:
    asyncio.run(engine.close())
  with pytest.raises(ValueError, match="engine_dtype must be"):
    components.EngineConfig(engine_dtype="float16")
  with pytest.raises(ValueError, match="SGLang server"):
    components.EngineConfig(engine="sglang", sglang_urls="http://127.0.0.1:1",
                            engine_dtype="bfloat16")
