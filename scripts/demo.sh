#!/usr/bin/env bash
# The main job on its CPU default: sets up .venv if needed, then
#   1. cold-start SFT of the tiny policy on the scripted expert's episodes
#      (configs/sft_demo_cpu.py, 4-7 min on 2 cores) into $workdir/sft, so that the policy
#      starts RL following the tool-call format;
#   2. C-GRPO on the synthetic world from that policy (configs/demo_cpu.py) into $workdir/rl.
# Both stages resume when rerun (a finished SFT stage is not redone).
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
  "$venv/bin/python" -m carr_jax.sft --config configs/sft_demo_cpu.py --workdir "$workdir/sft"
  init=("--config.checkpoint.init_dir=$workdir/sft/checkpoints")
fi
exec "$venv/bin/python" -m carr_jax.train --config configs/demo_cpu.py \
  --workdir "$workdir/rl" ${init[@]+"${init[@]}"} "$@"
