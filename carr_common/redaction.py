"""Redaction of secrets from error text: API keys, Authorization-like values, URL passwords.

Stdlib only and importing nothing of ours, so every room may use it: the judge's LLM client
(judge/llm.py) and the SGLang rollout client (rollout/engines/sglang.py) pass every HTTP
failure's text through `redact` before it is stored or logged, because an endpoint or a
gateway may echo the request's headers, and a server URL may carry `user:password@`.
"""
from __future__ import annotations

import re

REDACTED = "[REDACTED]"
# `Authorization: Bearer x`, `"x-api-key": "x"`, `api_key=x`, `token: x` ... (header or JSON).
_CREDENTIAL_FIELD = re.compile(
    r"""(?i)((?:proxy-)?authorization|x-api-key|api[-_ ]?key|access[-_ ]?token|secret|"""
    r"""token|password)(["']?\s*[:=]\s*["']?)((?:bearer|basic|token)\s+)?[^\s"',;}\]]+""")
_SCHEME_VALUE = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_KEY_LIKE = re.compile(r"\bsk-[A-Za-z0-9_-]{8,}")  # OpenAI / DeepSeek style keys
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@:]*:[^/\s@]*@")


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
  """`text` without any of `secrets`, Authorization-like values or URL credentials."""
  for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
    text = text.replace(secret, REDACTED)
  text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
  text = _CREDENTIAL_FIELD.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
  text = _SCHEME_VALUE.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
  return _KEY_LIKE.sub(REDACTED, text)
