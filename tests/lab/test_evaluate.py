"""Evaluation (carr_jax/jobs/evaluate.py, carr_jax/evaluation/report.py), eval-file decryption.

  .venv/bin/python -m pytest tests/lab/test_evaluate.py -q

The policy is a scripted engine: it implements `Engine`, reads the question id and the sample
index from the request id, and answers with text the real Qwen3 tokenizer encodes. Tools are
a real BrowserSession over the synthetic world's BM25 corpus; grading is the gold judge. So
accuracy, pass@k, tool calls and rubric numbers have values computable by hand.
"""
from __future__ import annotations

import asyncio
import base64
import copy
import hashlib
import json
import os
import subprocess
import sys

import pytest
from PIL import Image

from carr_jax.evaluation import crypto as eval_crypto
from carr_jax.evaluation import report as eval_report
from carr_jax.evaluation.store import RESULTS, TRAJECTORIES
from carr_jax.jobs import evaluate as ev
from carr_jax.rl import step_stats
from judge import Judge, JudgeConfig
from lab.world import build_world
from rollout import chat
from rollout.agent import RolloutConfig
from rollout.engines.base import QWEN3_VOCAB_SIZE, Engine, GenerationResult, validate_token_ids
from tests.carr_jax.test_tokenizer import qwen3_tokenizer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K = 2  # samples per question


class ScriptedEngine(Engine):
  """`policy(question_id, sample_index, turn, prompt_text)` -> the turn's text."""

  vocab_size = QWEN3_VOCAB_SIZE

  def __init__(self, fmt, policy, block=None):
    self.fmt, self.policy, self.block = fmt, policy, block
    self.seen: list[str] = []  # question ids, one per generate call

  async def generate(self, prompt_ids, params, rid=None, routes_from=None):
    validate_token_ids(prompt_ids, self.vocab_size)
    qid, sample, turn = rid.rsplit("/", 2)
    self.seen.append(qid)
    if qid == self.block:  # never answers: an evaluation interrupted while this runs
      await asyncio.Event().wait()
    ids = self.fmt.encode(self.policy(qid, int(sample), int(turn), self.fmt.decode(prompt_ids)))
    ids = ids[:params.max_new_tokens]
    finish = "stop" if ids[-1] in params.stop_token_ids else "length"
    return GenerationResult(ids, [-0.1] * len(ids), finish, "scripted", len(prompt_ids), rid)

  async def abort(self, rid):
    pass

  @property
  def weight_version(self):
    return "scripted"


def turn(reasoning, content="", calls=()):
  return chat.completion_text(reasoning, content, list(calls))


def answer(name, urls):
  cites = " ".join(f"[[{k}]({u})]" for k, u in enumerate(urls, 1))
  refs = "\n".join(f"{k}. {u}" for k, u in enumerate(urls, 1))
  return turn("Done.", f"## Explanation with Citations\nIt is {name} {cites}.\n\n"
                       f"## Exact Answer\n{name}\n\n## References\n{refs}")


def correct_rule(index, sample):
  """Question index q, sample s: right for q % 3 == 0, for q % 3 == 1 only on sample 0."""
  return index % 3 == 0 or (index % 3 == 1 and sample == 0)


