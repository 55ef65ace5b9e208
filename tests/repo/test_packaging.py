"""The installable package: what the wheel holds, and an installed copy that runs.

The quick tests read pyproject.toml against the tree. The slow one builds the wheel from a copy
of the sources, installs it (no dependencies: those come from this venv through a .pth file)
into a fresh virtualenv outside the repo, imports every module from the installed copy and
runs each entry point's --help there. Measured: ~2 min on 2 busy cores.
Run: python -m pytest tests/repo/test_packaging.py -q [-m slow]
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from setuptools import find_packages

REPO = pathlib.Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
TOP_LEVEL = ("carr_jax", "rollout", "judge", "carr_common", "configs", "lab")
CONSOLE_SCRIPTS = ("carr-jax-train", "carr-jax-sft", "carr-jax-evaluate", "carr-jax-convert",
                   "carr-jax-judge-server")
MODULE_ENTRY_POINTS = ("carr_jax.train", "carr_jax.sft", "carr_jax.evaluate",
                       "carr_jax.convert", "carr_jax.aot", "carr_jax.eval_crypto",
                       "carr_jax.fetch_tokenizer", "judge.server", "judge.rubric_gen",
                       "judge.testing", "lab.expert", "lab.make_world", "lab.probes.kind_probe",
                       "lab.probes.search_copy_eval", "lab.probes.page_swap",
                       "lab.probes.listing_reveal", "lab.probes.hop_copy")


def _source_dirs() -> set[str]:
  """Every directory under the top-level packages that holds Python files."""
  found = set()
  for top in TOP_LEVEL:
    for path in (REPO / top).rglob("*.py"):
      if "__pycache__" not in path.parts:
        found.add(".".join(path.parent.relative_to(REPO).parts))
  return found


def _requirement_lines(name: str) -> list[str]:
  lines = [ln.split("#")[0].strip() for ln in (REPO / name).read_text().splitlines()]
  return [ln for ln in lines if ln and not ln.startswith("-r")]


@pytest.mark.parametrize("name", ["requirements.txt", "requirements-test.txt",
                                  "requirements-tpu.txt", "requirements-sglang.txt"])
def test_every_requirement_pins_one_version(name):
  loose = [ln for ln in _requirement_lines(name)
           if not re.fullmatch(r"[A-Za-z0-9_.\-]+(\[[a-z0-9_,\-]+\])?==[0-9][0-9A-Za-z.+]*", ln)]
  assert not loose, f"{name}: not pinned to one version: {loose}"


def test_every_source_directory_is_a_discovered_package():
  find = PYPROJECT["tool"]["setuptools"]["packages"]["find"]
  packages = set(find_packages(str(REPO), include=find["include"]))
  assert _source_dirs() <= packages
  assert not {p for p in packages if p.split(".")[0] not in TOP_LEVEL}  # no tests, scripts


def test_templates_and_console_scripts():
  data = PYPROJECT["tool"]["setuptools"]["package-data"]["rollout"]
  assert [p.name for p in (REPO / "rollout").glob(data[0])] == ["qwen3_thinking.jinja"]
  assert tuple(PYPROJECT["project"]["scripts"]) == CONSOLE_SCRIPTS


def _by_name(lines: list[str]) -> dict[str, Requirement]:
  parsed = [Requirement(line) for line in lines]
  return {canonicalize_name(r.name): r for r in parsed}


@pytest.mark.parametrize("declared, pinned", [
    (PYPROJECT["project"]["dependencies"], "requirements.txt"),
    (PYPROJECT["project"]["optional-dependencies"]["test"], "requirements-test.txt"),
    (PYPROJECT["project"]["optional-dependencies"]["tpu"], "requirements-tpu.txt")])
def test_declared_ranges_admit_the_pins_and_nothing_is_pinned(declared, pinned):
  """The wheel declares ranges (installable beside other JAX libraries); requirements*.txt
  pin one version of each; every range admits its pin, with the same packages and extras."""
  ranges, pins = _by_name(declared), _by_name(_requirement_lines(pinned))
  assert set(ranges) == set(pins)
  for name, spec in ranges.items():
    pin = next(iter(pins[name].specifier)).version
    assert spec.specifier.contains(pin), (name, str(spec.specifier), pin)
    assert spec.extras == pins[name].extras, name
    assert not any(s.operator == "==" for s in spec.specifier), f"{name} is pinned: {spec}"
    assert any(s.operator in ("~=", "<") for s in spec.specifier), f"{name} has no upper bound"


def _build_wheel(tmp: pathlib.Path) -> pathlib.Path:
  """The wheel, built from a copy of the sources (the build leaves nothing in the repo)."""
  src = tmp / "src"
  src.mkdir()
  for name in ("pyproject.toml", "README.md", "requirements.txt"):
    shutil.copy(REPO / name, src / name)
  for top in TOP_LEVEL + ("rollout/templates",):
    shutil.copytree(REPO / top, src / top, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
  subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                  "-q", "--disable-pip-version-check", str(src), "-w", str(tmp / "dist")],
                 check=True, cwd=tmp, capture_output=True, timeout=300)
  return next((tmp / "dist").glob("carr_jax-*.whl"))


def _fresh_venv(tmp: pathlib.Path, wheel: pathlib.Path) -> pathlib.Path:
  """A new venv with the wheel installed; this venv's packages serve as its dependencies."""
  venv = tmp / "venv"
  subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
  python = venv / "bin" / "python"
  site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                         "['purelib'])"], check=True, capture_output=True, text=True)
  deps = sysconfig.get_paths()["purelib"]
  pathlib.Path(site.stdout.strip(), "_carr_jax_test_deps.pth").write_text(deps + "\n")
  subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                  "-q", "--disable-pip-version-check", str(wheel)], check=True,
                 capture_output=True, timeout=300)
  return venv


_IMPORT_ALL = """
import importlib, pkgutil, sys
venv = sys.argv[1]
names = []
for top in ("carr_jax", "rollout", "judge", "configs", "lab"):
  package = importlib.import_module(top)
  names.append(top)
  names += [m.name for m in pkgutil.walk_packages(package.__path__, top + ".")]
for name in names:
  module = importlib.import_module(name)
  assert module.__file__.startswith(venv), (name, module.__file__)
from carr_jax.model.tokenizer import chat_template
assert "<think>" in chat_template()
from carr_jax.cli import load_config
config = load_config("lab/configs/demo_cpu.py")  # not in the working directory: the shipped one
assert config.model.preset == "tiny_dense"
print(len(names))
"""


@pytest.mark.slow
def test_installed_wheel_imports_everything_and_every_entry_point_helps(tmp_path):
  venv = _fresh_venv(tmp_path, _build_wheel(tmp_path))
  env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
  env["JAX_PLATFORMS"] = "cpu"
  work = tmp_path / "elsewhere"
  work.mkdir()
  python = str(venv / "bin" / "python")
  done = subprocess.run([python, "-c", _IMPORT_ALL, str(venv)], cwd=work, env=env,
                        capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  assert int(done.stdout.split()[-1]) >= 100  # every module of the five packages
  commands = [[str(venv / "bin" / s)] for s in CONSOLE_SCRIPTS]
  commands += [[python, "-m", m] for m in MODULE_ENTRY_POINTS]
  for command in commands:
    proc = subprocess.run(command + ["--help"], cwd=work, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, (command, proc.stderr[-2000:])
    assert proc.stdout.startswith("usage:"), (command, proc.stdout[:300])
