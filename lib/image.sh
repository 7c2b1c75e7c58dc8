# shellcheck shell=bash
# What an IMAGE value names, decided in one place (image_kind), and what follows from it: the path pyxis
# reads and whether the project is installed at job start. Read by lib/checks.sh (IMAGE's shape),
# jobs/submit.sh, jobs/lib/steps.sh, jobs/lib/pyxis.sh and container/data.sh.
#
#   source "$root/lib/image.sh"      (lib/checks.sh sources it)
#   image_kind IMAGE                       none, file or registry
#   image_path IMAGE PROJECT_DIR           a file image as pyxis reads it: absolute (or it takes a registry name)
#   installs_at_start INSTALL_PROJECT KIND 1 when the project is installed into the image at job start, else 0

# image_kind IMAGE: what an image value names, on stdout: none (the host's Python), file (a squashfs file:
# absolute, ./relative, or ending in .sqsh) or registry (pyxis pulls it: nvcr.io#nvidia/pyg:TAG).
image_kind() {
    case $1 in
    none) echo none ;;
    /* | .* | *.sqsh) echo file ;;
    *) echo registry ;;
    esac
}

# A relative .sqsh path is the project's (pyxis reads a path only when it starts with / or .).
image_path() {
    if [[ $(image_kind "$1") != file || $1 == /* ]]; then
        printf '%s\n' "$1"
    else
        printf '%s\n' "$2/${1#./}"
    fi
}

# auto: a registry image is plain NVIDIA PyG, so install the project; a .sqsh from `make image` has it.
installs_at_start() {
    local want=$1 kind=$2
    [[ $want != auto ]] || want=$([[ $kind == registry ]] && echo 1 || echo 0)
    [[ $kind != none ]] || want=0
    echo "$want"
}
