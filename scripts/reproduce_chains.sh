#!/usr/bin/env bash
# The paper's comparison and ablations in miniature, on the chain world (lab/configs/chain_cpu.py:
# every answer is two opened and cited pages away, one rubric per page, the first page holding a
# lure; the RL runs on stale training pages, :stale). For each run W:S
# (scripts/world_runs.sh: world seeds CARR_JAX_WORLDS, default "0 1 2", each with its own SFT
# seed CARR_JAX_SEEDS, default the world seed), tagged wW_seedS:
#   1. the cold start, two SFT stages: the reference world's (lab/configs/lookup_cpu.py:sft,
#      scripts/cold_start.sh's link-copy gate) into OUT_DIR/ref_sft_<tag>, then the chain
#      world's from it (lab/configs/chain_cpu.py:sft, 300 steps, the same gate asking also
#      for the copy of the first page's term into the second search) into OUT_DIR/sft_<tag>;
#   2. from it, with the same seeds and budget, one RL run per method into
#      OUT_DIR/<method>_<tag>, two at a time: grpo (outcome reward only), cgrpo (the paper,
#      a = 0.3), noconn (C-GRPO, a supported rubric counts without connecting to the answer:
#      --config.judge.require_connected=False) and rubric (C-GRPO, a = 1.0); alpha01 (a = 0.1)
#      when named in CARR_JAX_METHODS; the first two methods run over every world before the
#      next two start, so a run cut short still holds the comparison's first pair;
# then OUT_DIR/summary.json, OUT_DIR/table.md and OUT_DIR/shortcuts.png
# (python -m lab.shortcut_report; its --help defines every metric, full_chain_rate too).
#   bash scripts/reproduce_chains.sh [OUT_DIR]                 (default workdir/chains)
#   CARR_JAX_METHODS="grpo cgrpo noconn rubric alpha01" bash ...
# Runs go two at a time, one core each (scripts/run_lanes.sh); logs in OUT_DIR/*.log; every
# run resumes when rerun. Extra args go to every RL run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
out="$(realpath -m "${1:-workdir/chains}")"
shift || true
start=$(date +%s)
runs=($(bash scripts/world_runs.sh))
export CARR_JAX_METHODS="${CARR_JAX_METHODS:-grpo cgrpo noconn rubric}"
bash scripts/run_lanes.sh sft "$out" lab/configs/lookup_cpu.py:sft --name ref_sft --gate "${runs[@]}"
bash scripts/run_lanes.sh sft "$out" lab/configs/chain_cpu.py:sft --init ref_sft --gate "${runs[@]}"
methods=($CARR_JAX_METHODS)
for ((i = 0; i < ${#methods[@]}; i += 2)); do  # each pair of methods over every world first
  for run in "${runs[@]}"; do
    CARR_JAX_METHODS="${methods[*]:i:2}" bash scripts/run_lanes.sh rl "$out" \
      lab/configs/chain_cpu.py:stale "$run" "$out/sft_w${run%%:*}_seed${run#*:}/checkpoints" "$@"
  done
done
methods="${CARR_JAX_METHODS// /,}"
"${CARR_JAX_VENV:-.venv}/bin/python" -m lab.shortcut_report "$out" \
  --wall-s "$(( $(date +%s) - start ))" --methods "$methods"
