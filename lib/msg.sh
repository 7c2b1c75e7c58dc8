# shellcheck shell=sh
# The messages of every script (container/*.sh, jobs/*): one form, one exit status each. POSIX sh, so that
# container/install-project.sh (run by `sh` inside the image) shares it with the bash scripts.
#
#   prog=NAME; . lib/msg.sh        (bash scripts get it from lib/cmd.sh, which sets prog)
#   say MESSAGE      progress, on stderr: "NAME: MESSAGE"
#   die MESSAGE      something failed: "NAME: error: MESSAGE", exit 1
#   refuse MESSAGE   bad input, nothing was run: "NAME: error: MESSAGE", exit 2

say() { printf '%s: %s\n' "${prog:-${0##*/}}" "$*" >&2; }
error() { printf '%s: error: %s\n' "${prog:-${0##*/}}" "$*" >&2; }
die() {
    error "$@"
    exit 1
}
refuse() {
    error "$@"
    exit 2
}
