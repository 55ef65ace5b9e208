#!/usr/bin/env bash
# The paper's claim in miniature, over seeds: GRPO (outcome reward only) against C-GRPO (the
# paper's mode) on the reference world (lab/configs/lookup_cpu.py), where a tempting shortcut is
# wrong on the evidence-only questions. For each seed k:
#   1. the cold start (lab/configs/lookup_cpu.py:sft, --config.seed=k) into OUT_DIR/sft_seed<k>,
#      with scripts/cold_start.sh's link-copy gate: the SFT seed moves the cold start the way
#      another machine's float rounding does;
#   2. from it, with the same seed and budget, C-GRPO into OUT_DIR/cgrpo_seed<k> and GRPO into
#      OUT_DIR/grpo_seed<k>, side by side, on stale training pages (:stale: the page and the
#      shortcut each right on ~80% of training questions); CARR_JAX_RL_VARIANT=main runs the
#      main job's RL (:main, every page right) and its GRPO control instead;
# then OUT_DIR/summary.json, OUT_DIR/table.md and OUT_DIR/shortcuts.png
# (python -m carr_jax.shortcut_report; its --help defines every metric: held-out and
# evidence-only accuracy and gain, shortcut rate, tool calls, cited pages, page agreement).
#   bash scripts/reproduce_shortcuts.sh [OUT_DIR]            (default workdir/shortcuts)
#   CARR_JAX_SEEDS="0 1 2 3 4" CARR_JAX_RL_VARIANT=main bash scripts/reproduce_shortcuts.sh
#                                                              the main job's seed table
# Runs go two at a time, one core each (scripts/run_lanes.sh); logs in OUT_DIR/*.log; every
# run resumes when rerun (a finished one is not redone). Extra args go to every RL run.
# Time for 3 seeds on 2 cores (docs/results.md): ~51 min with set-up, estimated from the phases
# of a run measured end to end from a fresh clone with the main job's 50 RL steps, 60 min 42 s
# (SFT pair of 900 steps ~20.5 min, the third SFT alone on both cores ~11 min, three RL pairs
# of 50 steps ~10 min each; :stale's 30-step pairs ~6 min); with the system turn computed once
# per batch (batch.prefix_multiple, since 2026-11-28) ~41 min estimated there, not yet timed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
out="$(realpath -m "${1:-workdir/shortcuts}")"
shift || true
start=$(date +%s)
seeds=(${CARR_JAX_SEEDS:-0 1 2})
bash scripts/run_lanes.sh sft "$out" lab/configs/lookup_cpu.py:sft --gate "${seeds[@]}"
for seed in "${seeds[@]}"; do
  bash scripts/run_lanes.sh rl "$out" "lab/configs/lookup_cpu.py:${CARR_JAX_RL_VARIANT:-stale}" \
    "$seed" "$out/sft_seed$seed/checkpoints" "$@"
done
"${CARR_JAX_VENV:-.venv}/bin/python" -m carr_jax.shortcut_report "$out" \
  --wall-s "$(( $(date +%s) - start ))"
