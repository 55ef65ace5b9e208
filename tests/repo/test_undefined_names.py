"""No Python file of the tree reads a global name that its module never binds.

Compiling a file does not check that a name a function reads exists: the error waits until the
line runs. Benchmarks and scripts run seldom, so such a line can sit broken for weeks
(bench_compile_cache.py lost its `import tempfile` to a refactor and failed only when run).
The standard library's `symtable` gives every scope's names; a name that a function, class or
the module reads as a global must be bound at module level (assigned, imported, defined, or
assigned by a scope that declares it `global`) or be a builtin. Files with `from x import *`
are skipped (their names cannot be listed).
Run: python -m pytest tests/repo/test_undefined_names.py -q
"""
from __future__ import annotations

import builtins
import pathlib
import symtable

REPO = pathlib.Path(__file__).resolve().parents[2]
TREES = ("carr_common", "judge", "rollout", "carr_jax", "configs", "lab", "benchmarks",
         "scripts", "tests")
MODULE_ATTRIBUTES = {"__file__", "__name__", "__doc__", "__spec__", "__loader__",
                     "__package__", "__builtins__", "__path__"}


def _assigned_through_global(table: symtable.SymbolTable) -> set[str]:
  """Names some scope declares `global` and assigns (bound at module level when it runs)."""
  names = {s.get_name() for s in table.get_symbols()
           if s.is_declared_global() and s.is_assigned()}
  for child in table.get_children():
    names |= _assigned_through_global(child)
  return names


def undefined_globals(source: str, name: str = "<source>") -> list[tuple[str, str]]:
  """(scope, name) for every global name read in `source` and bound nowhere in its module."""
  top = symtable.symtable(source, name, "exec")
  symbols = top.get_symbols()
  if any(s.get_name() == "*" for s in symbols):
    return []
  bound = {s.get_name() for s in symbols if s.is_assigned() or s.is_imported()
           or s.is_namespace()} | MODULE_ATTRIBUTES | set(dir(builtins))
  bound |= _assigned_through_global(top)
  found = []

  def walk(table: symtable.SymbolTable) -> None:
    for s in table.get_symbols():
      reads_global = s.is_referenced() and (
          s.is_global() if table.get_type() != "module" else not s.is_assigned())
      if reads_global and s.get_name() not in bound:
        found.append((table.get_name(), s.get_name()))
    for child in table.get_children():
      walk(child)

  walk(top)
  return found


def test_the_check_finds_a_missing_import_inside_a_function():
  source = "import os\n\ndef main():\n  return tempfile.mkdtemp(os.sep)\n"
  assert undefined_globals(source) == [("main", "tempfile")]
  assert undefined_globals("import tempfile\n" + source) == []
  assert undefined_globals("class A:\n  x = y\n") == [("A", "y")]
  assert undefined_globals("def f():\n  global g\n  g = 1\n\ndef h():\n  return g\n") == []


def test_no_file_reads_an_unbound_global():
  files = [p for top in TREES for p in sorted((REPO / top).rglob("*.py"))
           if "__pycache__" not in p.parts]
  assert len(files) > 250
  found = {str(p.relative_to(REPO)): bad for p in files
           if (bad := undefined_globals(p.read_text(encoding="utf-8"), str(p)))}
  assert not found, found
