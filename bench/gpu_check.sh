#!/usr/bin/env bash
# `make gpu-check`: run bench/gpu_check.py with a Python whose torch sees CUDA.
# Which Python: $GPU_PYTHON when set (e.g. the system python3 of a GPU node or NVIDIA's PyG container);
# else the first of the project's venv and python3 on PATH that imports torch with CUDA; else the venv
# (or python3) on the CPU, where the CUDA checks are skipped with the reason.
# The project itself needs no install: it runs from this checkout (PYTHONPATH).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV_PY=${VENV_PY:-$ROOT/.venv/bin/python}

has_torch() { [ "$("$1" -c 'import torch; print("torch-ok")' 2>/dev/null)" = torch-ok ]; }
has_cuda() { [ "$("$1" -c 'import torch; print(torch.cuda.is_available())' 2>/dev/null)" = True ]; }

py=${GPU_PYTHON:-}
if [ -n "$py" ]; then
  command -v "$py" >/dev/null 2>&1 || { echo "error: GPU_PYTHON=$py is not an executable Python" >&2; exit 2; }
  has_torch "$py" || { echo "error: GPU_PYTHON=$py cannot import torch" >&2; exit 2; }
else
  for candidate in "$VENV_PY" python3; do
    if command -v "$candidate" >/dev/null 2>&1 && has_cuda "$candidate"; then py=$candidate; break; fi
  done
  if [ -z "$py" ]; then
    for candidate in "$VENV_PY" python3; do
      if command -v "$candidate" >/dev/null 2>&1 && has_torch "$candidate"; then py=$candidate; break; fi
    done
  fi
  if [ -z "$py" ]; then
    echo "error: no Python with torch found (tried $VENV_PY and python3); run \`make setup\` or set GPU_PYTHON=" >&2
    exit 2
  fi
fi
# Every package the train package imports when it loads, derived from the package itself (bench/gpu_imports.py).
(cd "$ROOT" && PYTHONPATH="$ROOT" "$py" -m bench.gpu_imports) || exit 2
echo "gpu-check: using $py ($("$py" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.cuda.is_available())'))"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"
exec "$py" -m bench.gpu_check "$@"
