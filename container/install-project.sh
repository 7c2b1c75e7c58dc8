#!/bin/sh
# Install this project (package `train`, not editable) into the Python of NVIDIA's PyG
# container, adding only what the image lacks and never replacing what it ships.
#
# The one install step of every route, so that they all make the same image:
#   container/Dockerfile       RUN --mount=... sh /opt/project/container/install-project.sh /opt/project
#   container/enroot-build.sh  enroot start --root --rw -m CHECKOUT:/opt/project NAME sh /opt/project/container/install-project.sh /opt/project
#   job start on a plain registry image (nvcr.io#nvidia/pyg:TAG), same command.
#
# Guard: every installed distribution whose name matches GUARD_REGEX (torch*, pyg*, numpy, ...;
# default: container/guarded-packages.regex) is written, at the version the image has, into a pip constraints file built here, so pip
# cannot replace it; a requirement that needs another version makes pip (and so the build)
# fail, naming the package. After the install the guarded versions and torch.__version__ are
# compared with those from before, and any change fails the build too.
#
# The image's own pip constraints (NGC images since 25.03: /etc/pip/constraint.txt, named by
# PIP_CONSTRAINT) apply too. The build runs without build isolation whenever the image's
# setuptools can build the project (>= 61), so pip downloads no build environment: the image's
# pinned setuptools would collide with one, and compute nodes have no index to download from.
#
# POSIX sh on purpose (the enroot route calls it with `sh`).
#
# Usage: sh container/install-project.sh [PROJECT_DIR]   (default: the folder above this script)
# Env:   PYTHON         interpreter to install into (default: python3, else python)
#        GUARD_REGEX    case-insensitive extended regex on `pip list --format=freeze` lines
#        PROJECT_FILES  what is copied from PROJECT_DIR into a temporary build folder (the checkout
#                       or read-only mount is never written to); missing entries are skipped
#        IMPORT_CHECK   module imported afterwards, from outside the sources (empty: skip)
#        WHEELS         a folder of wheels prepared on the login node (container/wheelhouse.sh),
#                       searched first (pip --find-links)
#        OFFLINE=1      install from WHEELS and the image alone (pip --no-index): the job-start
#                       install on compute nodes, which have no route to a package index
#        Any PIP_* variable (index, proxy, CA bundle, cache) is honoured by pip as usual.
# When the interpreter's site-packages is not writable (a job start without root), it installs
# with --user: set PYTHONUSERBASE to a per-job folder for that case.
set -eu

prog=install-project.sh
script_dir=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
# shellcheck source=lib/msg.sh
. "$script_dir/../lib/msg.sh" # say, die (the messages of every script)
project=${1:-$(dirname -- "$script_dir")}
project=$(CDPATH='' cd -- "$project" && pwd) || die "no such project folder: ${1:-}"
[ -f "$project/pyproject.toml" ] || die "no pyproject.toml in $project"

PYTHON=${PYTHON:-$(command -v python3 || command -v python || true)}
[ -n "$PYTHON" ] || die "no python3 or python on PATH (set PYTHON)"
if [ -z "${GUARD_REGEX:-}" ]; then
    [ -f "$script_dir/guarded-packages.regex" ] || die "no GUARD_REGEX and no $script_dir/guarded-packages.regex"
    GUARD_REGEX=$(cat "$script_dir/guarded-packages.regex")
fi
WHEELS=${WHEELS:-}
OFFLINE=${OFFLINE:-0}
[ -z "$WHEELS" ] || [ -d "$WHEELS" ] || die "WHEELS=$WHEELS is not a folder (make it with container/wheelhouse.sh)"
case $OFFLINE in
0 | 1) ;;
*) die "OFFLINE='$OFFLINE' is not valid: expected 0 or 1" ;;
esac
PROJECT_FILES=${PROJECT_FILES:-pyproject.toml setup.cfg setup.py MANIFEST.in README.md LICENSE train}
IMPORT_CHECK=${IMPORT_CHECK-train}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/install-project.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Guarded distributions, exactly as the image has them: "name==version" lines.
guarded() {
    "$PYTHON" -m pip list --format=freeze --disable-pip-version-check >"$tmp/list.txt" 2>"$tmp/list.err" || {
        cat "$tmp/list.err" >&2
        die "'$PYTHON -m pip list' failed"
    }
    grep -iE "$GUARD_REGEX" "$tmp/list.txt" | grep '==' || true
}
torch_version() {
    "$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null || true
}

guarded >"$tmp/constraints.txt"
torch_before=$(torch_version)
say "keeping what the image has (pip constraints):"
if [ -s "$tmp/constraints.txt" ]; then
    sed 's/^/    /' "$tmp/constraints.txt"
else
    echo "    (none of them is installed)"
fi

# Build from a copy: pip's in-tree build writes build/ and *.egg-info next to the sources.
mkdir "$tmp/src"
for entry in $PROJECT_FILES; do
    if [ -e "$project/$entry" ]; then
        cp -R "$project/$entry" "$tmp/src/"
    fi
done

