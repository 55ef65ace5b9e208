#!/usr/bin/env bash
# The stages of a seeded experiment (scripts/reproduce_shortcuts.sh). A RUN is WORLD:SEED (a
# bare SEED: world 0): --config.world.seed=WORLD --config.seed=SEED, named <name>_wWORLD_seedSEED.
#   run_lanes.sh sft OUT_DIR CONFIG [--name NAME] [--init FROM] [--gate] RUN...
#                                                     cold-start SFT of each RUN into
#                                                     OUT_DIR/NAME_w<W>_seed<S> (NAME: sft), two
#                                                     at a time; with --init, from the
#                                                     checkpoints of OUT_DIR/FROM_w<W>_seed<S>
#                                                     (a second stage); with --gate, through
#                                                     scripts/cold_start.sh (more steps until the
#                                                     link is copied)
#   run_lanes.sh rl OUT_DIR CONFIG RUN INIT [ARGS]    GRPO and C-GRPO from checkpoint dir INIT,
#                                                     side by side, into OUT_DIR/grpo_w<W>_seed<S>
#                                                     and OUT_DIR/cgrpo_w<W>_seed<S>; with
#                                                     CARR_JAX_METHODS="grpo cgrpo noconn ..."
#                                                     those methods, two at a time
# Two runs go side by side, each pinned to one core (taskset) when there are two; a run left
# without a partner gets both cores, and so do the processes a run starts after its partner
# ended (the gate's probe and top-ups). (On 2 quiet cores an SFT step of the reference world
# takes 0.63-0.65 s alone and 1.17 s pinned beside another: a pair is ~10% faster than the
# two in turn; benchmarks/README.md `## demo`.) Each run logs to <its workdir>.log and
# resumes when rerun; a failed run fails the stage after its partner ends.
set -euo pipefail
cd "$(dirname "$0")/.."
py="${CARR_JAX_VENV:-.venv}/bin/python"
stage=$1 out=$2 config=$3
shift 3
mkdir -p "$out"
source scripts/job_env.sh "$out/jax_cache"

split_run() {  # split_run RUN: sets world, seed and tag (w<W>_seed<S>) of WORLD:SEED or SEED
  if [[ $1 == *:* ]]; then world=${1%%:*} seed=${1#*:}; else world=0 seed=$1; fi
  tag="w${world}_seed${seed}"
}

pin() {  # pin CORE CMD...: CMD on core CORE when the machine has two
  if [ "$(nproc)" -ge 2 ] && command -v taskset > /dev/null; then
    taskset -c "$1" "${@:2}"
  else
    "${@:2}"
  fi
}

unpin() {  # unpin PID: PID and every process under it may use every core (the processes
  # they start too; a running XLA process keeps the thread pool it started with)
  local child
  taskset -a -p -c "0-$(( $(nproc) - 1 ))" "$1" > /dev/null 2>&1 || true
  for child in $(pgrep -P "$1" || true); do unpin "$child"; done
}

pair() {  # pair "CMD_A" "CMD_B" LOG_A LOG_B: both at once, one core each; fails if either did
  # (CMD_A alone, with CMD_B empty, gets every core). When one ends, what the other starts
  # next (a gate's top-up SFT, say) gets every core.
  local a b pid status=0
  if [ -n "$2" ]; then
    pin 0 bash -c "$1" > "$3" 2>&1 & a=$!
    pin 1 bash -c "$2" > "$4" 2>&1 & b=$!
    wait -n "$a" "$b" || true  # statuses are read below: bash keeps them
    if command -v pgrep > /dev/null; then
      for pid in "$a" "$b"; do if kill -0 "$pid" 2> /dev/null; then unpin "$pid"; fi; done
    fi
  else
    bash -c "$1" > "$3" 2>&1 & a=$!
  fi
  wait "$a" || { status=1; tail -n 20 "$3"; }
  if [ -n "$2" ]; then wait "$b" || { status=1; tail -n 20 "$4"; }; fi
  return $status
}

if [ "$stage" = sft ]; then
  name=sft from="" gate=""
  while [ $# -gt 0 ]; do
    case $1 in
      --name) name=$2; shift 2 ;;
      --init) from=$2; shift 2 ;;
      --gate) gate=1; shift ;;
      *) break ;;
    esac
  done
  runs=("$@")
  for ((i = 0; i < ${#runs[@]}; i += 2)); do
    cmds=() logs=()
    for run in "${runs[@]:i:2}"; do
      split_run "$run"
      init=" --config.world.seed=$world"
      if [ -n "$from" ]; then init+=" --config.checkpoint.init_dir='$out/${from}_$tag/checkpoints'"; fi
      if [ -n "$gate" ]; then
        cmds+=("bash scripts/cold_start.sh '$config' '$out/${name}_$tag' $seed$init")
      else
        cmds+=("'$py' -m carr_jax.sft --config '$config' --workdir '$out/${name}_$tag' --config.seed=$seed$init")
      fi
      logs+=("$out/${name}_$tag.log")
    done
    pair "${cmds[0]}" "${cmds[1]:-}" "${logs[0]}" "${logs[1]:-/dev/null}"
  done
  exit 0
fi
split_run "$1"
init=$2
shift 2
extra=""
if [ $# -gt 0 ]; then extra=$(printf " %q" "$@"); fi
method_args() {  # the RL arguments of method $1 (its label: shortcuts.py METHODS)
  case $1 in
    grpo) echo "--config.reward.mode=grpo" ;;
    cgrpo) echo "--config.reward.mode=paper" ;;
    noconn) echo "--config.reward.mode=paper --config.judge.require_connected=False" ;;
    rubric) echo "--config.reward.mode=paper --config.reward.alpha=1.0" ;;
    alpha01) echo "--config.reward.mode=paper --config.reward.alpha=0.1" ;;
    overlap) echo "--config.reward.mode=paper --config.rollout.max_staleness=1" \
      "--config.loss.old_logprobs=rollout --config.loss.importance_sampling=none" ;;
    overlapice) echo "--config.reward.mode=paper --config.rollout.max_staleness=1" ;;
    replay) echo "--config.reward.mode=paper --config.model.routing_replay=True" ;;
    noreplay) echo "--config.reward.mode=paper --config.model.routing_replay=False" ;;
    *) echo "unknown method $1 (grpo, cgrpo, noconn, rubric, alpha01, overlap, overlapice," \
      "replay, noreplay)" >&2
      return 2 ;;
  esac
}
cmd() {  # the RL command of method $1
  echo "'$py' -m carr_jax.train --config '$config' --workdir '$out/$1_$tag'" \
    "--config.checkpoint.init_dir='$init' --config.seed=$seed --config.world.seed=$world" \
    "$(method_args "$1")$extra"
}
methods=(${CARR_JAX_METHODS:-grpo cgrpo})
for method in "${methods[@]}"; do method_args "$method" > /dev/null; done
for ((i = 0; i < ${#methods[@]}; i += 2)); do
  a=${methods[i]} b=${methods[i + 1]:-}
  pair "$(cmd "$a")" "${b:+$(cmd "$b")}" "$out/${a}_$tag.log" "${b:+$out/${b}_$tag.log}"
done
for method in "${methods[@]}"; do
  echo "$method world $world seed $seed: $(tail -n 1 "$out/${method}_$tag.log")"
done
