#!/bin/sh
# stand-in sbatch for tests/test_jobs.py: records the call instead of submitting anything
{
    printf 'ARGV'; for a in "$@"; do printf ' %s' "$a"; done; printf '\n'
    printf 'ENV CONFIG=%s\nENV ARGS=%s\nENV IMAGE=%s\nENV GPUS_PER_TASK=%s\nENV PROJECT_DIR=%s\n' \
        "$CONFIG" "$ARGS" "$IMAGE" "$GPUS_PER_TASK" "$PROJECT_DIR"
} >>"$STANDIN_RECORD"
echo 4242