def make_policy(records, hops_visited=1):
  """search E0 -> open it (-> search E1 -> open it) -> answer (right or wrong by the rule)."""
  by_id = {r["id"]: (i, r["metadata"]["gold"]) for i, r in enumerate(records)}

  def policy(qid, sample, turn_index, prompt):
    index, gold = by_id[qid]
    entities = [gold["entities"][f"E{i}"] for i in range(hops_visited)]
    if turn_index < 2 * hops_visited:
      e = entities[turn_index // 2]
      if turn_index % 2 == 0:
        return turn(f"Look up {e['name']}.", "", [{"name": "browser.search",
                                                    "arguments": {"query": e["name"], "num": 3}}])
      return turn("Open it.", "", [{"name": "browser.open", "arguments": {"id": e["url"]}}])
    name = entities[0]["name"] if correct_rule(index, sample) else "Nobody In Particular"
    return answer(name, [e["url"] for e in entities])
  return policy


@pytest.fixture(scope="module")
def fmt():
  return chat.ChatFormat(qwen3_tokenizer())


@pytest.fixture(scope="module")
def world():
  return build_world(2, 80, 14, eval_fraction=0.5)


def run_eval(world, fmt, out, engine, cfg=RolloutConfig(), in_flight=2, records=None):
  records = records if records is not None else world.eval
  store = ev.ResultStore(str(out), ev.run_settings(cfg, K, "source:eval", "scripted"))
  judge = Judge(JudgeConfig(backend="gold", use_cache=False))
  summary = asyncio.run(ev.evaluate_records(records, engine, fmt, world.corpus_backend(), judge,
                                            cfg, store, K, in_flight, progress=False))
  return summary, judge


def test_summary_on_the_world_eval_split_matches_hand_computed_values(world, fmt, tmp_path):
  records = world.eval
  assert len(records) >= 6
  summary, judge = run_eval(world, fmt, tmp_path, ScriptedEngine(fmt, make_policy(records)))
  right = [[correct_rule(q, s) for s in range(K)] for q in range(len(records))]
  assert summary["questions"] == len(records) and summary["samples"] == K * len(records)
  assert summary["accuracy"] == pytest.approx(sum(map(sum, right)) / (K * len(records)))
  assert summary[f"avg@{K}"] == pytest.approx(summary["accuracy"])
  assert summary[f"pass@{K}"] == pytest.approx(sum(map(any, right)) / len(records))
  if len(records) == 7:  # the world of this seed, by hand: 2 + 1 + 0 + 2 + 1 + 0 + 2 of 14
    assert summary["accuracy"] == pytest.approx(8 / 14) and summary[f"pass@{K}"] == 5 / 7
  # Every episode: search, open, answer.
  assert summary["tool_calls_mean"] == 2.0 and summary["turns_mean"] == 3.0
  assert summary["tool_calls_search_mean"] == summary["tool_calls_open_mean"] == 1.0
  assert summary["well_formed_tool_call_rate"] == pytest.approx(2 / 3)
  assert summary["well_formed_turn_rate"] == 1.0 and summary["completed_rate"] == 1.0
  assert summary["truncation_rate"] == summary["failure_rate"] == 0.0
  assert 0 < summary["context_tokens_mean"] < RolloutConfig().max_context_tokens
  assert summary["cited_pages_mean"] == 1.0 and summary["judge_error_rate"] == 0.0
  assert judge.metrics()["trajectories"] == K * len(records)
  # Per-question lines: the gold judge's view of each sample.
  rows = [json.loads(line) for line in open(tmp_path / RESULTS)]
  assert sorted(r["id"] for r in rows) == sorted(r["id"] for r in records)
  for row in rows:
    index = next(i for i, r in enumerate(records) if r["id"] == row["id"])
    gold = records[index]["metadata"]["gold"]
    own = sum(r["placeholders"] == ["E0"] for r in gold["rubrics"])  # on E0's page
    for k, s in enumerate(row["samples"]):
      right = correct_rule(index, k)
      assert s["outcome"] == float(right) and s["rubrics_total"] == len(gold["rubrics"])
      # Naming E0 and citing its opened page satisfies exactly E0's own rubrics.
      expected = own if right else 0
      assert (s["rubrics_identified"], s["rubrics_supported"], s["rubrics_connected"]) == (
          expected, expected, expected)
  assert json.loads((tmp_path / ev.SUMMARY).read_text()) == summary
  assert len(open(tmp_path / TRAJECTORIES).readlines()) == K * len(records)


def test_interrupted_evaluation_resumes_without_rejudging(world, fmt, tmp_path):
  records = world.eval
  policy = make_policy(records)
  blocked = records[3]["id"]
  engine = ScriptedEngine(fmt, policy, block=blocked)
  cfg = RolloutConfig()

  async def interrupted():
    store = ev.ResultStore(str(tmp_path), ev.run_settings(cfg, K, "source:eval", "scripted"))
    judge = Judge(JudgeConfig(backend="gold", use_cache=False))
    task = asyncio.create_task(ev.evaluate_records(
        records, engine, fmt, world.corpus_backend(), judge, cfg, store, K, 1, progress=False))
    while len(store.rows) < 3:  # one question at a time: 3 graded, the 4th hangs
      await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    task.cancel()  # what Ctrl-C does to asyncio.run
    with pytest.raises(asyncio.CancelledError):
      await task
  asyncio.run(interrupted())
  before = (tmp_path / RESULTS).read_bytes()
  assert len(before.splitlines()) == 3
  with open(tmp_path / RESULTS, "ab") as f:  # and a kill in the middle of a write
    f.write(b'{"id": "' + records[5]["id"].encode() + b'", "samp')

  fresh = ScriptedEngine(fmt, policy)
  summary, judge = run_eval(world, fmt, tmp_path, fresh)
  done = {json.loads(line)["id"] for line in before.splitlines()}
  assert done == {r["id"] for r in records[:3]}
  assert not done & set(fresh.seen) and set(fresh.seen) == {r["id"] for r in records[3:]}
  assert judge.metrics()["trajectories"] == K * (len(records) - 3)  # graded ones not re-judged
  after = (tmp_path / RESULTS).read_bytes()
  assert after.startswith(before) and len(after.splitlines()) == len(records)
  assert summary["accuracy"] == pytest.approx(
      sum(correct_rule(q, s) for q in range(len(records)) for s in range(K)) / (K * len(records)))
  trajs = [json.loads(line) for line in open(tmp_path / TRAJECTORIES)]
  assert sorted((t["id"], t["sample_index"]) for t in trajs) == sorted(
      (r["id"], s) for r in records for s in range(K))
  # A third run has nothing left to do; other settings in the same directory are refused.
  third = ScriptedEngine(fmt, policy)
  assert run_eval(world, fmt, tmp_path, third)[0] == summary and third.seen == []
  with pytest.raises(ev.EvalError, match="max_tool_calls"):
    run_eval(world, fmt, tmp_path, third, RolloutConfig(max_tool_calls=5))


def test_tool_budget_sweep_table_and_plot(world, fmt, tmp_path):
  records = world.eval[:3]
  points = []
  for budget in (1, 2):  # budget 1 stops before the open: tool_limit, never an answer
    cfg = RolloutConfig(max_tool_calls=budget)
    summary, _ = run_eval(world, fmt, tmp_path / f"tools{budget}",
                          ScriptedEngine(fmt, make_policy(records)), cfg, records=records)
    points.append({"context_budget": cfg.max_context_tokens, "tool_budget": budget,
                   "summary": summary})
  assert points[0]["summary"]["accuracy"] == 0.0 and points[0]["summary"]["tool_limit_rate"] == 1
  assert points[1]["summary"]["accuracy"] == pytest.approx(
      sum(correct_rule(q, s) for q in range(3) for s in range(K)) / (3 * K))
  table = eval_report.write_sweep(points, tmp_path)
  lines = table.splitlines()[2:]
  assert lines[0].startswith("| 65536 | 1 | 0.000 |") and lines[1].startswith(
      f"| 65536 | 2 | {points[1]['summary']['accuracy']:.3f} |")
  with Image.open(tmp_path / "sweep.png") as image:
    assert image.format == "PNG" and image.size[0] > 400
  assert json.loads((tmp_path / "sweep.json").read_text()) == points


def test_table2_on_questions_every_run_solved(world, fmt, tmp_path):
  full = [r for r in world.eval if r["metadata"]["gold"]["hops"] >= 2]
  bare = copy.deepcopy(full)  # benchmarks ship without rubrics
  for r in bare:
    r["metadata"]["remote_env_info"]["rubrics"] = []
    r["metadata"]["gold"]["rubrics"] = []
  for name, hops in (("one_hop", 1), ("two_hops", 2)):
    run_eval(world, fmt, tmp_path / name, ScriptedEngine(fmt, make_policy(bare, hops)),
             records=bare)
  runs = {n: str(tmp_path / n) for n in ("one_hop", "two_hops")}
  result = eval_report.compare_runs(runs)
  solved = [r["id"] for i, r in enumerate(full) if correct_rule(i, 0)]
  assert result["questions"] == sorted(solved)
  one, two = result["runs"]["one_hop"], result["runs"]["two_hops"]
  assert (one["cited_pages"], two["cited_pages"]) == (1.0, 2.0)
  assert one["connected"] is None  # no rubrics, nothing to count
  # Re-judged against the records with rubrics, as the paper does for its subset.
  records = {r["id"]: r for r in full}
  judge = Judge(JudgeConfig(backend="gold", use_cache=False))
  rejudged = {n: asyncio.run(eval_report.rejudge(d, result["questions"], records, judge))
              for n, d in runs.items()}
  result = eval_report.compare_runs(runs, rejudged)
  one, two = result["runs"]["one_hop"], result["runs"]["two_hops"]
  assert one["samples"] == two["samples"] == sum(
      correct_rule(i, s) for i, r in enumerate(full) if correct_rule(i, 0) for s in range(K))
  # Citing E1's page too supports (and connects) the E0-E1 rubric and E1's own ones.
  assert two["supported"] > one["supported"] and two["connected"] > one["connected"]
  assert 0 < one["connected_fraction"] < two["connected_fraction"] <= 1.0
  table = eval_report.compare_table(result)
  assert f"{len(solved)} questions solved by every run" in table
  assert "| two_hops |" in table and "| one_hop |" in table


_CALL = {"role": "assistant", "content": "", "tool_calls": [{"name": "browser.find"}]}
_TEXT = {"role": "assistant", "content": "raw text"}
_TOOL = {"role": "tool", "content": [{"output": "x"}]}
_USER = {"role": "user", "content": "q"}
# (trajectory, (turns, well-formed tool-call turns, ill-formed turns))
TURN_CASES = [
    ({"status": "completed", "history": [_USER, _CALL, _TOOL, _TEXT]}, (2, 1, 0)),
    ({"status": "ill_formed", "error_kind": "bad_arguments",
      "history": [_USER, _CALL, _TOOL, _CALL]}, (2, 1, 1)),
    ({"status": "ill_formed", "error_kind": "missing_think_end",
      "history": [_USER, _CALL, _TOOL, _TEXT]}, (2, 1, 1)),
    ({"status": "truncated", "error_kind": "turn_token_limit", "history": [_USER, _TEXT]},
     (1, 0, 1)),
    # The observation did not fit: the turn itself was a good tool call.
    ({"status": "truncated", "error_kind": "context_limit", "history": [_USER, _CALL]},
     (1, 1, 0)),
    ({"status": "tool_limit", "history": [_USER, _CALL, _TOOL, _CALL]}, (2, 2, 0)),
    ({"status": "completed", "format_errors": ["bad_tool_call_json", "bad_arguments"],
      "history": [_USER, _TEXT, _TOOL, _CALL, _TOOL, _CALL, _TOOL, _TEXT]}, (4, 1, 2)),
    ({"status": "failed", "history": []}, (0, 0, 0)),
]


def test_turn_stats_count_ill_formed_and_cut_turns():
  for traj, expected in TURN_CASES:
    got = step_stats.turn_stats(traj)
    assert (got["turns"], got["tool_call_turns"], got["ill_formed_turns"]) == expected, traj


def test_trainer_rollout_metrics_report_the_same_turn_rates():
  trajs = [{**t, "token_ids": [1, 2, 3], "loss_mask": [0, 1, 1]} for t, _ in TURN_CASES]
  m = step_stats.rollout_metrics(trajs)
  turns = sum(e[0] for _, e in TURN_CASES)  # 14 turns, 7 good tool calls, 5 ill-formed
  assert m["rollout/turns"] == pytest.approx(turns / len(trajs))
  assert m["rollout/well_formed_tool_call_rate"] == pytest.approx(7 / 14)
  assert m["rollout/well_formed_turn_rate"] == pytest.approx(1 - 5 / 14)
  assert m["rollout/completed_rate"] == pytest.approx(2 / 8)


def test_eval_records_get_stable_ids_and_bad_ones_name_the_field(world, tmp_path):
  path = tmp_path / "bench.jsonl"
  rows = [{k: v for k, v in r.items() if k != "id"} for r in world.eval[:2]]
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  assert [r["id"] for r in ev.load_eval_records(str(path))] == ["bench-00001", "bench-00002"]
  path.write_text(json.dumps({**rows[0], "label": 3}) + "\n")
  with pytest.raises(ValueError, match="bench.jsonl:1: label"):
    ev.load_eval_records(str(path))
  path.write_text("".join(json.dumps({**r, "id": "same"}) + "\n" for r in rows))
  with pytest.raises(ev.EvalError, match="duplicate id 'same'"):
    ev.load_eval_records(str(path))


# ---------------------------------------------------------------- decryption


def envelope(plaintext: bytes, password: str) -> str:
  return json.dumps({"format": eval_crypto.ENVELOPE_FORMAT, "filename": "x.jsonl",
                     "size": len(plaintext),
                     "ciphertext_b64": eval_crypto.xor_encrypt(plaintext, password)})


def test_keystream_is_the_repeated_sha256_of_the_password():
  digest = hashlib.sha256("pässword".encode()).digest()
  assert eval_crypto.keystream("pässword", 70) == digest * 2 + digest[:6]
  ciphertext = base64.b64encode(bytes(a ^ b for a, b in zip(b"hello world", digest))).decode()
  assert eval_crypto.xor_decrypt(ciphertext, "pässword") == b"hello world"


def test_decrypt_envelopes_and_fields(world, tmp_path):
  plain = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in world.eval[:3]).encode()
  (tmp_path / "enc").mkdir()
  (tmp_path / "enc" / "bench.jsonl.enc").write_text(envelope(plain, "s3cret"))
  (tmp_path / "enc" / "other.jsonl.enc").write_text(envelope(b'{"a": 1}\n', "s3cret"))
  outs = eval_crypto.decrypt_path(tmp_path / "enc", tmp_path / "dec", "s3cret")
  assert [p.name for p in outs] == ["bench.jsonl", "other.jsonl"]
  assert (tmp_path / "dec" / "bench.jsonl").read_bytes() == plain
  assert len(ev.load_eval_records(str(tmp_path / "dec" / "bench.jsonl"))) == 3
  with pytest.raises(eval_crypto.DecryptError, match="wrong password"):
    eval_crypto.decrypt_envelope(envelope(plain, "s3cret"), "guess")
  with pytest.raises(eval_crypto.DecryptError, match="format"):
    eval_crypto.decrypt_envelope('{"format": "other"}', "s3cret")
  # BrowseComp style: encrypted fields, each row's password in its canary field.
  rows = [{"problem": eval_crypto.xor_encrypt(f"question {i}".encode(), f"canary{i}"),
           "answer": eval_crypto.xor_encrypt(f"answer {i}".encode(), f"canary{i}"),
           "canary": f"canary{i}"} for i in range(3)]
  text = "".join(json.dumps(r) + "\n" for r in rows)
  out = [json.loads(line) for line in eval_crypto.decrypt_fields(
      text, ["problem", "answer"], None, "canary").decode().splitlines()]
  assert [(r["problem"], r["answer"]) for r in out] == [(f"question {i}", f"answer {i}")
                                                        for i in range(3)]
  with pytest.raises(eval_crypto.DecryptError, match=r":2: field 'answer'"):
    eval_crypto.decrypt_fields(text.replace(rows[1]["answer"], "%%%"), ["problem", "answer"],
                               None, "canary")


