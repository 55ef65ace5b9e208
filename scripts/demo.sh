#!/usr/bin/env bash
# The main job on its CPU default (lab/configs/lookup_cpu.py, the reference world): sets up .venv
# if needed, then
#   1. cold-start SFT of the tiny policy (900 steps, the last 100 decaying the learning rate)
#      into $workdir/sft: an expert that searches the question's own glossary entry, opens
#      it and cites it on one of two samples, and answers the relation's usual kind without a tool
#      (the shortcut) on the other; then a gate (scripts/cold_start.sh): SFT goes on by 200
#      steps, five times at most, while the policy does not copy the question's link into
#      its query;
#   2. 50 C-GRPO steps from that policy into $workdir/rl, with the browser tools. It
#      ends with held-out avg@4 at the start and the end, overall and on the evidence-only
#      questions (where the shortcut is wrong); last line
#      `heldout_accuracy start=... end=... n=... samples=...`.
# Every stage resumes when rerun (a finished SFT stage is not redone). Measured results and
# time: docs/results.md (`## The main job`).
#   CARR_JAX_WORKDIR   run directory (default workdir/demo)
#   CARR_JAX_SEED      seed of both stages (default 0)
#   CARR_JAX_WORLD     the world's seed, both stages (default 0); over worlds with the GRPO
#                      control: CARR_JAX_RL_VARIANT=main bash scripts/reproduce_shortcuts.sh
#   CARR_JAX_DEMO_SFT  0 = skip stage 1 and start RL from a random policy (default 1)
# Extra args go to the RL trainer, e.g. --config.train.num_steps=8.
# The tool-free kind-question job (3 min) is lab/configs/kinds_cpu.py; its docstring has the commands.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
venv="${CARR_JAX_VENV:-.venv}"
workdir="$(realpath -m "${CARR_JAX_WORKDIR:-workdir/demo}")"
source scripts/job_env.sh "$workdir/jax_cache"
seed="${CARR_JAX_SEED:-0}"
world=("--config.world.seed=${CARR_JAX_WORLD:-0}")
init=()
if [ "${CARR_JAX_DEMO_SFT:-1}" != 0 ]; then
  bash scripts/cold_start.sh lab/configs/lookup_cpu.py:sft "$workdir/sft" "$seed" "${world[@]}"
  init=("--config.checkpoint.init_dir=$workdir/sft/checkpoints")
fi
exec "$venv/bin/python" -m carr_jax.train --config lab/configs/lookup_cpu.py:main \
  --workdir "$workdir/rl" --config.seed="$seed" "${world[@]}" ${init[@]+"${init[@]}"} "$@"
