"""The reward server under hostile input: caps, deadline, surrogates, and a 2,000-body fuzz.

Real uvicorn on 127.0.0.1. Over-limit bodies get 413/400 naming the JudgeConfig key; deep
JSON is a 400, not a 500; a lone surrogate in the judge's reply or the request is scored, not a
500; judging past `deadline_s` is reward 0 with reason "deadline". The fuzz sends 2,000
generated bodies (mutations, nesting, surrogates, invalid UTF-8, size extremes) and expects
0 × 5xx, 0 logged exceptions, a stated reason for every zero reward, every response within
30 s and /health, polled throughout, within 1 s.
Run: python -m pytest tests/judge/test_server_limits.py -q
"""
import asyncio
import collections
import copy
import json
import logging
import os
import random
import re
import socket
import subprocess
import sys
import time

import httpx
import pytest

from judge import Judge, JudgeConfig, to_request
from judge import example_world as ew
from judge.server import create_app
from judge.testing import Reply, ScriptedServer, ServedApp, canned_reply, prompt_kind
from rollout.engines.sglang_launcher import free_port
from tests.judge.test_fuzz import _mutate
from tests.judge.test_server import ROOT, _wait_healthy

LIMITS = dict(max_body_bytes=200_000, max_rubrics=50, max_history_messages=40,
              max_json_depth=24)
GOLD = JudgeConfig(backend="gold", **LIMITS)


def _valid():
  return to_request(ew.good_trajectory(), ew.example_task(), 0.5)


def _post(http, body: bytes, **kw):
  return http.post("/evaluate", content=body, headers={"content-type": "application/json"},
                   **kw)


@pytest.fixture(scope="module")
def http():
  with ServedApp(create_app(Judge(GOLD))) as served, httpx.Client(base_url=served.url,
                                                                  timeout=30) as client:
    yield client


def test_body_over_the_cap_is_413_naming_the_limit(http):
  big = json.dumps({**_valid(), "label": "x" * 250_000}).encode()
  response = _post(http, big)
  assert response.status_code == 413
  assert "max_body_bytes" in response.json()["detail"]

  def chunks():  # no Content-Length: the cap is enforced while reading
    for _ in range(30):
      yield b" " * 10_000

  response = http.post("/evaluate", content=chunks())
  assert response.status_code == 413 and "max_body_bytes" in response.json()["detail"]


def test_rubric_and_history_caps_are_400_naming_the_limit(http):
  request = _valid()
  request["remote_env_info"]["rubrics"] = ["<E0> is x."] * 50_000
  start = time.perf_counter()
  response = http.post("/evaluate", json=request)
  assert response.status_code in (400, 413)  # 50,000 rubrics are also over the byte cap
  with ServedApp(create_app(Judge(GOLD.replace(max_body_bytes=10**8)))) as served:
    response = httpx.post(served.url + "/evaluate", json=request, timeout=30)
    assert response.status_code == 400
    assert response.json()["detail"] == ("remote_env_info.rubrics: 50000 rubrics, the limit "
                                         "is 50 (max_rubrics)")
    assert httpx.get(served.url + "/health").status_code == 200
  assert time.perf_counter() - start < 10
  request = _valid()
  request["history"] = request["history"] + [{"role": "user", "content": "x"}] * 40
  response = http.post("/evaluate", json=request)
  assert response.status_code == 400
  assert "the limit is 40 (max_history_messages)" in response.json()["detail"]


@pytest.mark.parametrize("depth", [25, 2_000, 50_000])
def test_deeply_nested_json_is_400(http, depth):
  for body in ("[" * depth + "]" * depth,
               json.dumps(_valid())[:-1] + ', "x": ' + "[" * depth + "]" * depth + "}"):
    response = _post(http, body.encode())
    assert response.status_code == 400, depth
    assert response.json()["detail"].startswith("body: JSON nested deeper than 24 levels")
  assert http.post("/evaluate", json=_valid()).json()["reward"] == pytest.approx(1.0)