def test_decrypt_cli_reads_the_password_from_the_environment_only(tmp_path):
  secret = "correct horse battery staple"
  plain = b'{"id": "q1", "label": "x"}\n'
  (tmp_path / "in.jsonl.enc").write_text(envelope(plain, secret))
  env = {**os.environ, "PYTHONPATH": REPO, "MY_EVAL_PW": secret}
  proc = subprocess.run([sys.executable, "-m", "carr_jax.eval_crypto",
                         f"--input={tmp_path / 'in.jsonl.enc'}", f"--output={tmp_path / 'o.jsonl'}",
                         "--password-env=MY_EVAL_PW"], env=env, capture_output=True, text=True,
                        timeout=60, check=True)
  assert (tmp_path / "o.jsonl").read_bytes() == plain
  written = b"".join(p.read_bytes() for p in tmp_path.iterdir())
  assert secret not in proc.stdout + proc.stderr and secret.encode() not in written
  # No variable and no terminal: the getpass prompt gets EOF and nothing is written.
  env.pop("MY_EVAL_PW")
  proc = subprocess.run([sys.executable, "-m", "carr_jax.eval_crypto",
                         f"--input={tmp_path / 'in.jsonl.enc'}", f"--output={tmp_path / 'p.jsonl'}",
                         "--password-env=MY_EVAL_PW"], env=env, capture_output=True, text=True,
                        timeout=60, stdin=subprocess.DEVNULL)
  assert proc.returncode != 0 and not (tmp_path / "p.jsonl").exists()


def test_a_checkpoint_cannot_be_given_to_an_sglang_evaluation(tmp_path):
  """The server samples from the weights it was launched with: a --checkpoint would be
  silently ignored, so it is an error (before any work)."""
  from lab.configs import demo_cpu
  config = demo_cpu.get_config()
  config.rollout.engine, config.rollout.sglang_urls = "sglang", "http://127.0.0.1:9"
  opts = ev.EvalOptions(data="source:eval", checkpoint=str(tmp_path / "ckpt"),
                        out=str(tmp_path / "out"))
  with pytest.raises(ev.EvalError, match="launch it on the checkpoint's HF export"):
    ev.run_evaluations(config, opts)
  assert not (tmp_path / "out").exists()

