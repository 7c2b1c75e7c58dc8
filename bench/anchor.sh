#!/usr/bin/env bash
# Build the benchmark anchor: a venv beside the project's (.venv-anchor) with the project's pinned runtime
# (requirements.lock, CPU torch) plus pyg-lib built from the saved sources (sampler only, ~3 min on 2 cores).
# Rebuilt only when the sources or the pins change (hash in $ANCHOR_VENV/.anchor-hash).
# Usage: bench/anchor.sh [--check] [VENV_DIR]   (default .venv-anchor); PYG_LIB_SRC=/path/to/shared/pyg-lib.
# Exit 0 with the venv ready; exit 3 when the anchor cannot be built here (the bench then runs without it).
# --check: build nothing; exit 0 when the venv is built and current, 3 (with the reason) otherwise.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CHECK=0
if [ "${1:-}" = --check ]; then CHECK=1; shift; fi
ANCHOR_VENV=${1:-$ROOT/.venv-anchor}
PYG_LIB_SRC=${PYG_LIB_SRC:-$ROOT/../shared/pyg-lib}
PYTHON=${PYTHON:-python3}
log() { echo "[anchor $(date +%H:%M:%S)] $*" >&2; }
cannot() { log "cannot build the pyg-lib anchor: $*"; exit 3; }

[ -f "$PYG_LIB_SRC/build.sh" ] || cannot "no $PYG_LIB_SRC/build.sh (set PYG_LIB_SRC to the pyg-lib source folder)"
for tool in g++ cmake ninja; do
  command -v "$tool" >/dev/null || cannot "missing $tool (apt-get install -y build-essential cmake ninja-build)"
done

hash=$( { cat "$PYG_LIB_SRC/build.sh" "$ROOT/requirements.lock"
          find "$PYG_LIB_SRC/src" -type f -name 'pyg-lib*' -print0 | sort -z | xargs -0 cat; } \
        | sha256sum | cut -c1-16)
if [ -f "$ANCHOR_VENV/.anchor-hash" ] && [ "$(cat "$ANCHOR_VENV/.anchor-hash")" = "$hash" ]; then
  log "up to date: $ANCHOR_VENV ($hash)"
  exit 0
fi
if [ "$CHECK" = 1 ]; then
  log "pyg-lib anchor not ready: $ANCHOR_VENV is not built for the current sources (make anchor builds it, ~3 min)"
  exit 3
fi

log "building $ANCHOR_VENV ($hash)"
rm -rf "$ANCHOR_VENV"
trap 'rm -rf "$ANCHOR_VENV"' ERR  # never leave a half-built anchor that looks usable
"$PYTHON" -m venv "$ANCHOR_VENV"
"$ANCHOR_VENV/bin/pip" install --quiet --disable-pip-version-check -r "$ROOT/requirements.lock" 2>&1 \
  | { grep -v "^WARNING: Location 'file:" || true; }
# build.sh skips its own venv step because the venv exists; b = pyg-lib only
PREFIX="$ANCHOR_VENV/.build" VENV="$ANCHOR_VENV" JOBS="${JOBS:-2}" PYG_SAMPLER_ONLY=1 \
  bash "$PYG_LIB_SRC/build.sh" b >&2
rm -rf "$ANCHOR_VENV/.build"
"$ANCHOR_VENV/bin/python" -c "import torch, pyg_lib, torch_geometric.typing as t; assert t.WITH_PYG_LIB; torch.ops.pyg.neighbor_sample" \
  || cannot "pyg-lib built but does not import"
echo "$hash" > "$ANCHOR_VENV/.anchor-hash"
log "ready: $ANCHOR_VENV"
