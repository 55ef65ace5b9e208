"""No API key leaks through an HTTP failure's text (issue 13, item 6).

A real endpoint on 127.0.0.1 answers every chat call with HTTP 401 whose body echoes the
request headers, as some gateways do. The key must not reach the error reason, the Breakdown,
the reward server's response, a results line, or the log.
Run: python -m pytest tests/judge/test_secrets.py -q
"""
import base64
import html
import json
import logging
import os
import pathlib
import subprocess
import sys
import urllib.parse

import fastapi
import httpx
import pytest

from carr_common.redaction import REDACTED, redact
from judge import Judge, JudgeConfig, to_request
from judge import example_world as ew
from judge.server import create_app
from judge.testing import ServedApp

KEY = "sk-loopback-0123456789abcdef"
OTHER = "Bearer other-secret-token-value"


def echoing_endpoint() -> fastapi.FastAPI:
  app = fastapi.FastAPI()

  @app.post("/v1/chat/completions")
  async def chat(request: fastapi.Request) -> fastapi.Response:
    headers = dict(request.headers)
    body = {"error": {"message": f"Invalid key {headers.get('authorization', '')[7:]}",
                      "request_headers": headers, "proxy": {"Authorization": OTHER}}}
    return fastapi.responses.JSONResponse(body, status_code=401)

  return app


def test_redact_removes_configured_keys_and_authorization_like_values():
  text = ('{"authorization": "Bearer abc.def-123456", "x-api-key": "k-9", '
          'token=tok123 "note": "key XYZ-SECRET-1 expired", Basic dXNlcjpwYXNzd29yZA==}')
  cleaned = redact(text, ("XYZ-SECRET-1",))
  for secret in ("abc.def-123456", "k-9", "tok123", "XYZ-SECRET-1", "dXNlcjpwYXNzd29yZA=="):
    assert secret not in cleaned
  assert cleaned.count(REDACTED) == 5 and '"note": "key' in cleaned
  assert redact("a plain error about tokens") == "a plain error about tokens"


def test_echoed_authorization_header_never_stored_or_logged(monkeypatch, caplog):
  monkeypatch.setenv("JUDGE_SECRET_TEST_KEY", KEY)
  caplog.set_level(logging.DEBUG)
  request = to_request(ew.good_trajectory(), ew.example_task(), 0.5)
  with ServedApp(echoing_endpoint()) as endpoint:
    config = JudgeConfig(base_url=endpoint.url + "/v1", model="m",
                         api_key_env="JUDGE_SECRET_TEST_KEY", retries=0)
    with ServedApp(create_app(Judge(config))) as served:
      # The endpoint does echo the key: the leak is real without redaction.
      echoed = httpx.post(endpoint.url + "/v1/chat/completions", json={},
                          headers={"authorization": f"Bearer {KEY}"}).text
      assert KEY in echoed
      response = httpx.post(served.url + "/evaluate", json=request, timeout=30)
  assert response.status_code == 200
  result = response.json()
  stored = json.dumps(result, ensure_ascii=False) + "\n"  # what evaluate writes per question
  assert result["reward"] == 0.0
  assert "HTTP 401" in result["breakdown"]["outcome_reason"]
  assert REDACTED in result["breakdown"]["outcome_reason"]
  for secret in (KEY, KEY[3:], "other-secret-token-value"):
    assert secret not in stored
    assert secret not in caplog.text


