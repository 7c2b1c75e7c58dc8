#!/usr/bin/env bash
# latest_log.sh LOG_DIR: the log of the job `make submit` submitted last into LOG_DIR (its path, recorded in
# LOG_DIR/.last-submitted), else the newest *.log under LOG_DIR; `make logs` and `make tail` read it.
# The last submitted job's log may not exist yet (the job is pending): the path is printed all the same,
# so that `make tail` waits for it instead of showing an older job's log. Exit 2 when there is none.
set -euo pipefail

dir=$1
if [[ -f $dir/.last-submitted ]] && IFS= read -r log <"$dir/.last-submitted" && [[ -n $log ]]; then
    printf '%s\n' "$log"
    exit 0
fi
log=$(find "$dir" -type f -name '*.log' -printf '%T@ %p\n' 2>/dev/null | sort -rn | sed -n '1s/^[^ ]* //p' || true)
[[ -n $log ]] || exit 2
printf '%s\n' "$log"
