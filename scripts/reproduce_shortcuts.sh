#!/usr/bin/env bash
# The paper's central effect in miniature: GRPO (outcome reward only) against C-GRPO (the
# paper's mode) from the same SFT policy on the same "lookup" world (configs/lookup_cpu.py),
# the same seeds and the same budget.
#   bash scripts/reproduce_shortcuts.sh [OUT_DIR]     (default workdir/shortcuts)
# 1. cold-start SFT once into OUT_DIR/sft;
# 2. for each seed, both methods into OUT_DIR/grpo_seed<k> and OUT_DIR/cgrpo_seed<k>;
# 3. OUT_DIR/summary.json, OUT_DIR/table.md and OUT_DIR/shortcuts.png
#    (python -m carr_jax.shortcut_report; its --help has the metrics' full definitions).
# Metrics, per run (summary.json: per method, one value per seed, and the wall time):
#   heldout_accuracy   avg@2 outcome accuracy on 64 held-out questions after the last step
#   shortcut_rate      on those held-out questions that admit a shortcut: the share of right
#                      answers whose rubric reward is below 0.5 (right without citing the page)
#   tool_calls_first / tool_calls_last
#                      tool calls per training episode, mean over the first / last 10% of steps
#   cited_pages        distinct cited URLs per held-out episode after the last step
# Per step (TensorBoard, the plot): outcome and rubric reward, tool calls per episode and the
# shortcut rate of the training rollouts; held-out accuracy every 10 steps.
# Measured (docs/results.md): ~55 min on 2 cores (SFT 8.5 min, each RL run ~7.7 min).
# Every run resumes when rerun (a finished one is not redone).
#   CARR_JAX_SEEDS   the seeds (default "0 1 2")
# Extra args go to every RL run, e.g. --config.train.num_steps=10.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
venv="${CARR_JAX_VENV:-.venv}"
out="$(realpath -m "${1:-workdir/shortcuts}")"
shift || true
start=$(date +%s)
"$venv/bin/python" -m carr_jax.sft --config configs/lookup_cpu.py:sft --workdir "$out/sft"
for seed in ${CARR_JAX_SEEDS:-0 1 2}; do
  for method in grpo cgrpo; do
    mode=paper
    [ "$method" = grpo ] && mode=grpo
    "$venv/bin/python" -m carr_jax.train --config configs/lookup_cpu.py \
      --workdir "$out/${method}_seed$seed" --config.checkpoint.init_dir="$out/sft/checkpoints" \
      --config.seed="$seed" --config.reward.mode="$mode" "$@"
  done
done
"$venv/bin/python" -m carr_jax.shortcut_report "$out" --wall-s "$(( $(date +%s) - start ))"
