#!/usr/bin/env bash
# Prints the experiment's runs, one WORLD:SEED per line (scripts/run_lanes.sh): the world seeds
# of CARR_JAX_WORLDS (default "0 1 2") paired in order with the SFT seeds of CARR_JAX_SEEDS
# (default: the world seeds, so each world has its own SFT seed). Several seeds on one world:
# CARR_JAX_WORLDS="0 0 0" CARR_JAX_SEEDS="0 1 2".
set -euo pipefail
worlds=(${CARR_JAX_WORLDS:-0 1 2})
seeds=(${CARR_JAX_SEEDS:-${worlds[*]}})
if [ "${#worlds[@]}" -ne "${#seeds[@]}" ]; then
  echo "world_runs.sh: CARR_JAX_WORLDS has ${#worlds[@]} world seeds and CARR_JAX_SEEDS" \
    "${#seeds[@]} seeds; give one seed per world" >&2
  exit 2
fi
for i in "${!worlds[@]}"; do echo "${worlds[i]}:${seeds[i]}"; done