def test_lone_surrogates_in_request_and_judge_reply_are_scored_not_500():
  escaped = "\\ud800"
  raw = ('{"choices": [{"message": {"content": "```json\\n{\\"extracted_final_answer\\": '
         '\\"x' + escaped + '\\", \\"reasoning\\": \\"\\", \\"correct\\": \\"no\\"}\\n```"}}]}')

  def script(body):
    return Reply(raw_body=raw) if prompt_kind(body) == "outcome" else canned_reply(body)

  request = _valid()
  request["history"][-1]["content"] += "\udcff"
  body = json.dumps(request).encode()  # ensure_ascii: the surrogate travels as an escape
  with ScriptedServer(script) as llm:
    config = JudgeConfig(base_url=llm.base_url, model="m", api_key_env="", **LIMITS)
    with ServedApp(create_app(Judge(config))) as served, httpx.Client(
        base_url=served.url, timeout=30) as client:
      response = _post(client, body)
  assert response.status_code == 200
  result = response.json()
  assert result["breakdown"]["extracted_answer"] == "x\ufffd"
  assert result["outcome_reward"] == 0.0 and result["rubric_reward"] == 1.0


@pytest.mark.serial
def test_deadline_gives_zero_with_reason():
  with ScriptedServer(canned_reply, delay=1.5) as llm:
    config = JudgeConfig(base_url=llm.base_url, model="m", api_key_env="", deadline_s=0.3)
    with ServedApp(create_app(Judge(config))) as served, httpx.Client(
        base_url=served.url, timeout=30) as client:
      start = time.perf_counter()
      result = client.post("/evaluate", json=_valid()).json()
      elapsed = time.perf_counter() - start
      metrics = client.get("/metrics").json()
    while llm.in_flight:  # let the abandoned replies finish before the server stops
      time.sleep(0.05)
  assert elapsed < 1.2
  assert result["reward"] == 0.0 and result["rubric_scores"]["0"]["score"] == 0
  for which in ("outcome", "rubric"):
    assert result["breakdown"][f"{which}_reason"] == "deadline: judging took more than 0.3 s"
  assert metrics["deadlines"] == 1
  with pytest.raises(ValueError, match="deadline_s"):
    JudgeConfig(deadline_s=0)


# ------------------------------------------------------- big and slow bodies (event loop)


def test_a_body_of_too_many_json_values_is_400_before_parsing():
  """10^6 empty objects (3 MB, within the byte cap) are refused by counting, not parsing."""
  body = (json.dumps(_valid())[:-1] + ', "x": [' + ",".join(["{}"] * 10**6) + "]}").encode()
  with ServedApp(create_app(Judge(GOLD.replace(max_body_bytes=10**8)))) as served:
    start = time.perf_counter()
    response = httpx.post(served.url + "/evaluate", content=body, timeout=30)
    elapsed = time.perf_counter() - start
  assert response.status_code == 400
  assert re.fullmatch(r"body: up to \d{7} JSON values, the limit is 262144 \(max_json_values\)",
                      response.json()["detail"])
  assert elapsed < 5  # the count is a byte scan (~10 ms); parsing took seconds


def _big_bodies(kind: str) -> tuple[bytes, int]:
  """(body, how many to send at once): 8 bodies of 250,000 values (just under
  max_json_values, 6 MB each), or 50 of 4096 messages (the history cap, 13.7 MB each)."""
  request = _valid()
  if kind == "values":
    request["x"] = ["a" * 20] * 250_000
    return json.dumps(request).encode(), 8
  history = request["history"]
  filler = {"role": "user", "content": "lorem ipsum " * 290}
  request["history"] = history[:1] + [filler] * (4096 - len(history)) + history[1:]
  return json.dumps(request).encode(), 50


_PROBE = """
import json, sys, threading, time
import httpx
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
latencies = []
with httpx.Client(base_url=sys.argv[1], timeout=60) as client:
  while not done.is_set():
    start = time.perf_counter()
    assert client.get("/health").status_code == 200
    latencies.append(time.perf_counter() - start)
    done.wait(0.02)
print(json.dumps(latencies))
"""


