"""Entry point: `python -m carr_jax.eval_crypto`; flags and `main()` only.

Decrypting the authors' eval files is `carr_jax.evaluation.crypto`, whose docstring
documents this command.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from carr_jax import cli
from carr_jax.evaluation import crypto as lib
from carr_jax.evaluation.crypto import (DEFAULT_PASSWORD_ENV, DecryptError, decrypt_path,
                                       read_password)


def parser() -> argparse.ArgumentParser:
  p = cli.parser("python -m carr_jax.eval_crypto", lib.__doc__.split("\n")[0])
  a = p.add_argument
  a("--input", required=True, help="an encrypted file, or a directory of *.enc files")
  a("--output", required=True, help="output file, or directory for a directory input")
  a("--password-env", default=DEFAULT_PASSWORD_ENV,
    help=f"environment variable holding the password (default: {DEFAULT_PASSWORD_ENV}); "
    "unset: asked for without echo")
  a("--fields", default="", help="field-wise mode: comma-separated encrypted fields")
  a("--password-field", default="", help="field-wise mode: field holding each row's password")
  return p


def _decrypt(args: argparse.Namespace) -> int:
  fields = [x.strip() for x in args.fields.split(",") if x.strip()]
  try:
    password = None if args.password_field else read_password(args.password_env)
    for path in decrypt_path(Path(args.input), Path(args.output), password, fields,
                             args.password_field or None):
      print(f"decrypted {path}")
  except (DecryptError, EOFError) as e:
    print(f"python -m carr_jax.eval_crypto: {e or 'no password given'}", file=sys.stderr)
    return 1
  return 0


def main(argv: list[str] | None = None) -> int:
  return cli.run(_decrypt, parser(), argv)


if __name__ == "__main__":
  sys.exit(main())
