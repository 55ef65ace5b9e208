#!/usr/bin/env bash
# The main job on its CPU default (configs/lookup_cpu.py): sets up .venv if needed, then
#   1. cold-start SFT of the tiny policy on lookup questions (~9 min on 2 cores) into
#      $workdir/sft: an expert that searches the glossary and cites it on every other sample
#      and guesses without a tool on the rest;
#   2. C-GRPO from that policy into $workdir/rl (~8 min), with the browser tools: held-out
#      avg@4 accuracy at the start and the end, last line
#      `heldout_accuracy start=... end=... n=... samples=...`.
# Every stage resumes when rerun (a finished SFT stage is not redone).
#   CARR_JAX_WORKDIR   run directory (default workdir/demo)
#   CARR_JAX_DEMO_SFT  0 = skip stage 1 and start RL from a random policy (default 1)
# Extra args go to the RL trainer, e.g. --config.train.num_steps=8.
# The tool-free kind-question job (3 min) is configs/kinds_cpu.py; its docstring has the commands.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
venv="${CARR_JAX_VENV:-.venv}"
workdir="$(realpath -m "${CARR_JAX_WORKDIR:-workdir/demo}")"
init=()
if [ "${CARR_JAX_DEMO_SFT:-1}" != 0 ]; then
  "$venv/bin/python" -m carr_jax.sft --config configs/lookup_cpu.py:sft_main \
    --workdir "$workdir/sft"
  init=("--config.checkpoint.init_dir=$workdir/sft/checkpoints")
fi
exec "$venv/bin/python" -m carr_jax.train --config configs/lookup_cpu.py:main \
  --workdir "$workdir/rl" ${init[@]+"${init[@]}"} "$@"
