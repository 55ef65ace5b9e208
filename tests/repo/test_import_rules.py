"""The shape of the tree, from the code's own imports (every import, function-local ones too).

- No import circle between modules, nor between the rooms of carr_jax (its subpackages and
  its top-level files).
- Each room imports only rooms after it in `ORDER`, the order docs/design.md section 6 draws.
- Room boundaries: carr_common imports none of carr_jax / rollout / judge; judge imports
  neither carr_jax nor rollout; rollout imports no carr_jax.
- carr_jax's top level holds the entry points (each has `main`) and their command-line
  convention, carr_jax/cli.py; nothing in a subpackage imports either.
- The CPU laboratory (lab/: the synthetic worlds, the scripted expert, the experiments' configs
  and the probes) sits above the product: it imports carr_jax, rollout, judge and configs, and
  none of them imports it. The jobs reach its tasks by name only (`data.source`, carr_jax/jobs/
  tasks.py task_source). The model, the update and the run bookkeeping (carr_jax/model, rl,
  runs) name no world: what a world needs of them (a restricted output vocabulary) is passed in.
- No module is over 400 lines: the packages', and the tests', benchmarks' and scripts' too.
Run: python -m pytest tests/repo/test_import_rules.py -q
"""
from __future__ import annotations

import ast
import pathlib

import networkx as nx
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("carr_common", "judge", "rollout", "carr_jax", "configs", "lab")
MAX_LINES = 400
ORDER = ("lab", "configs", "carr_jax", "carr_jax.jobs", "carr_jax.coldstart", "carr_jax.evaluation",
         "carr_jax.rl", "carr_jax.model", "carr_jax.runs", "rollout", "judge", "carr_common")


def _module_name(path: pathlib.Path) -> str:
  parts = path.relative_to(REPO).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, pathlib.Path]:
  return {_module_name(p): p for top in PACKAGES for p in sorted((REPO / top).rglob("*.py"))
          if "__pycache__" not in p.parts}


def _imported(tree: ast.AST, modules: set[str]) -> set[str]:
  """Our modules a parsed file imports; `from pkg import name` counts pkg.name if a module."""
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
               else node.module for a in node.names]
    else:
      continue
    found |= {n for n in names if n in modules}
  return found


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
  sources = _sources()
  g = nx.DiGraph()
  g.add_nodes_from(sources)
  for name, path in sources.items():
    g.add_edges_from((name, dep) for dep in _imported(ast.parse(path.read_text()), set(sources))
                     if dep != name and not name.startswith(dep + "."))  # a package's face
  return g


def _room(module: str) -> str:
  """carr_jax.rl.loss -> carr_jax.rl; carr_jax.train -> carr_jax.train; rollout.x -> rollout;
  lab.world.expert -> lab."""
  parts = module.split(".")
  return ".".join(parts[:2]) if parts[0] == "carr_jax" else parts[0]


def _floor(module: str) -> int:
  """The index in ORDER of the room of `module`; carr_jax's top-level files share carr_jax's."""
  room = _room(module)
  return ORDER.index(room) if room in ORDER else ORDER.index("carr_jax")


def test_no_module_circle(graph):
  assert list(nx.simple_cycles(graph)) == []


def test_no_room_circle(graph):
  rooms = nx.DiGraph((_room(a), _room(b)) for a, b in graph.edges if _room(a) != _room(b))
  assert list(nx.simple_cycles(rooms)) == []


def test_rooms_import_only_rooms_after_them(graph):
  subpackages = {_room(m) for m in graph if m.startswith("carr_jax.") and m.count(".") > 1}
  assert subpackages <= set(ORDER)  # a new room takes its place in ORDER and design.md
  assert [(a, b) for a, b in graph.edges if _floor(a) > _floor(b)] == []


@pytest.mark.parametrize("room, forbidden", [
    ("carr_common", ("carr_jax", "rollout", "judge", "configs", "lab")),
    ("judge", ("carr_jax", "rollout", "configs", "lab")),
    ("rollout", ("carr_jax", "configs", "lab")),
    ("carr_jax", ("configs", "lab")),
    ("configs", ("lab",)),
])
def test_room_boundaries(graph, room, forbidden):
  crossing = [(a, b) for a, b in graph.edges
              if a.split(".")[0] == room and b.split(".")[0] in forbidden]
  assert crossing == []


def test_entry_points_are_the_top_level_and_no_library_imports_them(graph):
  top = {m for m in graph if m.count(".") == 1 and m.startswith("carr_jax.")
         and (REPO / (m.replace(".", "/") + ".py")).is_file()}
  entries = top - {"carr_jax.cli"}
  lacking_main = [m for m in entries
                  if "main" not in {n.name for n in ast.parse(
                      (REPO / (m.replace(".", "/") + ".py")).read_text()).body
                                    if isinstance(n, ast.FunctionDef)}]
  assert lacking_main == []  # the laboratory, above carr_jax, shares its command-line convention
  assert [(a, b) for a, b in graph.edges if b in top and a not in top and _room(a) != "lab"] == []


def test_no_module_over_the_limit():
  paths = [p for top in PACKAGES + ("tests", "benchmarks", "scripts")
           for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts]
  long = {str(p.relative_to(REPO)): n for p in paths
          if (n := len(p.read_text().splitlines())) > MAX_LINES}
  assert long == {}


@pytest.mark.parametrize("room", ["carr_jax/model", "carr_jax/rl", "carr_jax/runs"])
def test_the_product_rooms_name_no_synthetic_world(room):
  mentions = [str(p.relative_to(REPO)) for p in sorted((REPO / room).rglob("*.py"))
              if "world" in p.read_text().lower()]
  assert mentions == []


def test_the_product_names_a_lab_module_only_as_the_tiny_variants_task_source(graph):
  """No product module holds a lab module's name as a string (to import it by name) but the
  paper configs' `tiny` variant, whose data is the laboratory's task source, "lab.tasks"."""
  lab_modules = {m for m in graph if _room(m) == "lab"}
  named = {(str(path.relative_to(REPO)), node.value)
           for top in ("carr_common", "judge", "rollout", "carr_jax", "configs")
           for path in sorted((REPO / top).rglob("*.py"))
           for node in ast.walk(ast.parse(path.read_text()))
           if isinstance(node, ast.Constant) and node.value in lab_modules}
  assert named == {("configs/cgrpo_qwen3_4b.py", "lab.tasks")}


def _string_constants(top: str):
  """(file, string) of every string literal under `top` (docstrings included)."""
  for path in sorted((REPO / top).rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield str(path.relative_to(REPO)), node.value


def test_the_task_source_owns_its_config_section_and_its_evaluation_subsets():
  """The laboratory's ideas live in lab/: configs/base.py has no `world` section and defaults
  to CaRR records; no product value or spec is named after the world ("world", "world:...");
  no product module computes evidence-only or gold-flag metrics (lab/metrics.py does, through
  the task source's `eval_metrics` hook)."""
  from configs import base
  config = base.get_config()
  assert "world" not in config and config.data.source == "jsonl"
  world_values = [(f, v) for f, v in _string_constants("carr_jax")
                  if v == "world" or v.startswith("world:")]
  assert world_values == []
  gold_reads = [(f, v) for f, v in _string_constants("carr_jax")
                if v in ("gold", "shortcut", "shortcut_answer") or "evidence_only" in v]
  assert gold_reads == []
