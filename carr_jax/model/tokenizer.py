"""Fetch the real Qwen3 tokenizer offline-style (from PyPI, no model hub) into a cache dir.

The maxtext 0.2.5 wheel ships `maxtext/assets/tokenizers/qwen3-tokenizer/tokenizer.json`, the
same file as the hub's Qwen3-4B-Thinking-2507 tokenizer.  This
module downloads that wheel with pip (no dependencies, any host Python), extracts the file,
checks its SHA-256, and writes next to it a `tokenizer_config.json` of our own carrying the
special tokens and the thinking chat template of rollout/templates/qwen3_thinking.jinja (the
wheel's bundled template is the hybrid one).

Usage:
  python -m carr_jax.fetch_tokenizer [--dir DIR]   # prints the tokenizer directory
  (scripts/fetch_tokenizer.py is the same command; the trainer calls `ensure_tokenizer()`)

DIR defaults to $CARR_JAX_TOKENIZER_DIR, else $CARR_JAX_CACHE/qwen3-tokenizer, else
~/.cache/carr_jax/qwen3-tokenizer.  Idempotent: a present tokenizer.json with the right hash
is not downloaded again; the config is rewritten only when its content would change.
Load the result with `transformers.AutoTokenizer.from_pretrained(DIR)`.
"""
from __future__ import annotations

import hashlib
import importlib.resources
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

WHEEL_SPEC = "maxtext==0.2.5"
WHEEL_MEMBER = "maxtext/assets/tokenizers/qwen3-tokenizer/tokenizer.json"
TOKENIZER_SHA256 = "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
TEMPLATE = ("rollout", "templates/qwen3_thinking.jinja")  # package data of the rollout package


def chat_template() -> str:
  """The thinking chat template (rollout/templates/qwen3_thinking.jinja, shipped in the wheel)."""
  return importlib.resources.files(TEMPLATE[0]).joinpath(TEMPLATE[1]).read_text(encoding="utf-8")


def default_dir() -> pathlib.Path:
  if os.environ.get("CARR_JAX_TOKENIZER_DIR"):
    return pathlib.Path(os.environ["CARR_JAX_TOKENIZER_DIR"])
  cache = os.environ.get("CARR_JAX_CACHE") or os.path.join(
      os.path.expanduser("~"), ".cache", "carr_jax")
  return pathlib.Path(cache) / "qwen3-tokenizer"


def _sha256(path: pathlib.Path) -> str:
  return hashlib.sha256(path.read_bytes()).hexdigest()


def _download_tokenizer_json(dest: pathlib.Path) -> None:
  """pip-downloads the maxtext wheel to a temp dir and extracts tokenizer.json atomically."""
  with tempfile.TemporaryDirectory() as tmp:
    # maxtext needs Python >= 3.12, hence the explicit target; --no-deps keeps it to one wheel.
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--python-version", "3.12",
           "--only-binary=:all:", "--disable-pip-version-check", "-q", "--timeout", "30",
           "--retries", "2", WHEEL_SPEC, "-d", tmp]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
      raise RuntimeError(f"pip download {WHEEL_SPEC} failed:\n{proc.stderr[-2000:]}")
    wheel = next(pathlib.Path(tmp).glob("maxtext-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
      data = zf.read(WHEEL_MEMBER)
  digest = hashlib.sha256(data).hexdigest()
  if digest != TOKENIZER_SHA256:
    raise RuntimeError(f"{WHEEL_MEMBER} has sha256 {digest}, expected {TOKENIZER_SHA256}")
  write_atomic(dest, data)


def write_atomic(path: pathlib.Path, data: bytes) -> None:
  """Writes `data` to `path` through a temp file of its own in the same directory, then renames.

  Several processes may fetch the tokenizer at once (two SFT lanes on a fresh machine): each
  writes its own temp file, so no rename finds its source taken by another.
  """
  with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name, suffix=".part",
                                   delete=False) as part:
    part.write(data)
  os.replace(part.name, path)


def tokenizer_config(tokenizer_json: pathlib.Path) -> dict:
  """Our tokenizer_config.json: special tokens from tokenizer.json + the thinking template."""
  added = json.loads(tokenizer_json.read_text())["added_tokens"]
  decoder = {
      str(t["id"]): {k: t[k] for k in
                     ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
      for t in added}
  # The hub config lists every special token except <|endoftext|> (the pad token) here.
  extra_special = [t["content"] for t in added
                   if t["special"] and t["content"] != "<|endoftext|>"]
  return {
      "tokenizer_class": "Qwen2Tokenizer",
      "add_bos_token": False,
      "add_prefix_space": False,
      "bos_token": None,
      "eos_token": "<|im_end|>",
      "pad_token": "<|endoftext|>",
      "unk_token": None,
      "additional_special_tokens": extra_special,
      "added_tokens_decoder": decoder,
      "clean_up_tokenization_spaces": False,
      "errors": "replace",
      "model_max_length": 262144,
      "split_special_tokens": False,
      "chat_template": chat_template(),
  }


def ensure_tokenizer(directory: pathlib.Path | None = None) -> pathlib.Path:
  """Makes `directory` hold tokenizer.json + our tokenizer_config.json; returns it."""
  directory = pathlib.Path(directory or default_dir())
  directory.mkdir(parents=True, exist_ok=True)
  tok_json = directory / "tokenizer.json"
  if not tok_json.exists() or _sha256(tok_json) != TOKENIZER_SHA256:
    _download_tokenizer_json(tok_json)
  config_text = json.dumps(tokenizer_config(tok_json), indent=2, ensure_ascii=False) + "\n"
  config_path = directory / "tokenizer_config.json"
  if not config_path.exists() or config_path.read_text() != config_text:
    write_atomic(config_path, config_text.encode("utf-8"))
  return directory