def _health_probe(url: str) -> subprocess.Popen:
  """A process of its own that GETs /health every 20 ms until its stdin closes, then prints the
  latencies (s) as JSON: the sender's own work on its big uploads is not counted as the
  server's."""
  return subprocess.Popen([sys.executable, "-c", _PROBE, url], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.parametrize("kind", ["values", "messages"])
def test_health_answers_within_a_second_while_big_bodies_parse(kind):
  """Concurrent big bodies sent to the real server process: /health, polled from another
  process, stays under 1 s throughout, and every body is scored with its outcome (2 quiet cores:
  50 x 13.7 MB took at most 3.8 s each, /health at most 0.67 s; before parsing left the event
  loop, 57-61 s and 16.8 s). The prober is its own process: polled from the sending loop, its
  first GET waited behind the uploads (1.07 s in CI, the server not the cause)."""
  body, count = _big_bodies(kind)
  port = free_port()
  url = f"http://127.0.0.1:{port}"
  process = subprocess.Popen([sys.executable, "-m", "judge.server", "--backend", "gold",
                              "--port", str(port), "--max-body-bytes", str(10**8)], cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

  async def load():
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
      return await asyncio.gather(*[client.post("/evaluate", content=body)
                                    for _ in range(count)])
  try:
    _wait_healthy(process, url)
    probe = _health_probe(url)
    try:
      results = asyncio.run(load())
    finally:
      latencies = json.loads(probe.communicate(timeout=60)[0])
  finally:
    process.terminate()
    process.wait(timeout=20)
  assert [r.status_code for r in results] == [200] * count
  assert all(r.json()["reward"] == pytest.approx(1.0) for r in results)
  assert all(r.json()["outcome_reward"] == 1.0 for r in results)
  assert all(r.json()["breakdown"]["outcome_reason"] for r in results)
  assert len(latencies) >= 5 and max(latencies) < 1.0, max(latencies)


def _raw_request(url: str, declared: int, sent: bytes) -> socket.socket:
  """A POST /evaluate declaring `declared` body bytes of which only `sent` goes out."""
  host, port = url.removeprefix("http://").split(":")
  sock = socket.create_connection((host, int(port)), timeout=10)
  sock.sendall(b"POST /evaluate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               + f"Content-Length: {declared}\r\n\r\n".encode() + sent)
  return sock


def test_a_half_sent_body_gets_408_and_a_disconnect_no_traceback(caplog):
  config = GOLD.replace(body_timeout_s=0.5)
  with ServedApp(create_app(Judge(config))) as served:
    with _raw_request(served.url, 1000, b'{"history": [') as sock:
      start = time.perf_counter()
      reply = sock.recv(4096).decode()
      elapsed = time.perf_counter() - start
    assert reply.startswith("HTTP/1.1 408"), reply
    assert "not received within 0.5 s (body_timeout_s)" in reply and elapsed < 5
    with caplog.at_level(logging.INFO):
      _raw_request(served.url, 1000, b'{"history": [').close()
      deadline = time.monotonic() + 5
      while "disconnected" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)
      assert httpx.get(served.url + "/health").status_code == 200
  assert "/evaluate: the client disconnected before its body was complete" in caplog.text
  assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


# ------------------------------------------------------------------------------------ fuzz


def _nested(rng):
  depth = rng.choice([5, 23, 25, 900, 5_000, 100_000])
  open_, close = rng.choice([("[", "]"), ('{"a":', "}")])
  return open_ * depth + "1" + close * depth


def fuzz_body(rng: random.Random, valid: dict) -> bytes:
  """One generated /evaluate body (bytes); about half are well-formed JSON objects."""
  kind = rng.randrange(10)
  request = copy.deepcopy(valid)
  if kind <= 2:  # structural mutations of a valid request
    for _ in range(rng.randrange(1, 4)):
      request = _mutate(rng, request)
  elif kind == 3:  # surrogates (escaped and as invalid UTF-8 bytes) in text fields
    text = json.dumps(request)
    for _ in range(rng.randrange(1, 5)):
      at = text.find('"', rng.randrange(len(text))) + 1
      text = text[:at] + rng.choice(["\\ud800", "\\udfff\\ud800", "\\u0000"]) + text[at:]
    try:
      json.loads(text)
    except ValueError:
      text = json.dumps(request)
    return text.encode() if rng.random() < 0.8 else text.encode() + b"\xed\xa0\x80"
  elif kind == 4:  # nesting, alone or inside a field
    nest = _nested(rng)
    if rng.random() < 0.5:
      return nest.encode()
    text = json.dumps(request)
    return (text[:-1] + ', "history_extra": ' + nest + "}").encode()
  elif kind == 5:  # counts at and past the caps
    request["remote_env_info"]["rubrics"] = ["<E0> is x."] * rng.choice([0, 50, 51, 3000])
    request["history"] = request["history"][:1] * rng.choice([1, 40, 41, 500])
  elif kind == 6:  # sizes at and past the byte cap
    request["label"] = "é" * rng.choice([10, 90_000, 99_000, 150_000])
  elif kind == 7:  # odd numbers
    number = rng.choice(["NaN", "Infinity", "-1e999", "1e-999", "9" * 5000, "0.5", "true"])
    text = json.dumps(request).replace('"rubric_reward_ratio": 0.5',
                                       f'"rubric_reward_ratio": {number}')
    return text.encode()
  elif kind == 8:  # not JSON objects at all
    return rng.choice([b"", b"null", b"[]", b"{", b'{"history": ', b"\xff\xfe{}",
                       json.dumps(request).encode()[:rng.randrange(1, 500)]])
  return json.dumps(request, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")


class _Errors(logging.Handler):
  def __init__(self):
    super().__init__(logging.ERROR)
    self.records = []

  def emit(self, record):
    self.records.append(record)


@pytest.mark.serial
def test_two_thousand_fuzzed_bodies_no_5xx_and_every_zero_has_a_reason():
  """Also: no response takes 30 s or more, and /health, polled throughout, answers within 1 s."""
  rng = random.Random(2000)
  valid = _valid()
  errors = _Errors()
  loggers = [logging.getLogger(name) for name in ("judge", "uvicorn.error", "uvicorn")]
  for logger in loggers:
    logger.addHandler(errors)
  statuses = collections.Counter()
  zero_reasons = collections.Counter()
  slowest = 0.0
  try:
    with ServedApp(create_app(Judge(GOLD))) as served, httpx.Client(
        base_url=served.url, timeout=30) as client:
      probe = _health_probe(served.url)
      try:
        for _ in range(2_000):
          body = fuzz_body(rng, valid)
          start = time.perf_counter()
          response = _post(client, body)
          slowest = max(slowest, time.perf_counter() - start)
          statuses[response.status_code] += 1
          assert response.status_code in (200, 400, 413), response.text[:300]
          result = response.json()
          if response.status_code != 200:
            assert result["detail"].split(":")[0], result
            continue
          assert 0.0 <= result["reward"] <= 1.0
          breakdown = result["breakdown"]
          for which in ("outcome", "rubric"):
            reason = breakdown[f"{which}_reason"]
            assert reason and "internal judge error" not in reason, reason
            if result[f"{which}_reward"] == 0.0:
              zero_reasons[reason.split(":")[0][:40]] += 1
      finally:
        latencies = json.loads(probe.communicate(timeout=60)[0])
  finally:
    for logger in loggers:
      logger.removeHandler(errors)
  print(dict(statuses), len(zero_reasons), f"slowest {slowest:.2f} s",
        f"/health max {max(latencies):.3f} s of {len(latencies)}")
  assert slowest < 30
  assert len(latencies) >= 20 and max(latencies) < 1.0
  assert not errors.records, [r.getMessage() for r in errors.records][:3]
  assert sum(statuses.values()) == 2_000
  assert statuses[200] > 400 and statuses[400] > 400 and statuses[413] > 20
  assert len(zero_reasons) >= 5
