#!/usr/bin/env bash
# The main job on its CPU default (configs/kinds_cpu.py): sets up .venv if needed, then
#   1. cold-start SFT of the tiny policy on kind questions, in two stages (~1.5 min on 2
#      cores): a clean expert's replies (the policy learns to read the question) into
#      $workdir/sft, then a noisy expert's (right on 3/4 of them) into $workdir/sft_noisy;
#   2. C-GRPO from that policy into $workdir/rl (~2 min): held-out avg@4 accuracy at the
#      start and the end, last line `heldout_accuracy start=... end=... n=... samples=...`.
# Every stage resumes when rerun (a finished SFT stage is not redone).
#   CARR_JAX_WORKDIR   run directory (default workdir/demo)
#   CARR_JAX_DEMO_SFT  0 = skip stage 1 and start RL from a random policy (default 1)
# Extra args go to the RL trainer, e.g. --config.train.num_steps=8.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
venv="${CARR_JAX_VENV:-.venv}"
workdir="$(realpath -m "${CARR_JAX_WORKDIR:-workdir/demo}")"
init=()
if [ "${CARR_JAX_DEMO_SFT:-1}" != 0 ]; then
  "$venv/bin/python" -m carr_jax.sft --config configs/kinds_cpu.py:sft --workdir "$workdir/sft"
  "$venv/bin/python" -m carr_jax.sft --config configs/kinds_cpu.py:sft_noisy \
    --workdir "$workdir/sft_noisy" --config.checkpoint.init_dir="$workdir/sft/checkpoints"
  init=("--config.checkpoint.init_dir=$workdir/sft_noisy/checkpoints")
fi
exec "$venv/bin/python" -m carr_jax.train --config configs/kinds_cpu.py \
  --workdir "$workdir/rl" ${init[@]+"${init[@]}"} "$@"
