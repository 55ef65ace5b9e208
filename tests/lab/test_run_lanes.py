"""scripts/run_lanes.sh's pairs: two runs pinned one core each; when one ends, what the other
starts next gets every core; a failed run fails the stage.

The runs are a stand-in interpreter (CARR_JAX_VENV points at it) that prints the cores the
processes it starts may use (`nproc` reads the process's affinity), so the test runs the real
script in a few seconds.

The runs share the experiment's compilation cache (scripts/job_env.sh).

  python -m pytest tests/lab/test_run_lanes.py -q
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAKE_PYTHON = """#!/usr/bin/env bash
# `python -m carr_jax.sft ... --config.seed=S`: seed 0 ends after 1.5 s with $FAKE_STATUS;
# seed 1 prints the cores of a process it starts at once, and of one it starts after seed 0
# ended. Every run first prints the world seed it was given and its compilation cache.
for arg in "$@"; do case $arg in --config.world.seed=*) echo "${arg#*=}" ;; esac; done
echo "${JAX_COMPILATION_CACHE_DIR:-none}"
case "$*" in
  *--config.seed=0*) sleep 1.5; exit "${FAKE_STATUS:-0}" ;;
esac
nproc
sleep 3
nproc
"""

pytestmark = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2 or not (shutil.which("taskset") and shutil.which("pgrep")),
    reason="needs two cores, taskset and pgrep")


def _lanes(tmp_path, status=0):
  venv = tmp_path / "venv"
  (venv / "bin").mkdir(parents=True)
  python = venv / "bin" / "python"
  python.write_text(FAKE_PYTHON)
  python.chmod(python.stat().st_mode | stat.S_IEXEC)
  out = tmp_path / "out"
  proc = subprocess.run(
      ["bash", "scripts/run_lanes.sh", "sft", str(out), "lab/configs/lookup_cpu.py:sft", "0",
       "3:1"], cwd=REPO, capture_output=True, text=True, timeout=60,
      env={**os.environ, "CARR_JAX_VENV": str(venv), "FAKE_STATUS": str(status)})
  world, cache, *cores = (out / "sft_w3_seed1.log").read_text().split()  # run "3:1"
  assert world == "3" and (out / "sft_w0_seed0.log").read_text().split()[0] == "0"
  assert cache == str(out / "jax_cache")  # one compilation cache for the experiment
  return proc, cores


def test_a_run_left_alone_starts_its_next_process_on_every_core(tmp_path):
  proc, cores = _lanes(tmp_path)
  assert proc.returncode == 0, proc.stderr
  assert cores[0] == "1"  # pinned beside seed 0
  assert int(cores[1]) >= 2  # seed 0 had ended


def test_a_failed_run_fails_the_stage_after_its_partner_ends(tmp_path):
  proc, cores = _lanes(tmp_path, status=3)
  assert proc.returncode != 0
  assert len(cores) == 2  # seed 1 ran to its end
