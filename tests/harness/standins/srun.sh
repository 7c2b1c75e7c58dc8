#!/bin/sh
# stand-in srun for tests/test_jobs.py: records the call instead of starting tasks; prints
# $STANDIN_SRUN_STDERR on stderr as srun's own lines ("srun: error: n2: task 3: Killed")
{ for a in "$@"; do printf '%s\n' "$a"; done; echo; } >>"$STANDIN_RECORD"
[ -z "${STANDIN_SRUN_STDERR:-}" ] || printf '%s\n' "$STANDIN_SRUN_STDERR" >&2
exit "${STANDIN_SRUN_RC:-0}"
