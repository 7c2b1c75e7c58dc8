# shellcheck shell=bash
# The job's settings from their one table, jobs/knobs.md (a row each: name, default, shape, sbatch option,
# whether it travels to the job, documentation), for make (through `bash jobs/lib/knobs.sh make-defaults`
# and `help`), lib/checks.sh (the shapes), jobs/submit.sh, jobs/train.sbatch (which runs from SLURM's copy
# of itself, so it sources the project's file) and the container scripts.
#
#   source "$root/jobs/lib/knobs.sh"
#   KNOBS                      every setting's name, in the table's order
#   KNOB_DEFAULT, KNOB_SHAPE, KNOB_SBATCH, KNOB_JOB, KNOB_DOC   NAME -> its column (KNOB_JOB: yes or empty)
#   knob_defaults              gives every setting that is unset or empty its default (a shell variable)
#   knob_value NAME            NAME's value, else its default with $(OTHER) resolved
#   knobs_to_job               the names that travel to the job, one a line
#   sbatch_options ARRAY [NAME...]   fills ARRAY with --option=VALUE of every setting with an sbatch
#                              option and a value, but the NAMEs given
#
# `bash jobs/lib/knobs.sh NAME` prints NAME's value (PYG_TAG: the base image's tag, from the one reading of
# container/Dockerfile's `ARG PYG_TAG=` line; mk/image.mk calls it), `make-defaults` each NAME=default for
# the Makefile, `help` each setting with its value and documentation for `make help`, `near-misses VALID...
# -- GIVEN...` the GIVEN names that are typos of VALID ones (the Makefile refuses them).

# Sourced twice (lib/checks.sh sources it too), it reads the table once.
[[ -z ${KNOB_TABLE:-} || ${BASH_SOURCE[0]} == "$0" ]] || return 0
KNOB_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
KNOB_TABLE=$KNOB_ROOT/jobs/knobs.md
KNOBS=()
declare -A KNOB_DEFAULT=() KNOB_SHAPE=() KNOB_SBATCH=() KNOB_JOB=() KNOB_DOC=()

