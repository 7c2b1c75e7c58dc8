#!/usr/bin/env bash
# Prepare, on the login node, the wheels that installing this project into NVIDIA's PyG image
# needs beyond what the image ships, so that the install itself needs no network:
#
#   - the project's own wheel (pure Python);
#   - a pure-Python wheel of every dependency in pyproject.toml that is not guarded (the guarded
#     ones, torch, PyG, numpy, ..., always come from the image: container/guarded-packages.regex),
#     at the version requirements.lock pins, built when PyPI has only a source archive.
#
# This host's pip does the downloads, so the site's index, mirror, proxy and CA settings apply
# as they do for any pip here. Compute nodes usually have no route to any index: the job-start
# install (INSTALL_PROJECT=1) reads only this folder (pip --no-index --find-links).
#
# Usage: container/wheelhouse.sh DEST     (DEST ends up holding exactly these wheels)
# The wheels are built in a folder inside DEST (the same file system), then each is renamed into place and only
# then are the ones no longer wanted removed: a job installing from DEST meanwhile (a job of an earlier
# `make submit` starting now) reads whole wheels, never a folder emptied for the rebuild.
# Env:   PYTHON  the interpreter whose pip downloads and builds (default: .venv/bin/python, else python3)
set -euo pipefail

# shellcheck source=lib/cmd.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cmd.sh" # root, prog, say, die, host_python

[[ $# == 1 && -n $1 ]] || refuse "usage: $prog DEST"
dest=$1
PYTHON=${PYTHON:-$(host_python "$root")}
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "'$PYTHON -m pip' does not run: set PYTHON to an interpreter with pip"

mkdir -p -- "$dest"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wheelhouse.XXXXXX")
staged=$(mktemp -d "$dest/.staging.XXXXXX")
trap 'rm -rf -- "$tmp" "$staged"' EXIT

# The dependencies to bring: pyproject's, not guarded, each at the lock's pin where it has one.
listed=$(PYTHONPATH=$root "$PYTHON" -m login.wheel_list "$root" "$root/container/guarded-packages.regex") ||
    die "could not list the project's dependencies (login/wheel_list.py, its message is above)"
mapfile -t wanted < <(sed '/^$/d' <<<"$listed")

say "building the project's wheel"
cp -R "$root/pyproject.toml" "$root/README.md" "$root/train" "$tmp/"
"$PYTHON" -m pip wheel --quiet --no-deps --disable-pip-version-check -w "$staged" "$tmp" ||
    die "building the project's wheel failed (pip's message is above)"

for req in "${wanted[@]}"; do
    say "wheel of $req"
    rm -rf -- "$tmp/one" && mkdir "$tmp/one"
    if ! "$PYTHON" -m pip wheel --quiet --no-deps --disable-pip-version-check -w "$tmp/one" "$req"; then
        die "pip could not download or build $req: check this host's pip settings (PIP_INDEX_URL, PIP_CERT, https_proxy), as for any pip install here"
    fi
    for whl in "$tmp/one"/*.whl; do
        case $whl in
        *-none-any.whl) mv -- "$whl" "$staged/" ;;
        *) say "  $(basename -- "$whl") is not pure Python: left to the image (the job-start install fails, naming it, if the image lacks it)" ;;
        esac
    done
done
shopt -s nullglob
declare -A fresh=()
for whl in "$staged"/*.whl; do
    fresh[$(basename -- "$whl")]=1
    mv -f -- "$whl" "$dest/" # a rename over the old wheel of the same name: whole, old or new, at every moment
done
for whl in "$dest"/*.whl; do
    [[ -n ${fresh[$(basename -- "$whl")]:-} ]] || rm -f -- "$whl"
done
say "wheels in $dest: $(find "$dest" -maxdepth 1 -name '*.whl' -printf '%f ')"
