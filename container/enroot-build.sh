#!/usr/bin/env bash
# Build the training image without docker, with enroot alone (what `make image` runs when enroot
# is on PATH): the same image as container/Dockerfile, since both run container/install-project.sh.
#
#   enroot import -o BASE.sqsh docker://nvcr.io#nvidia/pyg:TAG   (skipped when BASE.sqsh exists)
#   container/wheelhouse.sh SCRATCH/wheels                      (this host's pip, site settings apply)
#   enroot create --name NAME BASE.sqsh
#   enroot start --root --rw -m CHECKOUT:/opt/project -m SCRATCH:/opt/pyg-train-build [-e PIP_...] NAME \
#       sh /opt/project/container/install-project.sh /opt/project
#   enroot export -o IMAGE.tmp.PID NAME  &&  mv IMAGE.tmp.PID IMAGE
#   enroot remove -f NAME
#
# Env (paths are relative to the project root):
#   PYG_TAG     base tag (default: the ARG PYG_TAG line of container/Dockerfile)
#   IMAGE_DIR   where the base is cached and the image goes (default: images)
#   IMAGE       output .sqsh (default: $IMAGE_DIR/pyg-train-$PYG_TAG.sqsh)
#   BASE_SQSH   cached import of the base (default: $IMAGE_DIR/nvidia+pyg+$PYG_TAG.sqsh; delete it to pull again)
#   DRY_RUN=1   print each command, shell-quoted, one per line, instead of running it
#   The site's package settings reach the build container: the index and mirror (PIP_INDEX_URL,
#   PIP_EXTRA_INDEX_URL, PIP_TRUSTED_HOST, or the same keys of this host's pip configuration),
#   the proxy variables (http_proxy, https_proxy, no_proxy, upper case too), and the CA bundle
#   (PIP_CERT, pip's `cert`, SSL_CERT_FILE or REQUESTS_CA_BUNDLE), copied into the build's
#   scratch folder. A file:// index or a local find-links folder of this host is not passed:
#   what the project needs from them is in the wheels prepared here.
#   ENROOT_DATA_PATH, ENROOT_CACHE_PATH, ENROOT_CONFIG_PATH, ENROOT_SQUASH_OPTIONS: read by enroot
#   itself and left as you set them (the container being built lives in ENROOT_DATA_PATH).
# Never leaves a half-written .sqsh at a final path (writes to a temporary name in the same folder,
# then renames), and removes its container and temporary files on failure, Ctrl-C and TERM.
set -euo pipefail

# shellcheck source=lib/cmd.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cmd.sh" # root, prog, say, die, refuse, quote, run, DRY_RUN
cd "$root"
# shellcheck source=jobs/lib/knobs.sh
source "$root/jobs/lib/knobs.sh" # IMAGE_DIR, IMAGE: the job's knobs, one table (jobs/knobs.md)
PYG_TAG=$(knob_value PYG_TAG)
knob_defaults
BASE_SQSH=${BASE_SQSH:-$IMAGE_DIR/nvidia+pyg+$PYG_TAG.sqsh}
BASE_URI=docker://nvcr.io#nvidia/pyg:$PYG_TAG

# ---- checks: shapes (lib/checks.sh), then the files; the same in a dry run -----------------------------
# shellcheck source=lib/checks.sh
source "$root/lib/checks.sh"
check_shapes PYG_TAG IMAGE_DIR IMAGE BASE_SQSH DRY_RUN
[[ $IMAGE == *.sqsh ]] || problem "IMAGE='$IMAGE' must end in .sqsh: enroot writes a squashfs file."
if shape_ok IMAGE && [[ -d $IMAGE ]]; then
    problem "IMAGE='$IMAGE' is a directory: expected the path of the .sqsh file to write."
elif shape_ok IMAGE; then
    why=$(dir_problem "the folder of IMAGE" "$(dirname -- "$IMAGE")")
    [[ -z $why ]] || problem "$why"
fi
if shape_ok BASE_SQSH && [[ -e $BASE_SQSH || -L $BASE_SQSH ]]; then # an imported base is reused: it must be one
    why=$(squashfs_problem BASE_SQSH "$BASE_SQSH")
    [[ -z $why ]] || problem "$why Delete it to import $BASE_URI again, or give another BASE_SQSH."
elif shape_ok BASE_SQSH; then
    why=$(dir_problem "the folder of BASE_SQSH" "$(dirname -- "$BASE_SQSH")")
    [[ -z $why ]] || problem "$why"
fi
report_problems

host=${HOSTNAME:-host}
host=${host%%.*}
host=${host//[^A-Za-z0-9-]/-}
name_prefix=pyg-train-build-$host-
NAME=$name_prefix$$
base_tmp=$BASE_SQSH.tmp.$$
image_tmp=$IMAGE.tmp.$$
scratch=
in_scratch=/opt/pyg-train-build

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
        [[ -z $scratch ]] || rm -rf -- "$scratch"
        if [[ -n $container_made ]]; then
            say "removing the build container $NAME"
            enroot remove -f "$NAME" >/dev/null 2>&1 || true
        fi
    fi
    exit "$rc"
}
on_signal() {
    say "interrupted ($1), cleaning up"
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

if [[ -e $BASE_SQSH ]]; then # checked above: a squashfs file
    say "reusing the imported base $BASE_SQSH (delete it to pull $BASE_URI again)"
else
    say "importing $BASE_URI into $BASE_SQSH"
    if ! run enroot import -o "$base_tmp" "$BASE_URI"; then
        credentials_hint
        exit 1
    fi
    run mv -f -- "$base_tmp" "$BASE_SQSH"
fi

# The site's package settings, as `enroot start` options (see the header): login/pip_settings.py.
site_settings() {
    PYTHONPATH=$root "$(host_python "$root")" -m login.pip_settings "$in_scratch" "$scratch"
}

if [[ -n $DRY_RUN ]]; then
    scratch_host=SCRATCH
else
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/pyg-train-build.XXXXXX")
    chmod 755 "$scratch"
    scratch_host=$scratch
fi
say "preparing the project's wheels on this host"
run bash "$root/container/wheelhouse.sh" "$scratch_host/wheels"
listed=$(site_settings) || die "could not read this host's package settings (login/pip_settings.py, its message is above)"
mapfile -t settings < <(sed '/^$/d' <<<"$listed")
env_opts=()
for item in "${settings[@]}"; do
    env_opts+=(-e "$item")
done
((${#settings[@]} == 0)) || say "passing the site's package settings: $(printf '%s ' "${settings[@]%%=*}")"

say "installing the project into the container $NAME"
container_made=1
run enroot create --name "$NAME" "$BASE_SQSH"
run enroot start --root --rw -m "$root:/opt/project" -m "$scratch_host:$in_scratch" \
    "${env_opts[@]}" -e "WHEELS=$in_scratch/wheels" "$NAME" \
    sh /opt/project/container/install-project.sh /opt/project

say "exporting $NAME to $IMAGE"
run enroot export -o "$image_tmp" "$NAME"
run mv -f -- "$image_tmp" "$IMAGE"
run enroot remove -f "$NAME"
container_made=
[[ -n $DRY_RUN ]] || say "image written: $IMAGE"
