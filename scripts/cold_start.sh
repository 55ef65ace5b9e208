#!/usr/bin/env bash
# The reference world's cold start with a link-copy gate:
#   cold_start.sh CONFIG WORKDIR SEED [SFT ARGS...]
#   1. python -m carr_jax.sft --config CONFIG --workdir WORKDIR --config.seed=SEED: the
#      configured schedule (lab/configs/lookup_cpu.py:sft: 900 steps, the last 100 decaying);
#   2. python -m lab.probes.link_copy on held-out questions the RL evaluation does not use.
#      Below its minimum, SFT goes on in the same WORKDIR (it resumes from the last
#      checkpoint) for CARR_JAX_TOPUP_STEPS more steps, the first half at the full learning
#      rate, the second decaying it to 0 (as the recipe's last 100), and the gate is asked
#      again; at most CARR_JAX_TOPUPS times. A cold start still below then goes on to RL with
#      a warning.
# The copy of the question's link into the query is learned at a seed- and machine-dependent
# SFT step, mostly as a sudden transition, sometimes slowly (docs/results.md: at bfloat16
# compute one seed's copy was 0.31 after 900 steps and passed only after 1,900), hence up to
# five top-ups; a cold start that passes at once pays only the probe.
#   CARR_JAX_MIN_COPY     greedy exact copy share that passes (default 0.9)
#   CARR_JAX_TOPUPS       top-ups at most (default 5)
#   CARR_JAX_TOPUP_STEPS  steps per top-up (default 200)
# Exits non-zero only when a stage fails; the gate's lines are in the output.
set -euo pipefail
cd "$(dirname "$0")/.."
py="${CARR_JAX_VENV:-.venv}/bin/python"
config=$1 workdir=$2 seed=$3
shift 3
min="${CARR_JAX_MIN_COPY:-0.9}" topups="${CARR_JAX_TOPUPS:-5}" more="${CARR_JAX_TOPUP_STEPS:-200}"
sft=("$py" -m carr_jax.sft --config "$config" --workdir "$workdir" --config.seed="$seed" "$@")
gate() {
  "$py" -m lab.probes.link_copy --config "$config" --checkpoint "$workdir/checkpoints" \
    --min "$min" --config.seed="$seed" "$@"
}
"${sft[@]}"
steps=$(ls "$workdir/checkpoints" | grep -E '^[0-9]+$' | sort -n | tail -n 1)
for ((t = 1; ; t++)); do
  status=0
  gate "$@" || status=$?
  if [ "$status" -eq 0 ]; then exit 0; fi
  if [ "$status" -ne 1 ]; then exit "$status"; fi  # the probe failed, not the gate
  if [ "$t" -gt "$topups" ]; then
    echo "cold_start.sh: the cold start does not copy the link after $steps SFT steps" \
      "($topups top-ups); RL from it may not learn the evidence-only questions" >&2
    exit 0
  fi
  steps=$((steps + more))
  echo "cold_start.sh: top-up $t: SFT to step $steps"
  "${sft[@]}" --config.sft.num_steps="$steps" --config.optim.decay_from="$((steps - more / 2))" \
    --config.optim.decay_steps="$((more / 2))" --config.sft.epochs=1000
done
