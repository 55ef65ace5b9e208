"""The command-line convention of the carr_jax entry points (argparse).

Every entry point builds its parser with `parser()` and runs through `run()`:

- `--config FILE[:variant]` loads `get_config()` (or `get_config(variant)`) from any path; a
  path `PKG/NAME.py` that does not exist here, its folders naming an installed package
  (`configs/NAME.py`, `lab/configs/NAME.py`), is that package's shipped copy.
  `--config.a.b=value` (or `--config.a.b value`) overrides one existing key; the value is
  parsed as the key's current type (bool: true/false, tuple: `(1024, 2048)` or `1024,2048`).
- A config mistake (missing file, unknown variant, unknown key, wrong type) is one line on
  stderr naming the file or key and the valid choices, with exit status 2 (argparse's usage
  error status); `--debug` shows the traceback instead.
- Logging: our loggers (carr_jax, rollout, judge) at INFO, everything else at WARNING;
  `--verbose` lets third-party INFO lines (orbax, jax, absl) through again.
"""
from __future__ import annotations

import argparse
import ast
import difflib
import importlib.util
import inspect
import os
import pathlib
import sys
from typing import Any, Callable, Sequence

from carr_common import dotted

OUR_LOGGERS = ("carr_jax", "rollout", "judge")
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


class UsageError(Exception):
  """A mistake in the command line or the config: reported in one line, exit status 2."""


# ------------------------------------------------------------------ config files


def package_dir(name: str) -> pathlib.Path | None:
  """The directory of the package `name` (the repo's, or the installed copy's); None if none."""
  try:
    spec = importlib.util.find_spec(name)
  except (ImportError, ValueError):
    return None
  if spec is None or not spec.submodule_search_locations:
    return None
  return pathlib.Path(list(spec.submodule_search_locations)[0])


def resolve_config_path(path: str) -> pathlib.Path:
  """`path` itself, else, for `PKG/NAME.py` with PKG an installed package, its shipped copy."""
  given = pathlib.Path(path)
  if given.is_file():
    return given
  package = ".".join(given.parts[:-1])
  root = package_dir(package) if package and not given.is_absolute() else None
  if root is not None and (root / given.name).is_file():
    return root / given.name
  if root is None:  # not an installed package's file: list the paper's configs
    package, root = "configs", package_dir("configs")
  names = sorted(p.name for p in root.glob("*.py") if p.stem != "__init__") if root else []
  raise UsageError(f"config file not found: {path} (shipped: {package.replace('.', '/')}/"
                   f"{{{','.join(names)}}})")


def _import_file(path: pathlib.Path):
  spec = importlib.util.spec_from_file_location(f"_carr_config_{path.stem}", path)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except SyntaxError as e:
    raise UsageError(f"{path}:{e.lineno}: {e.msg}") from e
  except ImportError as e:
    raise UsageError(f"{path}: {e}") from e
  if not callable(getattr(module, "get_config", None)):
    raise UsageError(f"{path}: defines no get_config()")
  return module


def load_config(spec: str, overrides: Sequence[str] = ()):
  """The locked ConfigDict of `FILE[:variant]` with `a.b=value` overrides applied."""
  path, _, variant = spec.partition(":")
  module = _import_file(resolve_config_path(path))
  takes_arg = bool(inspect.signature(module.get_config).parameters)
  if variant and not takes_arg:
    raise UsageError(f"{path} has no variants (got ':{variant}'); use it without ':'")
  try:
    config = module.get_config(variant or None) if takes_arg else module.get_config()
  except ValueError as e:  # the configs' own check of their variant argument
    raise UsageError(f"{spec}: {e}") from e
  for item in overrides:
    key, _, value = item.partition("=")
    set_key(config, key, value)
  config.lock()
  return config


# ------------------------------------------------------------------ overrides


def flat_keys(config, prefix: str = "") -> list[str]:
  """Every leaf key as a dotted path."""
  keys = []
  for name, value in config.items():
    if hasattr(value, "items"):
      keys += flat_keys(value, f"{prefix}{name}.")
    else:
      keys.append(prefix + name)
  return keys


def _unknown_key(config, key: str, section: str) -> UsageError:
  """The error for `key`, whose first unknown part follows the known `section`."""
  holder = dotted.get(config, section)
  rest = key[len(section) + 1:] if section else key
  candidates = flat_keys(holder) if hasattr(holder, "items") else []
  close = difflib.get_close_matches(rest, candidates, n=1, cutoff=0.6 if section else 0.8)
  if close:
    return UsageError(f"unknown config key {key!r}; did you mean "
                      f"{section + '.' if section else ''}{close[0]}?")
  if not hasattr(holder, "items"):
    return UsageError(f"unknown config key {key!r}: {section} is not a section")
  where = f"keys in {section}" if section else "sections"
  return UsageError(f"unknown config key {key!r} (valid {where}: "
                    f"{', '.join(sorted(holder.keys()))})")


