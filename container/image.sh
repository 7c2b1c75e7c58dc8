#!/usr/bin/env bash
# `make image`: build the training image with enroot or docker and say how to submit with it.
#
# Env (mk/image.mk passes them; paths are relative to the project root):
#   BUILDER   auto (default: enroot when on PATH, else docker when its daemon answers), enroot, docker
#   PYG_TAG   base tag (default: the ARG PYG_TAG line of container/Dockerfile)
#   IMAGE_DIR default images;  IMAGE  default $IMAGE_DIR/pyg-train-$PYG_TAG.sqsh
#   DRY_RUN=1 print the commands, shell-quoted, one per line, instead of running them
#   SQSH      docker route only: 1 converts the docker image to IMAGE (.sqsh) with
#             `enroot import dockerd://`, 0 never; default: when enroot is on PATH.
#             With BUILDER=docker an IMAGE that does not end in .sqsh is the docker tag to build.
set -euo pipefail

# shellcheck source=lib/cmd.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cmd.sh" # root, prog, say, die, refuse, quote, run, DRY_RUN
cd "$root"
# shellcheck source=jobs/lib/knobs.sh
source "$root/jobs/lib/knobs.sh" # IMAGE_DIR, IMAGE: the job's knobs, one table (jobs/knobs.md)
default_tag=$(dockerfile_tag)
PYG_TAG=$(knob_value PYG_TAG)
knob_defaults
default_image=$(unset IMAGE IMAGE_DIR PYG_TAG && knob_value IMAGE) # what make submit runs when given no IMAGE
export PYG_TAG IMAGE_DIR IMAGE # for container/enroot-build.sh
BUILDER=${BUILDER:-auto}
SQSH=${SQSH:-}

# ---- checks: every value's shape (lib/checks.sh), before anything runs (also with DRY_RUN) ---------------
# shellcheck source=lib/checks.sh
source "$root/lib/checks.sh"
check_shapes BUILDER PYG_TAG IMAGE_DIR IMAGE SQSH BASE_SQSH DRY_RUN
if shape_ok IMAGE && [[ $IMAGE != *.sqsh && ! $IMAGE =~ ^[a-z0-9][a-z0-9._/:-]*$ ]]; then
    problem "IMAGE='$IMAGE' is neither a .sqsh path nor a docker image name: expected e.g. images/pyg-train.sqsh or registry.example.com/team/pyg-train:$default_tag"
elif shape_ok IMAGE && [[ $IMAGE == *.sqsh && -d $IMAGE ]]; then
    problem "IMAGE='$IMAGE' is a directory: expected the path of the .sqsh file to write."
fi
if shape_ok BUILDER && [[ $BUILDER == enroot && $IMAGE != *.sqsh ]]; then
    problem "BUILDER=enroot writes a .sqsh file: IMAGE='$IMAGE' must end in .sqsh"
fi
report_problems

have_enroot() { command -v enroot >/dev/null 2>&1; }
docker_answers() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }

if [[ $BUILDER == auto ]]; then
    if have_enroot; then
        BUILDER=enroot
    elif docker_answers; then
        BUILDER=docker
    else
        die "make image needs enroot on PATH or docker with a running daemon (docker info must succeed), and found neither: install enroot (github.com/NVIDIA/enroot), or install and start docker."
    fi
    say "BUILDER=auto chose $BUILDER"
fi

# Where IMAGE is a .sqsh path: print it absolute (pyxis takes a path only when it starts with / or .).
abs() {
    case $1 in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s\n' "$root/${1#./}" ;;
    esac
}
summary() {
    local p=''
    [[ -n $DRY_RUN ]] && p='# '
    printf '%s\n' "$@" | sed "s/^/$p/"
}
submit_line_for_sqsh() {
    local path
    path=$(abs "$IMAGE")
    if [[ $path == "$(abs "$default_image")" ]]; then
        echo "make submit NODES=2 GPUS=4"
    else
        echo "make submit NODES=2 GPUS=4 $(quote "IMAGE=$path")"
    fi
}

if [[ $BUILDER == enroot ]]; then
    bash "$root/container/enroot-build.sh"
    summary "Image: $(abs "$IMAGE")" "Submit with:" "  $(submit_line_for_sqsh)"
    exit 0
fi

# Docker route.
if [[ -z $DRY_RUN ]]; then
    command -v docker >/dev/null 2>&1 || die "BUILDER=docker but docker is not on PATH; install docker, or use BUILDER=enroot"
    docker info >/dev/null 2>&1 || die "BUILDER=docker but the docker daemon does not answer (docker info fails); start it, or use BUILDER=enroot"
fi
if [[ $IMAGE == *.sqsh ]]; then
    tag=pyg-train:$PYG_TAG
    case $SQSH in
    1 | yes | true) want_sqsh=1 ;;
    0 | no | false) want_sqsh= ;;
    *) want_sqsh=$(have_enroot && echo 1 || true) ;;
    esac
else
    tag=$IMAGE
    want_sqsh=
fi

say "docker build of $tag on nvcr.io/nvidia/pyg:$PYG_TAG"
# BuildKit: the Dockerfile bind-mounts the context (RUN --mount).
export DOCKER_BUILDKIT=1
run docker build -f container/Dockerfile --build-arg "PYG_TAG=$PYG_TAG" -t "$tag" .

if [[ -n $want_sqsh ]]; then
    if [[ -z $DRY_RUN ]]; then
        have_enroot || die "SQSH=1 needs enroot on PATH to convert $tag into $IMAGE"
    fi
    tmp=$IMAGE.tmp.$$
    trap '[[ -n $DRY_RUN ]] || rm -f -- "$tmp"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    say "converting $tag to $IMAGE"
    run mkdir -p -- "$(dirname -- "$IMAGE")"
    run enroot import -o "$tmp" "dockerd://$tag"
    run mv -f -- "$tmp" "$IMAGE"
    summary "Image: $(abs "$IMAGE") (and docker image $tag)" "Submit with:" "  $(submit_line_for_sqsh)"
    exit 0
fi

# Docker image only: pyxis cannot read a docker daemon, the nodes pull from a registry.
if [[ $tag == */* ]]; then
    first=${tag%%/*}
    if [[ $first == *.* || $first == *:* || $first == localhost ]]; then
        uri=$first#${tag#*/}
    else
        uri=$tag
    fi
    summary "Image: docker image $tag (push it first: docker push $tag)" \
        "Submit with:" "  make submit NODES=2 GPUS=4 IMAGE=$uri"
else
    summary "Image: docker image $tag, in this host's docker daemon only (pyxis cannot read it from there)." \
        "Convert it to a .sqsh where enroot is installed: make image BUILDER=docker SQSH=1 (it prints the submit line)" \
        "or push it: make image BUILDER=docker IMAGE=REGISTRY/REPO/pyg-train:$PYG_TAG && docker push REGISTRY/REPO/pyg-train:$PYG_TAG" \
        "Submit with:" "  make submit NODES=2 GPUS=4 IMAGE=REGISTRY#REPO/pyg-train:$PYG_TAG"
fi
