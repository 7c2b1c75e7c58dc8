# shellcheck shell=bash
# The prologue of every login-node script (container/*.sh, jobs/submit.sh): where the project is, what the
# script is called, how it speaks (lib/msg.sh: say, die, refuse), and how it runs or prints a command.
#
#   set -euo pipefail
#   source "$(dirname "${BASH_SOURCE[0]}")/../lib/cmd.sh"    then   run CMD ARGS...
#
# Sets root (the project, absolute) and prog (the script's name, unless the script set it first); defines
# say, die, refuse (lib/msg.sh), quote, run and host_python.
# DRY_RUN: empty, 0, false or no mean "run"; anything else means "print" (lib/checks.sh refuses other shapes).

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prog=${prog:-${BASH_SOURCE[1]:-$0}}
prog=${prog##*/}
# shellcheck source=lib/msg.sh
source "$root/lib/msg.sh"

# Shell-quote a command line: plain words as they are, anything else in single quotes, so a
# printed command pastes back as it is.
quote() {
    local a out=()
    for a in "$@"; do
        if [[ $a =~ ^[A-Za-z0-9_@%+=:,./-][A-Za-z0-9_@%+=:,./#-]*$ ]]; then
            out+=("$a")
        else
            out+=("'${a//\'/\'\\\'\'}'")
        fi
    done
    printf '%s\n' "${out[*]}"
}

# host_python PROJECT_DIR [BARE_PYTHON]: the interpreter of this host the scripts use (and bare mode's,
# IMAGE=none): BARE_PYTHON, else the project's .venv/bin/python, else python3.
host_python() {
    if [[ -n ${2:-} ]]; then
        printf '%s\n' "$2"
    elif [[ -x $1/.venv/bin/python ]]; then
        printf '%s\n' "$1/.venv/bin/python"
    else
        echo python3
    fi
}

DRY_RUN=${DRY_RUN:-}
case $DRY_RUN in 0 | false | no) DRY_RUN= ;; esac
export DRY_RUN

run() {
    if [[ -n $DRY_RUN ]]; then
        quote "$@"
    else
        "$@"
    fi
}