user_flag=
if ! "$PYTHON" -c 'import os, sys, sysconfig; sys.exit(0 if os.access(sysconfig.get_paths()["purelib"], os.W_OK) else 1)'; then
    user_flag=--user
    say "site-packages is not writable: installing with --user (PYTHONUSERBASE=${PYTHONUSERBASE:-default})"
fi

# pip's options: the image's constraint file, the prepared wheels, no index when offline, and no
# build isolation when the image's setuptools can build the project.
set --
image_constraint=/etc/pip/constraint.txt
if [ -f "$image_constraint" ]; then
    set -- "$@" -c "$image_constraint"
    say "respecting the image's pip constraints ($image_constraint)"
fi
[ -z "$WHEELS" ] || set -- "$@" --find-links "$WHEELS"
[ "$OFFLINE" = 0 ] || set -- "$@" --no-index
if "$PYTHON" -c 'import sys, setuptools; v = tuple(int(x) for x in setuptools.__version__.split(".")[:2]); sys.exit(v < (61, 0))' 2>/dev/null; then
    set -- "$@" --no-build-isolation
else
    say "the image has no setuptools >= 61: pip builds the project in an isolated environment, which it downloads"
fi

say "pip install $project (not editable) with $PYTHON"
# pip's output is shown as it runs and kept for the error message; its status goes through a file
# because sh has no pipefail.
{
    rc=0
    # The image is a container built for this: its Python is ours to install into, whatever
    # Debian's or Ubuntu's EXTERNALLY-MANAGED marker says.
    PIP_ROOT_USER_ACTION=ignore PIP_BREAK_SYSTEM_PACKAGES=1 "$PYTHON" -m pip install --no-cache-dir \
        --disable-pip-version-check ${user_flag:+"$user_flag"} -c "$tmp/constraints.txt" "$@" "$tmp/src" 2>&1 || rc=$?
    echo "$rc" >"$tmp/pip.rc"
} | tee "$tmp/pip.log"
rc=$(cat "$tmp/pip.rc")
if [ "$rc" != 0 ]; then
    # pip names each blocking constraint: "The user requested (constraint) torch==2.7.0a0+...".
    sed -n 's/.*(constraint) *\([A-Za-z0-9._-]*\).*/\1/p' "$tmp/pip.log" | sort -u >"$tmp/conflicts.txt"
    conflicts=
    while IFS= read -r name; do
        pin=$(grep -i "^$name==" "$tmp/constraints.txt" || echo "$name")
        conflicts="$conflicts $pin"
    done <"$tmp/conflicts.txt"
    if [ -n "$conflicts" ]; then
        die "the project's requirements would replace what the image ships:$conflicts (kept by the guard, see pip's conflict above); relax the ranges in $project/pyproject.toml or pick another PYG_TAG"
    fi
    # Unreachable index: say which setting reaches it (pip inside a container does not read the
    # host's pip.conf, proxy variables or CA bundle unless they are passed in).
    if grep -qiE 'CERTIFICATE_VERIFY_FAILED|certificate verify failed|SSLError' "$tmp/pip.log"; then
        die "pip could not verify the package index's TLS certificate: give the CA bundle your site uses (PIP_CERT=/path/ca.pem or SSL_CERT_FILE; make image passes the host's in), or an internal mirror with PIP_INDEX_URL"
    fi
    if grep -qiE 'NewConnectionError|Temporary failure in name resolution|Network is unreachable|ProxyError|Max retries exceeded' "$tmp/pip.log"; then
        die "pip could not reach the package index: give PIP_INDEX_URL (a mirror this machine reaches) or https_proxy, or prepare the wheels on a machine with access (container/wheelhouse.sh) and set WHEELS"
    fi
    missing=$(sed -n 's/.*No matching distribution found for \([^ ]*\).*/\1/p' "$tmp/pip.log" | sort -u | tr '\n' ' ')
    if [ -n "$missing" ] && [ "$OFFLINE" = 1 ]; then
        die "offline install: ${missing}is neither in the image nor in WHEELS=${WHEELS:-(none)}; build an image that has it (make image), or add its wheel with container/wheelhouse.sh"
    fi
    die "pip install failed (exit $rc), see its output above"
fi

# Belt and braces: nothing guarded may have changed, whatever pip did.
guarded >"$tmp/after.txt"
changed=$(grep -vxF -f "$tmp/after.txt" "$tmp/constraints.txt" || true)
if [ -n "$changed" ]; then
    die "the install changed what the image ships; before: $(echo "$changed" | tr '\n' ' ')after: $(grep -vxF -f "$tmp/constraints.txt" "$tmp/after.txt" | tr '\n' ' ')"
fi
torch_after=$(torch_version)
if [ "$torch_before" != "$torch_after" ]; then
    die "torch changed from '${torch_before:-none}' to '${torch_after:-none}'"
fi

if [ -n "$IMPORT_CHECK" ]; then
    where=$(cd / && env -u PYTHONPATH "$PYTHON" -c "import $IMPORT_CHECK as m; print(m.__file__)") ||
        die "installed, but 'import $IMPORT_CHECK' fails"
    say "import $IMPORT_CHECK -> $where"
fi
say "done; torch ${torch_after:-not installed} unchanged"
