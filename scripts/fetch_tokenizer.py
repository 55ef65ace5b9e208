"""Fetch the Qwen3 tokenizer into the cache dir and print it: `python -m carr_jax.fetch_tokenizer`.

  python scripts/fetch_tokenizer.py [--dir DIR]

The command is carr_jax/fetch_tokenizer.py (the fetch: carr_jax/model/tokenizer.py); this file
runs it from a checkout.
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from anywhere

from carr_jax.fetch_tokenizer import main  # noqa: E402

if __name__ == "__main__":
  main()
