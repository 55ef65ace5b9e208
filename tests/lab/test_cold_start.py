"""scripts/cold_start.sh and lab/probes/link_copy.py: the cold start's copy gate (every hop).

The slow test runs the real script on the reference world with a few SFT steps: a policy that
has not learned the copy fails the gate, is trained on in the same workdir (resumed, more steps)
and asked again; a rerun with a gate it passes trains nothing more.

  python -m pytest tests/lab/test_cold_start.py -q -m slow
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from lab.probes import kind_probe

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["--config.sft.num_steps=6", "--config.optim.warmup_steps=1",
        "--config.optim.decay_from=4", "--config.optim.decay_steps=2",
        "--config.checkpoint.every=2", "--config.checkpoint.keep=20"]


def test_copy_rates_need_every_digit():
  p = np.array([0.9, 0.9, 0.9, 0.9, 0.2, 0.9])  # [N*D]: two questions of 3 digits
  top = np.array([True, True, True, True, False, True])
  exact, p_digits = kind_probe.copy_rates(p, top, 2)
  assert exact == 0.5  # the second question misses its middle digit
  assert p_digits == pytest.approx((0.9 ** 3 + 0.9 * 0.2 * 0.9) / 2)


def _cold_start(workdir, **env):
  venv = os.path.dirname(os.path.dirname(sys.executable))
  run_env = {**os.environ, "JAX_PLATFORMS": "cpu", "CARR_JAX_VENV": venv,
             "CARR_JAX_TOPUP_STEPS": "4", **env}
  run_env.pop("XLA_FLAGS", None)
  proc = subprocess.run(["bash", "scripts/cold_start.sh", "lab/configs/lookup_cpu.py:sft",
                         str(workdir), "0", *TINY], cwd=REPO, env=run_env,
                        capture_output=True, text=True, timeout=1200)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  return proc.stdout + proc.stderr


def _steps(workdir) -> list[int]:
  return sorted(int(d) for d in os.listdir(workdir / "checkpoints") if d.isdigit())


@pytest.mark.slow
def test_a_cold_start_that_does_not_copy_is_trained_on_then_let_through(tmp_path):
  workdir = tmp_path / "sft"
  out = _cold_start(workdir, CARR_JAX_TOPUPS="1")
  gates = re.findall(r"link_copy greedy_exact=(\S+) p_digits=\S+ n=36 min=0.9 pass=(\d)", out)
  assert len(gates) == 2 and all(passed == "0" for _, passed in gates), out[-3000:]
  assert "top-up 1: SFT to step 10" in out
  assert "does not copy the link after 10 SFT steps (1 top-ups)" in out
  assert _steps(workdir)[-1] == 10  # 6 steps, then 4 more resumed in the same workdir
  assert "step 10/10" in out
  # Rerun with a gate it passes: resumes, trains nothing more, asks the gate once.
  out = _cold_start(workdir, CARR_JAX_MIN_COPY="0")
  assert re.findall(r"link_copy .* pass=(\d)", out) == ["1"]
  assert "top-up" not in out and _steps(workdir)[-1] == 10


@pytest.mark.slow
def test_on_a_chain_the_gate_asks_for_every_hops_copy(tmp_path):
  """A chain cold start must copy the question's link and the term its first page names."""
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  env.pop("XLA_FLAGS", None)
  config = "lab/configs/chain_cpu.py:sft"
  subprocess.run([sys.executable, "-m", "carr_jax.sft", "--config", config, "--workdir",
                  str(tmp_path), *TINY], cwd=REPO, env=env, check=True, capture_output=True,
                 timeout=1200)
  probe = [sys.executable, "-m", "lab.probes.link_copy", "--config", config, "--checkpoint",
           str(tmp_path / "checkpoints")]
  failed = subprocess.run(probe, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
  assert failed.returncode == 1, failed.stderr[-3000:]  # six steps copy no term
  assert re.findall(r"pass=0 hop=(\d)", failed.stdout) == ["0", "1"]
  passed = subprocess.run(probe + ["--min", "0"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=1200)
  assert passed.returncode == 0 and re.findall(r"pass=1 hop=(\d)", passed.stdout) == ["0", "1"]
