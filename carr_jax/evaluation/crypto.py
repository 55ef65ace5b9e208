"""Decrypts the authors' encrypted eval files (XOR with a repeated SHA-256 of a password).

    CARR_EVAL_PASSWORD=... python -m carr_jax.eval_crypto --input data/eval \\
        --output data/eval_decrypted            # every *.enc file of a directory
    python -m carr_jax.eval_crypto --input browsecomp.jsonl.enc --output browsecomp.jsonl
                                                # no variable set: asks for the password

The scheme (BrowseComp's, used by the CaRR release): key =
SHA-256(password) repeated to the length of the data, plaintext = ciphertext XOR key, the
ciphertext base64-encoded. Two containers are read:
  * the release's file envelope: one JSON object `{"format": "carr-xor-sha256-v1",
    "filename", "size", "ciphertext_b64"}` holding the whole JSONL file;
  * field-wise JSONL (BrowseComp's own CSV turned JSONL): every line a record whose
    `--fields` (e.g. problem,answer) are base64 ciphertexts; `--password-field` names a
    field holding each row's password (BrowseComp's `canary`) instead of one password.
XOR has no integrity check, so a wrong password is caught by what the plaintext must be:
valid UTF-8 JSON lines (envelope; also the declared size) or UTF-8 text (fields).

The password is read from the environment variable `--password-env` (default
CARR_EVAL_PASSWORD) or, when that is unset, prompted for without echo (getpass). It is never
a command-line argument (those show up in `ps` and shell history), never logged, never
written anywhere. Outputs are written atomically (temp file + rename).
"""
from __future__ import annotations

import base64
import binascii
import getpass
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

from carr_common.jsonl import numbered_records

ENVELOPE_FORMAT = "carr-xor-sha256-v1"
DEFAULT_PASSWORD_ENV = "CARR_EVAL_PASSWORD"


class DecryptError(ValueError):
  """Input that is not in a supported container, or a wrong password."""


def keystream(password: str, length: int) -> bytes:
  digest = hashlib.sha256(password.encode("utf-8")).digest()
  return (digest * (length // len(digest) + 1))[:length]


def xor_decrypt(ciphertext_b64: str, password: str) -> bytes:
  try:
    data = base64.b64decode(ciphertext_b64, validate=True)
  except (binascii.Error, ValueError) as e:
    raise DecryptError(f"ciphertext is not base64 ({e})") from None
  key = keystream(password, len(data))
  return bytes(a ^ b for a, b in zip(data, key))


def xor_encrypt(plaintext: bytes, password: str) -> str:
  """The inverse of `xor_decrypt` (tests, and encrypting a file of one's own)."""
  key = keystream(password, len(plaintext))
  return base64.b64encode(bytes(a ^ b for a, b in zip(plaintext, key))).decode("ascii")


def _check_jsonl(raw: bytes, where: str) -> None:
  problem = f"{where}: the plaintext is not UTF-8 JSON lines: wrong password?"
  try:
    text = raw.decode("utf-8")
    for line in text.splitlines():
      if line.strip():
        json.loads(line)
  except (UnicodeDecodeError, json.JSONDecodeError):
    raise DecryptError(problem) from None


def decrypt_envelope(text: str, password: str, where: str = "input") -> bytes:
  """The plaintext file of a release envelope (checked: size, UTF-8 JSON lines)."""
  try:
    envelope = json.loads(text)
  except json.JSONDecodeError:
    raise DecryptError(f"{where}: not a JSON envelope") from None
  found = envelope.get("format") if isinstance(envelope, dict) else None
  if found != ENVELOPE_FORMAT:
    raise DecryptError(f"{where}: format is {found!r}, expected {ENVELOPE_FORMAT!r}")
  if not isinstance(envelope.get("ciphertext_b64"), str):
    raise DecryptError(f"{where}: ciphertext_b64 must be a string")
  raw = xor_decrypt(envelope["ciphertext_b64"], password)
  size = envelope.get("size")
  if size is not None and size != len(raw):
    raise DecryptError(f"{where}: decrypted {len(raw)} bytes, the envelope says {size}")
  _check_jsonl(raw, where)
  return raw


def decrypt_fields(text: str, fields: Sequence[str], password: str | None,
                   password_field: str | None = None, where: str = "input") -> bytes:
  """Field-wise encrypted JSONL -> the same JSONL with `fields` in plain text."""
  out = []
  for at, record in numbered_records(text.splitlines(), where, DecryptError):
    key = record.get(password_field) if password_field else password
    if not isinstance(key, str):
      raise DecryptError(f"{at}: field {password_field!r} (the row's password) is missing")
    for field in fields:
      if not isinstance(record.get(field), str):
        raise DecryptError(f"{at}: field {field!r} is missing or not a string")
      try:
        record[field] = xor_decrypt(record[field], key).decode("utf-8")
      except UnicodeDecodeError:
        raise DecryptError(f"{at}: field {field!r} does not decrypt to UTF-8 text: wrong "
                           "password?") from None
      except DecryptError as e:
        raise DecryptError(f"{at}: field {field!r}: {e}") from None
    out.append(json.dumps(record, ensure_ascii=False) + "\n")
  return "".join(out).encode("utf-8")


def _write_atomic(path: Path, data: bytes) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(path.name + ".tmp")
  tmp.write_bytes(data)
  os.replace(tmp, path)


def decrypt_path(source: Path, target: Path, password: str | None,
                 fields: Sequence[str] = (), password_field: str | None = None) -> list[Path]:
  """Decrypts one file, or every *.enc file of a directory (`.enc` dropped); returns outputs."""
  pairs = ([(p, target / p.name.removesuffix(".enc")) for p in sorted(source.glob("*.enc"))]
           if source.is_dir() else [(source, target)])
  if not pairs:
    raise DecryptError(f"{source}: no *.enc files")
  for src, dst in pairs:
    text = src.read_text(encoding="utf-8")
    raw = (decrypt_fields(text, fields, password, password_field, str(src)) if fields
           else decrypt_envelope(text, password or "", str(src)))
    _write_atomic(dst, raw)
  return [dst for _, dst in pairs]


def read_password(env_var: str) -> str:
  """From the environment, else a no-echo prompt. Never stored by this module."""
  value = os.environ.get(env_var)
  if value:
    return value
  value = getpass.getpass(f"Password for the eval files ({env_var} is not set): ")
  if not value:
    raise DecryptError("empty password")
  return value
