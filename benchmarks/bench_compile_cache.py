"""An RL run with JAX's persistent compilation cache warm (ours: scripts/job_env.sh,
which the runners source) against the same run compiling everything (the peer, cache off).

Runs the real trainer (`--config`, default the chain comparison's RL
lab/configs/chain_cpu.py:stale; `--init_dir` its cold start, default a random policy) for
`--steps` steps, no evaluation, in a fresh process and workdir each, in turn:
  off   JAX_COMPILATION_CACHE_DIR="" (the peer: what every run paid before);
  cold  an empty cache directory (the experiment's first run: compiles and writes);
  warm  the same directory again (every later method, world and stage of an experiment).
Prints each side's wall time (the whole process: imports, world, compiles, steps), the sum of
its `perf/step_time_s`, the ratio off / warm of both, and whether the sides' per-step losses
are equal (a cached program is the same program).

    .venv/bin/python benchmarks/bench_compile_cache.py --steps 4 \
        --init_dir OUT/sft_w0_seed0/checkpoints
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from common import REPO, run_trainer

sys.path.insert(0, REPO)
from carr_jax.runs.metrics import read_scalars  # noqa: E402


def run_side(args, cache_dir: str) -> dict:
  start = time.perf_counter()
  workdir = run_trainer(args.config, args.steps, args.init_dir,
                        env={"JAX_COMPILATION_CACHE_DIR": cache_dir,
                             "JAX_COMPILATION_CACHE_MAX_SIZE": str(4 << 30)})
  wall = time.perf_counter() - start
  series = read_scalars(os.path.join(workdir, "tb"),
                        {"step": "perf/step_time_s", "loss": "train/loss"})
  return {"wall": wall, "steps": sum(series["step"]), "loss": series["loss"]}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--config", default="lab/configs/chain_cpu.py:stale")
  parser.add_argument("--init_dir", default="", help="checkpoint.init_dir (default: random)")
  parser.add_argument("--steps", type=int, default=4)
  args = parser.parse_args()
  cache = tempfile.mkdtemp(prefix="bench_jax_cache_")
  sides = {"off": run_side(args, ""), "cold": run_side(args, cache),
           "warm": run_side(args, cache)}
  for name, s in sides.items():
    print(f"{name:<5} wall {s['wall']:7.1f} s  steps {s['steps']:7.1f} s  "
          f"losses {[round(x, 6) for x in s['loss']]}")
  off, warm = sides["off"], sides["warm"]
  print(f"ratio off / warm: wall {off['wall'] / warm['wall']:.2f}x, "
        f"steps {off['steps'] / warm['steps']:.2f}x; cold / off wall "
        f"{sides['cold']['wall'] / off['wall']:.2f}x; same losses: "
        f"{all(s['loss'] == off['loss'] for s in sides.values())}")


if __name__ == "__main__":
  main()
