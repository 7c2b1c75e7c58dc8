#!/bin/sh
# stand-in srun for tests/test_jobs.py: records the call instead of starting tasks
{ for a in "$@"; do printf '%s\n' "$a"; done; echo; } >>"$STANDIN_RECORD"
exit "${STANDIN_SRUN_RC:-0}"
