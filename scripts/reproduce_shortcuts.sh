#!/usr/bin/env bash
# The paper's claim in miniature, over worlds: GRPO (outcome reward only) against C-GRPO (the
# paper's mode) on the reference world (lab/configs/lookup_cpu.py), where a tempting shortcut is
# wrong on the evidence-only questions and the answer is in a glossary page's body. For each
# run W:S (scripts/world_runs.sh: world seeds CARR_JAX_WORLDS, default "0 1 2", each with its
# own SFT seed, CARR_JAX_SEEDS, default the world seed):
#   1. the cold start (lab/configs/lookup_cpu.py:sft on world W, seed S) into
#      OUT_DIR/sft_wW_seedS, through scripts/cold_start.sh's link-copy gate;
#   2. from it, C-GRPO into OUT_DIR/cgrpo_wW_seedS and GRPO into OUT_DIR/grpo_wW_seedS, side by
#      side, on stale training pages (:stale: the page and the shortcut each right on ~80% of
#      training questions); CARR_JAX_RL_VARIANT=main runs the main job's RL (:main, every page
#      right) and its GRPO control instead;
#   3. the page swap (lab/probes/page_swap.py) on the cold start and on each run's end;
# then OUT_DIR/summary.json, OUT_DIR/table.md and OUT_DIR/shortcuts.png
# (python -m lab.shortcut_report; its --help defines every metric).
#   bash scripts/reproduce_shortcuts.sh [OUT_DIR]            (default workdir/shortcuts)
# Runs go two at a time, one core each (scripts/run_lanes.sh); logs in OUT_DIR/*.log; every
# run resumes when rerun (a finished one is not redone). Extra args go to every RL run.
# Time: benchmarks/README.md `## demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
out="$(realpath -m "${1:-workdir/shortcuts}")"
shift || true
start=$(date +%s)
runs=($(bash scripts/world_runs.sh))
variant="${CARR_JAX_RL_VARIANT:-stale}"
methods=(${CARR_JAX_METHODS:-grpo cgrpo})
bash scripts/run_lanes.sh sft "$out" lab/configs/lookup_cpu.py:sft --gate "${runs[@]}"
for run in "${runs[@]}"; do
  bash scripts/run_lanes.sh rl "$out" "lab/configs/lookup_cpu.py:$variant" "$run" \
    "$out/sft_w${run%%:*}_seed${run#*:}/checkpoints" "$@"
done
CARR_JAX_METHODS="${methods[*]}" bash scripts/page_swap_report.sh "$out" \
  "lab/configs/lookup_cpu.py:$variant" "$(( $(date +%s) - start ))" "${runs[@]}"
