#!/usr/bin/env bash
# Build the separate virtualenv of the TPU compile check (python -m carr_jax.aot): the
# trainer's requirements plus jax[tpu] (libtpu), from requirements-tpu.txt. No TPU needed.
#
# Usage:  bash scripts/setup_tpu_venv.sh [VENV_DIR]
#   VENV_DIR defaults to $TPU_VENV, else <repo>/.venv-tpu.  $PYTHON picks the interpreter
#   (default python3.11).  Idempotent: a stamp holding the requirements' hash skips pip when
#   nothing changed.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-${TPU_VENV:-$repo/.venv-tpu}}"
python="${PYTHON:-python3.11}"
stamp_now="$(cat "$repo/requirements-tpu.txt" "$repo/requirements.txt" | sha256sum | cut -d' ' -f1)"
stamp_file="$venv/.carr_jax_stamp"

if [[ ! -x "$venv/bin/python" ]]; then
  echo "[setup_tpu_venv] creating venv $venv with $python"
  "$python" -m venv "$venv"
fi
if [[ "$(cat "$stamp_file" 2>/dev/null || true)" != "$stamp_now" ]]; then
  (cd "$repo" && "$venv/bin/pip" install -q -r requirements-tpu.txt)
  echo "$stamp_now" > "$stamp_file"
fi
"$venv/bin/python" -c "import libtpu, jax; print('[setup_tpu_venv] jax', jax.__version__)"
