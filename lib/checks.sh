# shellcheck shell=bash
# The shape of every make variable and job setting (SHAPE below; the settings' come from their table,
# jobs/knobs.md), checked by all that read them:
# jobs/submit.sh (make submit, make srun), jobs/train.sbatch (the knobs it reads, also when run by hand),
# container/image.sh, enroot-build.sh and data.sh, and the Makefile's other targets, whose recipes run
# `bash lib/checks.sh "make TARGET" VAR...` first. A dry run checks exactly what a real run checks.
#
#   source "$root/lib/checks.sh"     (after lib/cmd.sh)
#   check_shapes VAR...     checks each variable's value against its shape; every problem is collected
#   shape_ok VAR            whether VAR passed (so that a script does arithmetic only on good numbers)
#   problem MESSAGE         a script's own check (a file that must exist, the cluster's limits)
#   report_problems [LAST]  prints every problem ("PROG: error: ..."), then LAST, and exits 2 if there was one
#
# Each message names the variable, its value and what would be valid. Numbers are read as digits, and
# compared by length before any shell arithmetic, so a twenty-digit NODES is refused, never wrapped around.
# The helpers for files (squashfs_problem, dir_problem) are shared the same way.

PROBLEMS=()
declare -A SHAPE_FAILED=()

# The shape of each variable: "[optional] KIND [ARGS...]"; optional: empty is valid (the default applies).
# The job's settings have theirs in their table, jobs/knobs.md (jobs/lib/knobs.sh reads it); the other make
# variables here.
# shellcheck source=jobs/lib/knobs.sh
source "$(dirname "${BASH_SOURCE[0]}")/../jobs/lib/knobs.sh"
# shellcheck source=lib/image.sh
source "$(dirname "${BASH_SOURCE[0]}")/image.sh" # image_kind: IMAGE's shape depends on what it names
declare -A SHAPE=(
    # make image, make data (mk/image.mk, mk/data.mk), and every target's DRY_RUN
    [PYG_TAG]="tag"
    [BUILDER]="choice auto docker enroot"
    [SQSH]="optional choice 1 yes true 0 no false"
    [BASE_SQSH]="optional path"
    [DRY_RUN]="optional choice 1 yes true 0 no false"
    [DATASET]="name"
    [DATA_MODE]="choice auto enroot srun bare"
    # the other targets (Makefile, mk/*.mk)
    [PYTHON]="command"
    [VENV]="path"
    [NPROC]="count 4096"
    [PYTEST_ARGS]="words"
    [BENCH]="words"
    [BENCH_ARGS]="words"
    [PYG_LIB_SRC]="optional path"
    [GPU_PYTHON]="optional command"
    [GPU_CHECK_ARGS]="words"
    [RUNS]="words"
    [TB_PORT]="count 65535"
    [NODE_MEMORY]="optional memory"
)
for _knob in "${KNOBS[@]}"; do SHAPE[$_knob]=${KNOB_SHAPE[$_knob]}; done
unset _knob

