#!/usr/bin/env bash
# Routing replay's learning check: the main job as a mixture of experts
# (lab/configs/lookup_cpu.py:moe), trained with and without `model.routing_replay`. For each
# run W:S (scripts/world_runs.sh: world seeds CARR_JAX_WORLDS, default "0 1 2", each with its
# own SFT seed, CARR_JAX_SEEDS, default the world seed), tagged wW_seedS:
#   1. the cold start (lab/configs/lookup_cpu.py:sft through scripts/cold_start.sh's gate) into
#      OUT_DIR/sft_<tag> (a finished one, e.g. a link to the main job's, is reused);
#   2. its policy upcycled to 8 experts, 2 per token (lab/upcycle.py, seed S) into
#      OUT_DIR/moe_init_<tag>;
#   3. from it, C-GRPO with routing replay into OUT_DIR/replay_<tag> and without into
#      OUT_DIR/noreplay_<tag>, side by side (the engine samples in bfloat16, the trainer runs
#      in float32: their routes differ);
# then OUT_DIR/summary.json and OUT_DIR/table.md (python -m lab.shortcut_report) and
# OUT_DIR/replay.json with the replay table (python -m lab.replay_report: its --help defines it).
#   bash scripts/reproduce_replay.sh [OUT_DIR]                 (default workdir/replay)
# Runs go two at a time, one core each (scripts/run_lanes.sh); every run resumes when rerun.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
py="${CARR_JAX_VENV:-.venv}/bin/python"
out="$(realpath -m "${1:-workdir/replay}")"
shift || true
start=$(date +%s)
runs=($(bash scripts/world_runs.sh))
export CARR_JAX_METHODS="replay noreplay"
bash scripts/run_lanes.sh sft "$out" lab/configs/lookup_cpu.py:sft --gate "${runs[@]}"
for run in "${runs[@]}"; do
  tag="w${run%%:*}_seed${run#*:}"
  if [ ! -d "$out/moe_init_$tag" ]; then
    "$py" -m lab.upcycle --dense "$out/sft_$tag/checkpoints" --out "$out/moe_init_$tag" \
      --expert-noise 0.02 --seed "${run#*:}"
  fi
  bash scripts/run_lanes.sh rl "$out" lab/configs/lookup_cpu.py:moe "$run" \
    "$out/moe_init_$tag" "$@"
done
"$py" -m lab.shortcut_report "$out" --wall-s "$(( $(date +%s) - start ))" \
  --methods replay,noreplay
"$py" -m lab.replay_report "$out"
