#!/usr/bin/env bash
# The test command (README, CI): sets up .venv if needed, then runs a suite:
#   bash scripts/test.sh          the default suite: every test not marked slow or sglang, on
#                                 two pytest-xdist workers (-n 2; pass -n 0 to run it serially),
#                                 then the tests marked serial alone (their wall-clock bounds
#                                 assume no other test shares the cores)
#   bash scripts/test.sh --slow   the slow tests (end-to-end trainer, SFT acceptance, ...), the
#                                 same two phases: on two workers, then those marked serial
# Tests marked sglang need the SGLang venv (see .ci/run). Extra args go to pytest.
# Fails when a phase fails, or when no test passed in either phase.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
venv="${CARR_JAX_VENV:-.venv}"
log="$(mktemp)"

# run_phase MARKS [PYTEST ARGS...]: pytest's status; 5 (nothing collected) counts as success.
run_phase() {
  local marks="$1" status
  shift
  set +e
  "$venv/bin/python" -m pytest -m "$marks" --durations=10 "$@" 2>&1 | tee -a "$log"
  status=${PIPESTATUS[0]}
  set -e
  if [ "$status" -eq 5 ]; then return 0; fi
  return "$status"
}

if [ "${1:-}" = "--slow" ]; then
  shift
  run_phase "slow and not sglang and not serial" -n 2 "$@"
  run_phase "slow and not sglang and serial" -n 0 "$@"
else
  run_phase "not slow and not sglang and not serial" -n 2 "$@"
  run_phase "not slow and not sglang and serial" -n 0 "$@"
fi
if ! grep -Eq "^(=+ )?([0-9]+ [a-z]+, )*[0-9]+ passed" "$log"; then
  echo "scripts/test.sh: no test passed; refusing to report success" >&2
  exit 1
fi
