#!/usr/bin/env bash
# The test command (README, CI): sets up .venv if needed, then runs a suite:
#   bash scripts/test.sh          the default suite: every test not marked slow or sglang, on
#                                 two pytest-xdist workers (-n 2; pass -n 0 to run it serially)
#   bash scripts/test.sh --slow   the slow tests (end-to-end trainer, SFT acceptance, ...),
#                                 serially (the two-process multi-host and learning runs each
#                                 fill both cores)
# Tests marked sglang need the SGLang venv (see .ci/run). Extra args go to pytest.
# Fails when pytest collects no test (pytest exits 5) or when nothing passed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
venv="${CARR_JAX_VENV:-.venv}"
log="$(mktemp)"
set +e
marks="not slow and not sglang" workers=(-n 2)
if [ "${1:-}" = "--slow" ]; then marks="slow and not sglang" workers=(); shift; fi
"$venv/bin/python" -m pytest -m "$marks" "${workers[@]}" --durations=10 "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ]; then exit "$status"; fi
if ! tail -n 3 "$log" | grep -Eq "[0-9]+ passed"; then
  echo "scripts/test.sh: no test passed; refusing to report success" >&2
  exit 1
fi
