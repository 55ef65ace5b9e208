"""Whether each remat policy's compiled TPU step runs splash attention's forward kernel as
often as `Policy.recomputes` says: once per layer and micro-batch, twice where the backward
recomputes the attention core.

  .venv-tpu/bin/python scripts/check_remat_kernels.py [POLICY ...]

Compiles the tiny RL config (configs/cgrpo_qwen3_4b.py:tiny) deviceless for v5p:2x2x1, 8 rows
of 1,024 tokens, under each policy (default: every one of `carr_jax.model.remat.POLICIES`),
and reads the kernels' runs off the compiled HLO (`hlo_costs.program_costs(...).kernels`,
loop trips included). Needs libtpu, which only the TPU virtualenv has
(scripts/setup_tpu_venv.sh); about 40 s a policy on 2 cores. Prints one line per policy;
exit status 1 when a count differs. The CPU tests check the same on the jaxpr of interpret-mode
splash and on blockwise (tests/carr_jax/test_remat.py); this checks the program XLA builds.
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from anywhere

from carr_jax.jobs import aot, components  # noqa: E402
from carr_jax.model import remat  # noqa: E402
from configs import cgrpo_qwen3_4b  # noqa: E402

TOPOLOGY, ROWS, ROW_LENGTH = "v5p:2x2x1", 8, 1024


def forward_runs(kernels: dict[str, float]) -> float:
  """Runs of splash's forward kernel (`splash_mha_fwd_...`) among a step's kernel runs."""
  return sum(runs for name, runs in kernels.items() if name.startswith("splash_mha_fwd"))


def check(name: str, devices) -> bool:
  """Compiles the tiny step under policy `name`; whether its forward runs are as expected."""
  config = cgrpo_qwen3_4b.get_config("tiny")
  config.model.remat = name
  (step, *_), facts = aot.compile_config(config, devices, ROWS, ROW_LENGTH)
  assert facts["attention"] == "splash", facts["attention"]
  once = components.model_config(config).num_layers * facts["micro_batches"]
  want = once * (2 if "core" in remat.policy(name).recomputes else 1)
  got = forward_runs(step.costs.kernels)
  runs = ", ".join(f"{k} {v:.0f}" for k, v in sorted(step.costs.kernels.items()))
  print(f"{name:<18} forward runs {got:.0f} (expected {want}); {runs}", flush=True)
  return got == want


def main(policies: list[str]) -> int:
  devices = aot.topology_devices(TOPOLOGY)
  results = [check(name, devices) for name in policies or list(remat.POLICIES)]
  return 0 if all(results) else 1


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
