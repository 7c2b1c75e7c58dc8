#!/bin/sh
# Stand-in for a command that cannot answer (tests/test_plan.py: sinfo without a controller): prints
# $STANDIN_DIR/NAME.err to stderr and exits with status 1, NAME being how it was called.
set -eu
name=$(basename "$0")
cat "$STANDIN_DIR/$name.err" >&2
exit 1
