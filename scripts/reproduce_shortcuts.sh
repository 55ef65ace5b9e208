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
# Time for 3 seeds on 2 quiet cores, set-up included: 51 min 44 s, timed end to end from a fresh
# clone on a slow 2-core machine (2026-11-28: SFT pair of 900 steps 17.8 min, one gate top-up
# and the probes 5.1 min, the third SFT alone 9.6 min, three RL pairs of 30 steps ~6 min each;
# benchmarks/README.md `## demo`). Each gate top-up a seed needs adds 200 SFT steps (~2-4 min).
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
