"""Entry point: `python -m carr_jax.fetch_tokenizer [--dir DIR]`: fetch the Qwen3 tokenizer.

The fetch is `carr_jax.model.tokenizer.ensure_tokenizer` (its docstring says from where).
"""
from __future__ import annotations

import argparse
import pathlib

from carr_jax.model import tokenizer as lib
from carr_jax.model.tokenizer import ensure_tokenizer


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m carr_jax.fetch_tokenizer",
                                   description=lib.__doc__.split("\n")[0])
  parser.add_argument("--dir", type=pathlib.Path, default=None,
                      help="target directory (default: $CARR_JAX_TOKENIZER_DIR, else "
                      "$CARR_JAX_CACHE/qwen3-tokenizer, else ~/.cache/carr_jax/qwen3-tokenizer)")
  args = parser.parse_args(argv)
  print(ensure_tokenizer(args.dir))


if __name__ == "__main__":
  main()
