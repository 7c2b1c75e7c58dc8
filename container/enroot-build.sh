#!/usr/bin/env bash
# Build the training image without docker, with enroot alone (what `make image` runs when enroot
# is on PATH): the same image as container/Dockerfile, since both run container/install-project.sh.
#
#   enroot import -o BASE.sqsh docker://nvcr.io#nvidia/pyg:TAG   (skipped when BASE.sqsh exists)
#   enroot create --name NAME BASE.sqsh
#   enroot start --root --rw -m CHECKOUT:/opt/project NAME sh /opt/project/container/install-project.sh /opt/project
#   enroot export -o IMAGE.tmp.PID NAME  &&  mv IMAGE.tmp.PID IMAGE
#   enroot remove -f NAME
#
# Env (paths are relative to the project root):
#   PYG_TAG     base tag (default: the ARG PYG_TAG line of container/Dockerfile)
#   IMAGE_DIR   where the base is cached and the image goes (default: images)
#   IMAGE       output .sqsh (default: $IMAGE_DIR/pyg-train-$PYG_TAG.sqsh)
#   BASE_SQSH   cached import of the base (default: $IMAGE_DIR/nvidia+pyg+$PYG_TAG.sqsh; delete it to pull again)
#   DRY_RUN=1   print each command, shell-quoted, one per line, instead of running it
#   ENROOT_DATA_PATH, ENROOT_CACHE_PATH, ENROOT_CONFIG_PATH, ENROOT_SQUASH_OPTIONS: read by enroot
#   itself and left as you set them (the container being built lives in ENROOT_DATA_PATH).
# Never leaves a half-written .sqsh at a final path (writes to a temporary name in the same folder,
# then renames), and removes its container and temporary files on failure, Ctrl-C and TERM.
set -euo pipefail

prog=enroot-build.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"

die() {
    printf '%s: error: %s\n' "$prog" "$*" >&2
    exit 1
}
say() { printf '==> %s\n' "$*" >&2; }

# shellcheck source=lib/cmd.sh
source "$root/lib/cmd.sh" # quote, run, DRY_RUN

PYG_TAG=${PYG_TAG:-$(sed -n 's/^ARG PYG_TAG=//p' "$here/Dockerfile")}
[[ -n $PYG_TAG ]] || die "PYG_TAG is empty and container/Dockerfile has no 'ARG PYG_TAG=' line"
IMAGE_DIR=${IMAGE_DIR:-images}
IMAGE=${IMAGE:-$IMAGE_DIR/pyg-train-$PYG_TAG.sqsh}
BASE_SQSH=${BASE_SQSH:-$IMAGE_DIR/nvidia+pyg+$PYG_TAG.sqsh}
BASE_URI=docker://nvcr.io#nvidia/pyg:$PYG_TAG
host=${HOSTNAME:-host}
host=${host%%.*}
host=${host//[^A-Za-z0-9-]/-}
name_prefix=pyg-train-build-$host-
NAME=$name_prefix$$
base_tmp=$BASE_SQSH.tmp.$$
image_tmp=$IMAGE.tmp.$$

if [[ -z $DRY_RUN ]] && ! command -v enroot >/dev/null 2>&1; then
    die "enroot is not on PATH; install enroot (github.com/NVIDIA/enroot) or build with docker (make image BUILDER=docker)"
fi

credentials_hint() {
    local cred=${ENROOT_CONFIG_PATH:-${XDG_CONFIG_HOME:-$HOME/.config}/enroot}/.credentials
    {
        echo "$prog: could not import $BASE_URI."
        echo "If the error above is about authentication (401/403, 'unauthorized'), give enroot your NGC API key:"
        echo "put these two lines (netrc format) in $cred, then chmod 600 it:"
        echo "    machine nvcr.io login \$oauthtoken password <your NGC API key>"
        echo "    machine authn.nvidia.com login \$oauthtoken password <your NGC API key>"
        echo "(enroot reads \$ENROOT_CONFIG_PATH/.credentials, by default ~/.config/enroot/.credentials; keep '\$oauthtoken' as written.)"
    } >&2
}

# Cleanup, run on any exit; idempotent.
container_made=
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -z $DRY_RUN ]]; then
        rm -f -- "$base_tmp" "$image_tmp"
        if [[ -n $container_made ]]; then
            echo "$prog: removing the build container $NAME" >&2
            enroot remove -f "$NAME" >/dev/null 2>&1 || true
        fi
    fi
    exit "$rc"
}
on_signal() {
    echo "$prog: interrupted ($1), cleaning up" >&2
    exit "$2"
}
trap cleanup EXIT
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM

# Build containers left by an interrupted earlier build on this host (killed with SIGKILL,
# machine rebooted): the name carries the PID, so a dead PID means nobody is using it.
if [[ -z $DRY_RUN ]]; then
    while IFS= read -r old; do
        if [[ $old =~ ^${name_prefix}([0-9]+)$ ]] && ! kill -0 "${BASH_REMATCH[1]}" 2>/dev/null; then
            say "removing $old, left by an interrupted build"
            enroot remove -f "$old" >/dev/null 2>&1 || true
        fi
    done < <(enroot list 2>/dev/null || true)
fi

base_dir=$(dirname -- "$BASE_SQSH")
image_dir=$(dirname -- "$IMAGE")
if [[ $base_dir == "$image_dir" ]]; then
    run mkdir -p -- "$base_dir"
else
    run mkdir -p -- "$base_dir" "$image_dir"
fi

if [[ -s $BASE_SQSH ]]; then
    say "reusing the imported base $BASE_SQSH (delete it to pull $BASE_URI again)"
else
    say "importing $BASE_URI into $BASE_SQSH"
    if ! run enroot import -o "$base_tmp" "$BASE_URI"; then
        credentials_hint
        exit 1
    fi
    run mv -f -- "$base_tmp" "$BASE_SQSH"
fi

say "installing the project into the container $NAME"
container_made=1
run enroot create --name "$NAME" "$BASE_SQSH"
run enroot start --root --rw -m "$root:/opt/project" "$NAME" \
    sh /opt/project/container/install-project.sh /opt/project

say "exporting $NAME to $IMAGE"
run enroot export -o "$image_tmp" "$NAME"
run mv -f -- "$image_tmp" "$IMAGE"
run enroot remove -f "$NAME"
container_made=
[[ -n $DRY_RUN ]] || say "image written: $IMAGE"
