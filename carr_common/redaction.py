"""Redaction of secrets from error text: API keys, Authorization-like values, URL passwords.

Stdlib only and importing nothing of ours, so every room may use it: the judge's LLM client
(judge/llm.py) and the SGLang rollout client (rollout/engines/sglang.py) pass every HTTP
failure's text through `redact` before it is stored or logged, because an endpoint or a
gateway may echo the request's headers, and a server URL may carry `user:password@`.
"""
from __future__ import annotations

import base64
import binascii
import html
import re
import urllib.parse

REDACTED = "[REDACTED]"
# `Authorization: Bearer x`, `"x-api-key": "x"`, `api_key=x`, `token: x` ... (header or JSON).
_CREDENTIAL_FIELD = re.compile(
    r"""(?i)((?:proxy-)?authorization|x-api-key|api[-_ ]?key|access[-_ ]?token|secret|"""
    r"""token|password)(["']?\s*[:=]\s*["']?)((?:bearer|basic|token)\s+)?[^\s"',;}\]]+""")
_SCHEME_VALUE = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_KEY_LIKE = re.compile(r"\bsk-[A-Za-z0-9_-]{8,}")  # OpenAI / DeepSeek style keys
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@:]*:[^/\s@]*@")


ENCODED = f"{REDACTED} (the text echoed a configured key in an encoded form)"
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{12,}={0,2}")
_UNICODE_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")
_MIN_ENCODED = 8  # secrets at least this long are also looked for in encoded forms


def _decoded_views(text: str) -> list[str]:
  """`text` as the encodings an echoing server may use would read it back."""
  views = [text, html.unescape(text), urllib.parse.unquote(text),
           urllib.parse.unquote(urllib.parse.unquote(text)), urllib.parse.unquote_plus(text),
           text.replace("\\/", "/"),
           _UNICODE_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)]
  for run in _BASE64_RUN.findall(text):
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
      try:
        views.append(decode(run + "=" * (-len(run) % 4)).decode("latin-1"))
      except (ValueError, binascii.Error):
        pass
  return [v.casefold() for v in views]


def _echoes_encoded(text: str, secret: str) -> bool:
  """Whether `text` holds `secret` in some encoding, in another case, or split in halves."""
  folded, half = secret.casefold(), len(secret) // 2
  if any(folded in view for view in _decoded_views(text)):
    return True
  return half >= 6 and secret[:half] in text and secret[half:] in text


def _cut_prefix(text: str, secret: str) -> str:
  """`text` without a trailing start of `secret` (a key cut by an earlier truncation)."""
  for k in range(len(secret) - 1, 3, -1):
    if text.endswith(secret[:k]):
      return text[:-k] + REDACTED
  return text


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
  """`text` without any of `secrets`, Authorization-like values or URL credentials.

  A secret is replaced where it appears as is (any case) or cut off at the end; when it is
  found only in an encoded form (base64, URL or HTML escapes, JSON `\\u` or `\\/`, split in
  halves), the whole text becomes `ENCODED`: no partial redaction of an encoding is trusted.
  """
  for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
    text = re.sub(re.escape(secret), REDACTED, text, flags=re.IGNORECASE)
    if len(secret) >= _MIN_ENCODED and _echoes_encoded(text, secret):
      return ENCODED
    text = _cut_prefix(text, secret)
  text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
  text = _CREDENTIAL_FIELD.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
  text = _SCHEME_VALUE.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
  return _KEY_LIKE.sub(REDACTED, text)