def parse_value(key: str, text: str, current: Any) -> Any:
  """`text` as the type of the key's current value."""
  def bad(kind: str) -> UsageError:
    return UsageError(f"config key {key}: expected {kind}, got {text!r}")

  if isinstance(current, bool):
    if text.lower() not in _TRUE + _FALSE:
      raise bad("true or false")
    return text.lower() in _TRUE
  if isinstance(current, (int, float)):
    kind = type(current)
    try:
      return kind(text) if kind is float else int(text)
    except ValueError:
      raise bad("an int" if kind is int else "a float") from None
  if isinstance(current, (tuple, list)):
    try:
      value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
      value = tuple(part.strip() for part in text.split(",") if part.strip())
    value = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    want = {type(v) for v in current}
    if len(want) == 1 and not all(isinstance(v, tuple(want)) for v in value):
      raise bad(f"a tuple of {next(iter(want)).__name__}")
    return type(current)(value)
  if current is None:
    try:
      return ast.literal_eval(text)
    except (ValueError, SyntaxError):
      return text
  return text


def set_key(config, key: str, text: str) -> None:
  """Sets an existing dotted `key` of `config` from its command-line text."""
  try:
    current = dotted.get(config, key)
  except dotted.MissingKey as e:
    raise _unknown_key(config, key, e.known) from None
  if hasattr(current, "items"):
    raise UsageError(f"config key {key} is a section; set one of: "
                     f"{', '.join(sorted(current.keys()))}")
  parent, _, last = key.rpartition(".")
  dotted.get(config, parent)[last] = parse_value(key, text, current)


def split_overrides(rest: Sequence[str]) -> tuple[list[str], list[str]]:
  """(`a.b=value` items of the `--config.a.b` flags in `rest`, the other arguments)."""
  overrides, other, i = [], [], 0
  while i < len(rest):
    arg = rest[i]
    if arg.startswith("--config."):
      key, eq, value = arg[len("--config."):].partition("=")
      if not eq:
        if i + 1 >= len(rest):
          raise UsageError(f"--config.{key} needs a value")
        value, i = rest[i + 1], i + 1
      overrides.append(f"{key}={value}")
    else:
      other.append(arg)
    i += 1
  return overrides, other


# ------------------------------------------------------------------ parser, logging, run


def parser(prog: str, description: str, config: str | None = None) -> argparse.ArgumentParser:
  """An entry point's parser with the common flags; `config` is the --config help (None: no
  --config flag; give it as "optional: ..." to make the flag optional)."""
  p = argparse.ArgumentParser(prog=prog, description=description,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  if config is not None:
    required = not config.startswith("optional")
    p.add_argument("--config", required=required, metavar="FILE[:VARIANT]",
                   help=f"{config} Override keys with --config.a.b=value.")
  p.add_argument("-v", "--verbose", action="store_true",
                 help="also show third-party INFO logs (orbax, jax, absl)")
  p.add_argument("--debug", action="store_true",
                 help="show the traceback of a config or usage error")
  return p


def add_multihost_flag(p: argparse.ArgumentParser) -> None:
  """--multihost, for the entry points that train (one process per host)."""
  p.add_argument("--multihost", action="store_true",
                 help="call jax.distributed.initialize() first (one process per host)")


def init_multihost(args: argparse.Namespace) -> None:
  """jax.distributed.initialize() when --multihost is given or JAX_COORDINATOR_ADDRESS is set."""
  if args.multihost or os.environ.get("JAX_COORDINATOR_ADDRESS"):
    import jax
    jax.distributed.initialize()


def setup_logging(verbose: bool) -> None:
  """Ours at INFO, third parties at WARNING (INFO with `verbose`); absl (orbax) likewise."""
  from absl import logging as absl_logging

  from judge.config import setup_logging as setup  # the judge's own CLIs use it too
  setup(verbose, OUR_LOGGERS)
  absl_logging.set_verbosity("info" if verbose else "warning")


def parse(p: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
  """Parses `argv`; `args.config` becomes the loaded ConfigDict (None when not given)."""
  args, rest = p.parse_known_args(argv)
  overrides, unknown = split_overrides(rest)
  if unknown:
    p.error(f"unrecognized arguments: {' '.join(unknown)}")
  if getattr(args, "config", None) is not None:
    args.config = load_config(args.config, overrides)
  elif overrides:
    raise UsageError(f"--config.{overrides[0].split('=')[0]} given without --config")
  return args


def run(main: Callable[[argparse.Namespace], int | None], p: argparse.ArgumentParser,
        argv: Sequence[str] | None = None) -> int:
  """Parses, sets up logging and calls `main(args)`; a UsageError is one line, status 2."""
  argv = sys.argv[1:] if argv is None else list(argv)
  debug = "--debug" in argv
  try:
    args = parse(p, argv)
    setup_logging(args.verbose)
    return main(args) or 0
  except UsageError as e:
    if debug:
      raise
    print(f"{p.prog}: error: {e}", file=sys.stderr)
    return 2
