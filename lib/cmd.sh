# shellcheck shell=bash
# Shared by the login-node scripts (container/*.sh, jobs/submit.sh): print or run a command.
#
#   source "$root/lib/cmd.sh"   then   run CMD ARGS...   (prints CMD instead when DRY_RUN is set)
#
# DRY_RUN: empty, 0, false or no mean "run"; anything else means "print".

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
