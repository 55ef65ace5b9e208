#!/usr/bin/env bash
# Build the separate SGLang CPU virtualenv that serves rollouts on a machine without a GPU.
#
# Usage:  bash scripts/setup_sglang_cpu.sh [VENV_DIR]
#   VENV_DIR defaults to $SGLANG_VENV, else <repo>/.venv-sglang.  $PYTHON picks the
#   interpreter (default python3.11: the torch 2.13.0 CPU wheel is cp311).
#
# Recipe: torch==2.13.0 (CPU wheel) first, then sglang's
# runtime dependencies from requirements-sglang.txt, then the `#nodeps` pins of that file with
# --no-deps (sglang's wheel pins a CUDA torch).  Then our two compatibility modules go into
# site-packages: a `sgl_kernel` stand-in and a .pth hook defining the torchvision op schemas.
#
# Idempotent: a stamp holding the hash of the requirements file skips the pip steps when
# nothing changed; the compat modules are always re-copied (cheap) and an import check runs.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-${SGLANG_VENV:-$repo/.venv-sglang}}"
python="${PYTHON:-python3.11}"
reqs="$repo/requirements-sglang.txt"
compat="$repo/scripts/sglang_compat"
t0=$(date +%s)

stamp_now="$(sha256sum "$reqs" | cut -d' ' -f1)"
stamp_file="$venv/.carr_jax_stamp"

if [[ ! -x "$venv/bin/python" ]]; then
  echo "[setup_sglang_cpu] creating venv $venv with $python"
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q)
# pip warns once per package about local index folders this machine's pip config names; noise.
pip_noise="is ignored: it is neither a file nor a directory"
quiet_pip() { "${pip[@]}" "$@" 2> >(grep -v "$pip_noise" >&2); }

if [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$stamp_now" ]]; then
  echo "[setup_sglang_cpu] requirements unchanged since last install: skipping pip"
else
  rm -f "$stamp_file"
  # torch first and alone: every later resolution must see the CPU build as satisfied.
  torch_pin="$(grep -E '^torch==' "$reqs")"
  echo "[setup_sglang_cpu] installing $torch_pin"
  quiet_pip "$torch_pin"
  t1=$(date +%s); echo "[setup_sglang_cpu] torch: $((t1 - t0)) s"
  echo "[setup_sglang_cpu] installing sglang runtime dependencies"
  quiet_pip -r "$reqs"
  t2=$(date +%s); echo "[setup_sglang_cpu] runtime deps: $((t2 - t1)) s"
  mapfile -t nodeps < <(sed -n 's/^#nodeps //p' "$reqs")
  echo "[setup_sglang_cpu] installing --no-deps ${nodeps[*]}"
  quiet_pip --no-deps "${nodeps[@]}"
  t3=$(date +%s); echo "[setup_sglang_cpu] no-deps pins: $((t3 - t2)) s"
  echo "$stamp_now" > "$stamp_file"
fi

site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
rm -rf "$site/sgl_kernel"
cp -r "$compat/sgl_kernel" "$site/sgl_kernel"
cp "$compat/carr_jax_torchvision_ops.py" "$site/"
cp "$compat/carr_jax_torchvision_ops.pth" "$site/"
find "$site/sgl_kernel" -name '__pycache__' -prune -exec rm -rf {} +

echo "[setup_sglang_cpu] import check"
SGLANG_USE_CPU_ENGINE=1 PYTHONWARNINGS=ignore "$venv/bin/python" - <<'PY'
import torch, torchvision, sgl_kernel, sglang
from sglang.srt.entrypoints import http_server  # noqa: F401  (pulls the server's import graph)
print(f"torch {torch.__version__}  torchvision {torchvision.__version__}  "
      f"sglang {sglang.__version__}  sgl_kernel stand-in {sgl_kernel.__version__}")
PY

t_end=$(date +%s)
echo "[setup_sglang_cpu] done in $((t_end - t0)) s; venv $venv is $(du -sh "$venv" | cut -f1)"
