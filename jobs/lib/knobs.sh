# shellcheck shell=bash
# The job's knobs from their one home, jobs/knobs.mk (also included by make), for jobs/submit.sh,
# jobs/train.sbatch (which runs from SLURM's copy of itself, so it names the project's file) and the
# container scripts, which share IMAGE, IMAGE_DIR and DATA_DIR with the job.
#
#   source "$root/jobs/lib/knobs.sh"; knob_defaults "$root/jobs/knobs.mk"
#
# gives every knob of the file that is unset or empty its default (a shell variable, not exported).
# `bash jobs/lib/knobs.sh PYG_TAG` prints the base image's tag, from the one reading of
# container/Dockerfile's `ARG PYG_TAG=` line (dockerfile_tag; mk/image.mk calls it).

declare -A KNOB_DEFAULTS=()
KNOB_ROOT=${KNOB_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}

# dockerfile_tag: the tag of container/Dockerfile's `ARG PYG_TAG=` line, the base image's one home.
dockerfile_tag() {
    sed -n 's/^ARG PYG_TAG=//p' "$KNOB_ROOT/container/Dockerfile"
}

# knob_value NAME: the value NAME has, else its default with $(OTHER) references resolved.
knob_value() {
    local name=$1 value ref
    if [[ -n ${!name:-} ]]; then
        printf '%s' "${!name}"
        return 0
    fi
    if [[ -v KNOB_DEFAULTS[$name] ]]; then
        value=${KNOB_DEFAULTS[$name]}
    elif [[ $name == PYG_TAG ]]; then
        value=$(dockerfile_tag)
    else
        printf 'knobs: %s is neither a knob of jobs/knobs.mk nor PYG_TAG\n' "$name" >&2
        return 1
    fi
    while [[ $value =~ \$\(([A-Z_][A-Z0-9_]*)\) ]]; do
        ref=${BASH_REMATCH[1]}
        value=${value//"\$($ref)"/$(knob_value "$ref")}
    done
    printf '%s' "$value"
}

# knob_defaults FILE: read FILE's `NAME ?= default` lines; set every such knob that is unset or empty.
knob_defaults() {
    local file=$1 line name
    KNOB_ROOT=$(cd "$(dirname "$file")/.." && pwd)
    while IFS= read -r line; do
        if [[ $line =~ ^([A-Z_][A-Z0-9_]*)\ \?=\ *(.*)$ ]]; then
            KNOB_DEFAULTS[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
        fi
    done <"$file"
    for name in "${!KNOB_DEFAULTS[@]}"; do
        if [[ -z ${!name:-} ]]; then
            printf -v "$name" '%s' "$(knob_value "$name")"
        fi
    done
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then # `bash jobs/lib/knobs.sh NAME`: NAME's default, resolved
    set -euo pipefail
    knob_defaults "$KNOB_ROOT/jobs/knobs.mk"
    knob_value "$1"
    echo
fi