# trimmed TEXT: TEXT without the spaces around it.
trimmed() {
    local text=$1
    text=${text#"${text%%[![:space:]]*}"}
    printf '%s' "${text%"${text##*[![:space:]]}"}"
}

# shellcheck disable=SC2034 # the KNOB_* tables are read by the scripts that source this file
# read_knob_table: the table's rows (`| NAME | default | shape | sbatch | job | doc |`) into KNOBS and KNOB_*.
# A line that starts with `|` is the header, the rule under it, or a row; any other such line (a name not in
# capitals, a cell missing) and a name given twice are refused with the line's number, never skipped.
read_knob_table() {
    local line name number=0 cell='[[:space:]]*([^|]*[^|[:space:]])?[[:space:]]*'
    local row="^\|[[:space:]]*([A-Z][A-Z0-9_]*)[[:space:]]*\|$cell\|$cell\|$cell\|$cell\|(.*)\|[[:space:]]*$"
    local header='^\|[[:space:]]*name[[:space:]]*\|' rule='^\|[-|:[:space:]]*$'
    local -A line_of=()
    while IFS= read -r line; do
        number=$((number + 1))
        [[ $line == '|'* && ! $line =~ $header && ! $line =~ $rule ]] || continue # prose, the header, the rule
        if ! [[ $line =~ $row ]]; then
            printf 'knobs: %s line %d is not a row "| NAME | default | shape | sbatch | job | doc |" (NAME in capitals, six cells): %s\n' \
                "$KNOB_TABLE" "$number" "$line" >&2
            return 1
        fi
        name=${BASH_REMATCH[1]}
        if [[ -v line_of[$name] ]]; then
            printf 'knobs: %s line %d: %s already has a row (line %d); give each setting one row\n' \
                "$KNOB_TABLE" "$number" "$name" "${line_of[$name]}" >&2
            return 1
        fi
        line_of[$name]=$number
        KNOBS+=("$name")
        KNOB_DEFAULT[$name]=${BASH_REMATCH[2]}
        KNOB_SHAPE[$name]=${BASH_REMATCH[3]}
        KNOB_SBATCH[$name]=${BASH_REMATCH[4]}
        KNOB_JOB[$name]=${BASH_REMATCH[5]}
        KNOB_DOC[$name]=$(trimmed "${BASH_REMATCH[6]}")
    done <"$KNOB_TABLE"
    ((${#KNOBS[@]})) || {
        printf 'knobs: %s has no row "| NAME | default | shape | sbatch | job | doc |"\n' "$KNOB_TABLE" >&2
        return 1
    }
}

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
    if [[ -v KNOB_DEFAULT[$name] ]]; then
        value=${KNOB_DEFAULT[$name]}
    elif [[ $name == PYG_TAG ]]; then
        value=$(dockerfile_tag)
    else
        printf 'knobs: %s is not a setting; the settings (jobs/knobs.md) are: %s (and PYG_TAG)\n' \
            "$name" "${KNOBS[*]}" >&2
        return 1
    fi
    while [[ $value =~ \$\(([A-Z_][A-Z0-9_]*)\) ]]; do
        ref=${BASH_REMATCH[1]}
        value=${value//"\$($ref)"/$(knob_value "$ref")}
    done
    printf '%s' "$value"
}

# knob_defaults: every setting that is unset or empty gets its default.
knob_defaults() {
    local name
    for name in "${KNOBS[@]}"; do
        [[ -n ${!name:-} ]] || printf -v "$name" '%s' "$(knob_value "$name")"
    done
}

knobs_to_job() {
    local name
    for name in "${KNOBS[@]}"; do
        [[ ${KNOB_JOB[$name]} != yes ]] || printf '%s\n' "$name"
    done
}

# sbatch_options ARRAY [NAME...]: ARRAY gets --option=VALUE for every setting whose row names an sbatch option
# and whose value is not empty, in the table's order, leaving out the NAMEs given.
sbatch_options() {
    local -n into=$1
    local name skip option
    shift
    into=()
    for name in "${KNOBS[@]}"; do
        option=${KNOB_SBATCH[$name]%% *}
        [[ -n $option && -n ${!name:-} ]] || continue
        for skip in "$@"; do [[ $skip != "$name" ]] || continue 2; done
        into+=("$option=${!name}")
    done
}

# knob_help: each setting as `make help` lists it: NAME=value (the environment's, else the default) and its line.
knob_help() {
    local name
    for name in "${KNOBS[@]}"; do
        printf '  %-21s  %s\n' "$name=$(knob_value "$name")" "${KNOB_DOC[$name]}"
    done
}

# distance A B: the edit distance of A and B (Levenshtein: insertions, deletions, substitutions).
distance() {
    local a=$1 b=$2 i j cost
    local -a row previous
    for ((j = 0; j <= ${#b}; j++)); do previous[j]=$j; done
    for ((i = 1; i <= ${#a}; i++)); do
        row=("$i")
        for ((j = 1; j <= ${#b}; j++)); do
            cost=1
            [[ ${a:i-1:1} != "${b:j-1:1}" ]] || cost=0
            row[j]=$((previous[j - 1] + cost))
            ((previous[j] + 1 >= row[j])) || row[j]=$((previous[j] + 1))
            ((row[j - 1] + 1 >= row[j])) || row[j]=$((row[j - 1] + 1))
        done
        previous=("${row[@]}")
    done
    echo "${previous[${#b}]}"
}

# common_start A B: how many characters A and B begin with alike.
common_start() {
    local i=0
    while ((i < ${#1} && i < ${#2})) && [[ ${1:i:1} == "${2:i:1}" ]]; do i=$((i + 1)); done
    echo "$i"
}

# near_misses VALID... -- GIVEN...: each GIVEN name that is a typo of a VALID one (the same in capitals, or one
# edit away; two for a name of 8 characters or more), with the closest: "GIVEN (VALID?)"; of names as close, the
# one that begins as GIVEN does (NODE: NODES, not MODE). A name far from all (NCCL_DEBUG) is an environment
# variable for the programs make starts, and passes.
near_misses() {
    local -a valid=()
    local name given limit edits score best best_score
    while (($#)) && [[ $1 != -- ]]; do valid+=("$1") && shift; done
    shift
    for given in "$@"; do
        limit=$(((${#given} >= 8) + 1))
        best='' best_score=''
        for name in "${valid[@]}"; do
            ((${#given} - ${#name} <= limit && ${#name} - ${#given} <= limit)) || continue # no closer
            if [[ ${given^^} == "$name" ]]; then
                best=$name
                break
            fi
            edits=$(distance "$given" "$name")
            ((edits <= limit)) || continue
            score=$((edits * 1000 - $(common_start "${given^^}" "$name")))
            [[ -n $best_score ]] && ((score >= best_score)) || best=$name best_score=$score
        done
        [[ -z $best ]] || printf '%s (%s?)\n' "$given" "$best"
    done
}

if ! read_knob_table; then # a malformed table stops every reader: sourced (return) or run (exit)
    [[ ${BASH_SOURCE[0]} != "$0" ]] || exit 1
    return 1
fi

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then # `bash jobs/lib/knobs.sh NAME|make-defaults|help|near-misses`
    set -euo pipefail
    case ${1:-} in
    make-defaults)
        for name in "${KNOBS[@]}"; do printf '%s=%s\n' "$name" "${KNOB_DEFAULT[$name]}"; done
        ;;
    help) knob_help ;;
    near-misses)
        shift
        near_misses "$@"
        ;;
    *)
        knob_value "$1"
        echo
        ;;
    esac
fi
