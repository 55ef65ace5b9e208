#!/usr/bin/env bash
# The end of a reference-world comparison (scripts/reproduce_shortcuts.sh), on finished runs:
#   page_swap_report.sh OUT_DIR CONFIG WALL_S RUN...     (WALL_S: the comparison's seconds, or -)
# for each RUN W:S, the page swap (lab/probes/page_swap.py) on the cold start
# OUT_DIR/sft_wW_seedS (copied into each method's page_swap_start/) and on the end of each
# method's run OUT_DIR/<method>_wW_seedS (page_swap/), methods CARR_JAX_METHODS (default
# "grpo cgrpo"); then python -m lab.shortcut_report OUT_DIR. Each probe resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
py="${CARR_JAX_VENV:-.venv}/bin/python"
out=$1 config=$2 wall=$3
shift 3
source scripts/job_env.sh "$out/jax_cache"
methods=(${CARR_JAX_METHODS:-grpo cgrpo})
for run in "$@"; do
  tag="w${run%%:*}_seed${run#*:}"
  swap=("$py" -m lab.probes.page_swap --config "$config" --config.world.seed="${run%%:*}"
        --config.seed="${run#*:}")
  "${swap[@]}" --checkpoint "$out/sft_$tag/checkpoints" --out "$out/sft_$tag/page_swap"
  for method in "${methods[@]}"; do
    mkdir -p "$out/${method}_$tag/page_swap_start"
    cp "$out/sft_$tag/page_swap/follow.json" "$out/${method}_$tag/page_swap_start/"
    "${swap[@]}" --checkpoint "$out/${method}_$tag/checkpoints" --out "$out/${method}_$tag/page_swap"
  done
done
methods="${methods[*]}"
wall_arg=()
if [ "$wall" != - ]; then wall_arg=(--wall-s "$wall"); fi
"$py" -m lab.shortcut_report "$out" ${wall_arg[@]+"${wall_arg[@]}"} --methods "${methods// /,}"