def test_user_info_in_the_judge_url_is_refused_without_echoing_it():
  """`--base-url http://user:PASSWORD@host/v1` would log the password in the start-up line
  and make the client send Basic auth: the real server process refuses it, naming the flag
  and not the password."""
  root = pathlib.Path(__file__).resolve().parents[2]
  password = "pw-loopback-9f8e7d6c5b4a"
  for url in (f"http://judge:{password}@127.0.0.1:9/v1", f"http://{password}@127.0.0.1:9/v1"):
    with pytest.raises(ValueError, match="base_url: must not hold user info") as error:
      JudgeConfig(base_url=url)
    assert password not in str(error.value)
    done = subprocess.run([sys.executable, "-m", "judge.server", "--base-url", url, "--port",
                           "9"], cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "base_url: must not hold user info" in done.stderr
    assert password not in done.stdout + done.stderr


SLASHED = "sk-loop/back+key=0123456789abcdef"  # a key with JSON- and URL-special characters


def _u_escaped(text, upper=False):
  return "".join(("\\u%04X" if upper else "\\u%04x") % ord(c) for c in text)


ENCODINGS = {
    "plain": lambda k: k, "upper case": str.upper, "swapped case": str.swapcase,
    "base64": lambda k: base64.b64encode(k.encode()).decode(),
    "base64url unpadded": lambda k: base64.urlsafe_b64encode(k.encode()).decode().rstrip("="),
    "base64 of the header": lambda k: base64.b64encode(f"Bearer {k}".encode()).decode(),
    "base64 of headers JSON": lambda k: base64.b64encode(
        json.dumps({"authorization": f"Bearer {k}"}).encode()).decode(),
    "URL-encoded": lambda k: urllib.parse.quote(k, safe=""),
    "URL-encoded, every byte": lambda k: "".join(f"%{ord(c):02X}" for c in k),
    "URL-encoded twice": lambda k: urllib.parse.quote(urllib.parse.quote(k, safe=""), safe=""),
    "form-encoded": lambda k: urllib.parse.quote_plus(f"key {k}"),
    "HTML decimal entities": lambda k: "".join(f"&#{ord(c)};" for c in k),
    "HTML hex entities": lambda k: "".join(f"&#x{ord(c):x};" for c in k),
    "HTML-escaped": html.escape,
    "JSON \\u escapes": _u_escaped, "JSON \\U escapes": lambda k: _u_escaped(k, True),
    "JSON \\/": lambda k: json.dumps(k)[1:-1].replace("/", "\\/"),
    "split halves": lambda k: f"{k[:len(k) // 2]} ... {k[len(k) // 2:]}",
    "halves, reversed order": lambda k: f"{k[len(k) // 2:]} / {k[:len(k) // 2]}",
    "straddling the 2,000-char cut": lambda k: "x" * 1990 + k,
    "inside a URL": lambda k: f"https://gw.example/err?key={urllib.parse.quote(k)}&a=1",
    "upper-case base64 input": lambda k: base64.b64encode(k.upper().encode()).decode(),
    "in a JSON string": lambda k: json.dumps({"echo": k}),
    "HTML-escaped in JSON": lambda k: json.dumps({"echo": html.escape(k)}),
}


def _leaks(text, key):
  """Whether `text` shows `key` or any of its encodings (or its first 10 characters)."""
  folded = text.casefold()
  return key[:10].casefold() in folded or any(
      encode(key).casefold() in folded for name, encode in ENCODINGS.items()
      if name != "straddling the 2,000-char cut")


def test_key_echoed_in_any_encoding_never_reaches_the_response(monkeypatch, caplog):
  """An endpoint echoes the key, in one of 24 encodings, in its 401 body: /evaluate's reasons
  and the log hold none of them (12 of 24 came back before: base64, HTML entities, \\u
  escapes, upper case, split halves, URL-encoded, JSON \\/, a key cut at 2,000 characters)."""
  assert len(ENCODINGS) >= 24
  monkeypatch.setenv("JUDGE_SECRET_TEST_KEY", SLASHED)
  caplog.set_level(logging.DEBUG)
  app, echo = fastapi.FastAPI(), {}

  @app.post("/v1/chat/completions")
  async def chat() -> fastapi.Response:
    return fastapi.responses.PlainTextResponse(f"denied: {echo['text']}", status_code=401)

  request = to_request(ew.good_trajectory(), ew.example_task(), 0.5)
  with ServedApp(app) as endpoint:
    config = JudgeConfig(base_url=endpoint.url + "/v1", model="m",
                         api_key_env="JUDGE_SECRET_TEST_KEY", retries=0)
    with ServedApp(create_app(Judge(config))) as served:
      for name, encode in ENCODINGS.items():
        echo["text"] = encode(SLASHED)
        result = httpx.post(served.url + "/evaluate", json=request, timeout=30).json()
        assert "HTTP 401" in result["breakdown"]["outcome_reason"], name
        assert not _leaks(json.dumps(result, ensure_ascii=False), SLASHED), name
  assert not _leaks(caplog.text, SLASHED)
