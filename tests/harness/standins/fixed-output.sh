#!/bin/sh
# Stand-in for any command that prints fixed text (tests/test_plan.py: sinfo, nvidia-smi): records its
# arguments in $STANDIN_DIR/NAME.argv and prints $STANDIN_DIR/NAME.out, NAME being how it was called.
set -eu
name=$(basename "$0")
printf '%s\n' "$*" >>"$STANDIN_DIR/$name.argv"
cat "$STANDIN_DIR/$name.out"