# Options that make submit sets from a setting (sbatch) or that every step sets itself (srun): given in
# SBATCH_ARGS or SRUN_ARGS they would override a checked value. option -> what to do instead. The options a
# setting becomes are its row's (jobs/knobs.md); these are the ones the job sets from several or itself.
# shellcheck disable=SC2034 # both tables are read through a nameref (shape_options)
declare -A SBATCH_OWN=(
    [ntasks-per-node]="use NODES= and GPUS= (GPUS/NODES per node)" [gpus-per-task]="use GPUS_PER_TASK="
    [gpu-bind]="use GPUS_PER_TASK=" [output]="use LOG_DIR=" [o]="use LOG_DIR="
    [chdir]="leave it out: the job runs in the project" [D]="leave it out: the job runs in the project"
    [export]="leave it out: the job gets your whole environment (--export=ALL)"
    [parsable]="leave it out: make submit sets it"
)
# shellcheck disable=SC2034 # read through a nameref (shape_options)
for _knob in "${KNOBS[@]}"; do
    for _option in ${KNOB_SBATCH[$_knob]}; do
        _option=${_option#-}
        _option=${_option#-}
        SBATCH_OWN[$_option]="use $_knob="
    done
done
unset _knob _option
# shellcheck disable=SC2034
declare -A SRUN_OWN=(
    [kill-on-bad-exit]="leave it out: every step sets it" [K]="leave it out: every step sets it"
    [label]="leave it out: every step sets it" [l]="leave it out: every step sets it"
    [cpus-per-task]="use CPUS_PER_TASK=" [c]="use CPUS_PER_TASK=" [gpus-per-task]="use GPUS_PER_TASK="
    [gpu-bind]="use GPUS_PER_TASK=" [export]="leave it out: the steps get the job's whole environment"
    [chdir]="leave it out: the steps run in the project" [D]="leave it out: the steps run in the project"
)

problem() { PROBLEMS+=("$*"); }

report_problems() {
    local line
    ((${#PROBLEMS[@]})) || return 0
    for line in "${PROBLEMS[@]}"; do
        error "$line"
    done
    [[ -z ${1:-} ]] || printf '%s: %s\n' "$prog" "$1" >&2
    exit 2
}

# shown NAME VALUE: NAME='VALUE' as messages print it; a value with a control character as $'...'.
shown() {
    if [[ $2 == *[[:cntrl:]]* ]]; then
        printf '%s=%q' "$1" "$2"
    else
        printf "%s='%s'" "$1" "$2"
    fi
}

# check_shapes VAR...: each variable's value (unset counts as empty) against SHAPE[VAR].
check_shapes() {
    local name value
    local -a words
    for name in "$@"; do
        [[ -v SHAPE[$name] ]] || {
            problem "$name is not a setting: the job's settings (jobs/knobs.md) are ${KNOBS[*]}; lib/checks.sh's SHAPE has the other variables' shapes."
            continue
        }
        read -r -a words <<<"${SHAPE[$name]}"
        value=${!name:-}
        if [[ ${words[0]} == optional ]]; then
            [[ -n $value ]] || continue
            words=("${words[@]:1}")
        fi
        "shape_${words[0]}" "$name" "$value" "${words[@]:1}" || SHAPE_FAILED[$name]=1
    done
}

shape_ok() { [[ ! -v SHAPE_FAILED[$1] ]]; }

# ---- the kinds: shape_KIND NAME VALUE [ARGS]; status 1 (after problem) when the value has not the shape ----

# A whole number from 1 to MAX, digits only (no sign, no leading zero: bash would read 010 as octal).
shape_count() {
    if [[ $2 =~ ^[1-9][0-9]*$ ]] && ((${#2} <= ${#3})) && ((10#$2 <= $3)); then
        return 0
    fi
    problem "$(shown "$1" "$2") is not valid: expected a positive whole number, at most $3."
    return 1
}

shape_choice() {
    local name=$1 value=$2 choice
    shift 2
    for choice in "$@"; do
        [[ $value == "$choice" ]] && return 0
    done
    local list
    list=$(printf '%s, ' "${@:1:$#-1}")
    problem "$(shown "$name" "$value") is not valid: expected ${list%, } or ${!#}."
    return 1
}

# A path: not empty, no control character (a newline would split it), not an option (-x).
shape_path() {
    if [[ -n $2 && $2 != *[[:cntrl:]]* && $2 != -* ]]; then
        return 0
    fi
    if [[ -z $2 ]]; then
        problem "$1 is empty: expected a path."
    else
        problem "$(shown "$1" "$2") is not a usable path: expected a path without control characters, not starting with '-'."
    fi
    return 1
}

# A program: a path, or a name looked up in PATH.
shape_command() {
    [[ -n $2 && $2 != *[[:cntrl:]]* && $2 != -* ]] && return 0
    problem "$(shown "$1" "$2") is not a program: expected a path or a name on PATH (e.g. python3)."
    return 1
}

# A name as SLURM and file names take it (a job name, account, qos, dataset): letters, digits, '_', '.', '-';
# at most MAX characters where given (JOB_NAME names the log file, whose name has at most 255 bytes).
shape_name() {
    if [[ $2 =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] && ((${#2} <= ${3:-${#2}})); then
        return 0
    fi
    if [[ -z $2 ]]; then
        problem "$1 is empty: expected a name (letters, digits, '_', '.', '-')."
    elif [[ $2 =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]]; then
        problem "$(shown "$1" "$2") is too long a name: at most $3 characters."
    else
        problem "$(shown "$1" "$2") is not a name: expected letters, digits, '_', '.' or '-', starting with a letter or digit."
    fi
    return 1
}

# One name or several separated by commas (sbatch --partition takes a list).
shape_names() {
    [[ $2 =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*(,[A-Za-z0-9][A-Za-z0-9_.-]*)*$ ]] && return 0
    problem "$(shown "$1" "$2") is not a name or a comma-separated list of names: expected letters, digits, '_', '.' or '-'."
    return 1
}

# A docker tag (https://docs.docker.com/reference/cli/docker/image/tag/): at most 128 characters.
shape_tag() {
    [[ $2 =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] && return 0
    problem "$(shown "$1" "$2") is not a docker tag: expected letters, digits, '_', '.', '-' (at most 128, not starting with '.' or '-'), e.g. 25.05-py3."
    return 1
}

# A whitespace-separated word list (ARGS, PYTEST_ARGS): read with `read -r -a`, which stops at a newline.
shape_words() {
    local spaced=${2//$'\t'/ }
    [[ $spaced != *[[:cntrl:]]* ]] && return 0
    problem "$(shown "$1" "$2") has a control character (a newline would drop the words after it): separate the words with spaces."
    return 1
}

# SBATCH_ARGS / SRUN_ARGS: options for sbatch or srun, never one that a knob or the job sets (tables above);
# for srun no pyxis flag either (--container-*: IMAGE, CONTAINER_MOUNTS and the steps set them).
shape_options() {
    local name=$1 value=$2 tool=$3 word long key instead status=0
    local -n own="${tool^^}_OWN"
    local -a words
    shape_words "$name" "$value" || return 1
    read -r -a words <<<"$value"
    ((${#words[@]})) || return 0
    if [[ ${words[0]} != -* ]]; then
        problem "$(shown "$name" "$value") does not start with an option: $tool would take '${words[0]}' for the program to run; expected options such as --exclusive."
        return 1
    fi
    for word in "${words[@]}"; do
        instead=
        if [[ $word =~ ^--([A-Za-z0-9-]+) ]]; then
            long=${BASH_REMATCH[1]}
            for key in "${!own[@]}"; do # getopt_long takes any unambiguous prefix: --nod=2 is --nodes=2
                ((${#key} > 1)) && [[ $key == "$long"* ]] && instead=${own[$key]}
            done
            [[ ! -v own[$long] ]] || instead=${own[$long]} # the whole name: --ntasks, not --ntasks-per-node
            [[ $tool != srun || ! $long =~ ^(no-)?container- ]] || instead="use IMAGE= and CONTAINER_MOUNTS="
        elif [[ $word =~ ^-([A-Za-z]) && -v own[${BASH_REMATCH[1]}] ]]; then
            instead=${own[${BASH_REMATCH[1]}]}
        fi
        if [[ -n $instead ]]; then
            problem "$(shown "$name" "$value"): '$word' is an option the job sets itself; $instead."
            status=1
        fi
    done
    return "$status"
}

# sbatch --mem: a size in megabytes, or with a unit K, M, G, T; 0 asks for all of a node's memory.
shape_memory() {
    [[ $2 =~ ^[0-9]{1,12}[KMGTkmgt]?$ ]] && return 0
    problem "$(shown "$1" "$2") is not a memory size: expected a whole number of megabytes or one with a unit K, M, G or T (e.g. MEM=64G; 0: all of a node's memory)."
    return 1
}

# memory_mb SIZE: SIZE (shape_memory) in megabytes, rounded up, on stdout.
memory_mb() {
    local number=${1%[KMGTkmgt]} unit=${1##*[0-9]}
    number=$((10#$number))
    case ${unit^^} in
    K) echo $(((number + 1023) / 1024)) ;;
    G) echo $((number * 1024)) ;;
    T) echo $((number * 1048576)) ;;
    *) echo "$number" ;;
    esac
}

# memory_gib SIZE: SIZE (shape_memory) in GiB, as `python -m train plan --node-memory/--gpu-memory` take it.
memory_gib() { awk -v mb="$(memory_mb "$1")" 'BEGIN { printf "%.6g\n", mb / 1024 }'; }

# SLURM's time formats (sbatch --time): M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or UNLIMITED/infinite.
shape_time() {
    time_seconds "$2" >/dev/null && return 0
    if [[ $2 =~ ^[0-9:-]+$ ]] && time_seconds "$(sed -E 's/[0-9]+/1/g' <<<"$2")" >/dev/null; then
        problem "$(shown "$1" "$2") is too long a time: each number of a SLURM time has at most 8 digits."
        return 1
    fi
    problem "$(shown "$1" "$2") is not a SLURM time: expected minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. TIME=02:00:00 or TIME=1-00:00:00)."
    return 1
}

# time_seconds TIME: seconds on stdout (-1: no limit); status 1 when TIME is not a SLURM time. Each field has
# at most 8 digits, so the sum cannot overflow.
time_seconds() {
    local t=$1 d=0 h=0 m=0 sec=0 f='([0-9]{1,8})'
    local -a rest
    [[ $t == UNLIMITED || $t == infinite ]] && { echo -1; return 0; }
    if [[ $t =~ ^$f-$f(:$f(:$f)?)?$ ]]; then
        d=${BASH_REMATCH[1]} h=${BASH_REMATCH[2]} m=${BASH_REMATCH[4]:-0} sec=${BASH_REMATCH[6]:-0}
    elif [[ $t =~ ^$f(:$f(:$f)?)?$ ]]; then
        IFS=: read -r -a rest <<<"$t"
        case ${#rest[@]} in
        1) m=${rest[0]} ;;
        2) m=${rest[0]} sec=${rest[1]} ;;
        3) h=${rest[0]} m=${rest[1]} sec=${rest[2]} ;;
        esac
    else
        return 1
    fi
    echo $((10#$d * 86400 + 10#$h * 3600 + 10#$m * 60 + 10#$sec))
}

# An image for the job (or `make data`): none, a .sqsh path, or a registry image.
shape_image() {
    case $(image_kind "$2") in
    none) return 0 ;;
    file) shape_path "$1" "$2" && return 0 || return 1 ;;
    esac
    [[ $2 =~ ^[A-Za-z0-9][A-Za-z0-9@#:/._-]*$ ]] && return 0
    problem "$(shown "$1" "$2") is not valid: expected none, a .sqsh path, or a registry image like nvcr.io#nvidia/pyg:25.05-py3."
    return 1
}

# Pyxis mounts, as pyxis parses them (args.c): SRC[:DST[:FLAGS]] separated by commas; SRC and DST start
# with / or . (SRC may also be tmpfs or umount), FLAGS joined by '+'. An empty part pyxis refuses only at
# job start; DST /workspace and /data are the project's and DATA_DIR's mounts.
shape_mounts() {
    local name=$1 value=$2 entry src dst flags rest rest_of=$2, bad=()
    if [[ $value == *[[:cntrl:]]* ]]; then
        problem "$(shown "$name" "$value") has a control character: expected SRC:DST[:FLAGS] entries separated by commas."
        return 1
    fi
    while [[ -n $rest_of ]]; do # split at every comma, keeping empty entries (read -a would drop the last)
        entry=${rest_of%%,*} rest_of=${rest_of#*,}
        IFS=: read -r src dst flags rest <<<"$entry"
        if [[ -z $entry ]]; then
            bad+=("an empty entry (a comma too many)")
        elif [[ -z $src ]]; then
            bad+=("'$entry' has an empty source")
        elif [[ $src != [/.]* && $src != tmpfs && $src != umount ]]; then
            bad+=("'$entry': the source must be an absolute path, a relative path starting with '.', tmpfs or umount")
        elif [[ $entry == *:* && -z $dst ]]; then
            bad+=("'$entry' has an empty destination")
        elif [[ -n $dst && $dst != [/.]* ]]; then
            bad+=("'$entry': the destination must be an absolute path (or start with '.')")
        elif [[ ${dst%/} =~ ^/(workspace|data|code)$ || (-z $dst && ${src%/} =~ ^/(workspace|data|code)$) ]]; then
            bad+=("'$entry' mounts over ${dst:-$src}, where the job mounts the project (/workspace), DATA_DIR (/data) or CODE_DIR (/code)")
        elif [[ -n $rest || (-n $flags && ! $flags =~ ^[A-Za-z0-9_=.+-]+$) ]]; then
            bad+=("'$entry' has flags '$flags${rest:+:$rest}': expected mount flags joined by '+', e.g. ro+rprivate")
        fi
    done
    ((${#bad[@]})) || return 0
    problem "$(shown "$name" "$value") is not a pyxis mount list: $(printf '%s\n' "${bad[@]}" | sort -u | paste -sd ';' | sed 's/;/; /g'); expected SRC:DST[:FLAGS] entries separated by commas, e.g. /scratch:/scratch,/opt/ds:/ds:ro."
    return 1
}

# ---- files, checked where they are read: the same in a dry run ------------------------------------

# squashfs_problem NAME PATH: why PATH (that exists) is no image pyxis or enroot can use; nothing when it is
# one: a regular, readable file that starts with the squashfs magic ("hsqs", what mksquashfs and
# enroot write).
squashfs_problem() {
    local name=$1 path=$2 magic
    if [[ -d $path ]]; then
        echo "$(shown "$name" "$path") is a directory, not a squashfs image (.sqsh) file."
    elif [[ ! -f $path ]]; then
        echo "$(shown "$name" "$path") is not a regular file: expected a squashfs image (.sqsh)."
    elif ! magic=$(LC_ALL=C head -c 4 -- "$path" 2>/dev/null | tr -d '\0'); then
        echo "$(shown "$name" "$path") cannot be read (permissions?): the job reads it on every node."
    elif [[ $magic != hsqs ]]; then
        echo "$(shown "$name" "$path") is not a squashfs image: it does not start with the squashfs magic 'hsqs' (build one with 'make image', or give the .sqsh 'enroot import' wrote)."
    fi
}

# dir_problem NAME PATH: why PATH cannot be (or become) a directory this user writes into: it is a file, it
# lies under a file, or its nearest existing folder is not writable. Nothing when it can.
dir_problem() {
    local name=$1 path=$2 up
    if [[ -e $path && ! -d $path ]]; then
        echo "$(shown "$name" "$path") is a file, not a directory."
        return 0
    fi
    up=$path
    while [[ ! -e $up && ! -L $up ]]; do up=$(dirname -- "$up"); done
    if [[ ! -d $up ]]; then
        echo "$(shown "$name" "$path") cannot be created: '$up' is a file, not a directory."
    elif [[ ! -w $up || ! -x $up ]]; then
        echo "$(shown "$name" "$path") cannot be written: '$up' is not writable by $(id -un)."
    fi
}

# check_config LABEL PYTHON [--dataset] CONFIG [OVERRIDE...]: the package's own check of a config, its overrides
# (and with --dataset the dataset it names), login/config_check.py run by PYTHON: a problem "LABEL: ..." when
# it is not valid; a note when PYTHON cannot tell (no PyYAML, no torch) or the check itself failed.
check_config() {
    local label=$1 python=$2 said status=0
    shift 2
    said=$(PYTHONPATH=$root "$python" -m login.config_check "$@" 2>&1) || status=$?
    if ((status == 2)); then
        problem "$label: $said"
    elif ((status != 0)); then
        say "note: not checked ($python -m login.config_check: status $status): ${said##*$'\n'}"
    elif [[ -n $said ]]; then
        say "note: $said"
    fi
}

# `bash lib/checks.sh PROG VAR...`: the Makefile's targets without a script of their own.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    set -euo pipefail
    prog=$1
    shift
    # shellcheck source=lib/cmd.sh
    source "$(dirname "${BASH_SOURCE[0]}")/cmd.sh"
    check_shapes "$@"
    report_problems ""
fi
