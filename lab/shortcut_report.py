"""Entry point: `python -m lab.shortcut_report OUT_DIR [--wall-s S]`; flags and `main()`.

The report (summary.json, table.md, shortcuts.png) is `lab.shortcuts`,
whose docstring documents this command.
"""
from __future__ import annotations

import argparse
import os
import sys

from carr_jax import cli
from lab import shortcuts as lib
from lab.shortcuts import table, write_report


def parser() -> argparse.ArgumentParser:
  p = cli.parser("python -m lab.shortcut_report", lib.__doc__.split("\n")[0])
  p.add_argument("out_dir", nargs="?", help="directory holding the <method>_seed<k>/ runs")
  p.add_argument("--from", dest="summary", nargs="+", default=None,
                 help="print the table of this summary.json instead (docs/data/<table>.json); "
                      "given several, of their merge")
  p.add_argument("--plot", default=None, help="with --from: also draw the plot to this PNG")
  p.add_argument("--save", default=None, help="with --from: also write the (merged) summary")
  p.add_argument("--wall-s", type=float, default=None, help="the comparison's wall time, s")
  p.add_argument("--methods", default=",".join(lib.COMPARISON),
                 help=f"comma-separated run-directory methods, of {', '.join(lib.METHODS)}")
  return p


def _main(args: argparse.Namespace) -> None:
  if (args.summary is None) == (args.out_dir is None):
    raise cli.UsageError("give OUT_DIR (runs to summarize) or --from SUMMARY.json, not both")
  if args.summary is not None:
    try:
      summary = lib.merge([lib.read_summary(path) for path in args.summary])
      if args.plot:
        lib.plot(summary, args.plot)
      if args.save:
        lib.write_summary(summary, args.save)
    except (OSError, ValueError, KeyError) as e:
      raise cli.UsageError(f"{', '.join(args.summary)}: {e}") from e
    print(table(summary), end="")
    return
  try:
    summary = write_report(args.out_dir, args.wall_s, tuple(args.methods.split(",")))
  except (OSError, ValueError) as e:
    raise cli.UsageError(str(e)) from e
  print(table(summary), end="")
  print(f"wrote {os.path.join(args.out_dir, 'summary.json')}, table.md, shortcuts.png")


def main(argv: list[str] | None = None) -> int:
  return cli.run(_main, parser(), argv)


if __name__ == "__main__":
  sys.exit(main())
