#!/usr/bin/env bash
# `make plan`: would the job fit? The memory plan of CONFIG (and ARGS) on NODES nodes and GPUS ranks
# (`python -m train plan`, train/cli/plan.py), on this machine, before anything is downloaded or queued: a
# dataset not prepared yet is planned from its published size. NODE_MEMORY and GPU_MEMORY (e.g. 2T, 80G)
# say what a node and a GPU have; without them sinfo (PARTITION: its nodes' memory and GPU type) is asked.
# `make submit` (jobs/submit.sh) makes the same plan, with the cluster's figures, before sbatch.
#
# Usage: jobs/plan.sh     (make passes every setting as an environment variable; check-plan checked their shapes)
# shellcheck disable=SC2153 # the settings are set by make, their defaults by knob_defaults (jobs/lib/knobs.sh)
set -euo pipefail

prog="make plan"
# shellcheck source=lib/cmd.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cmd.sh" # root, say, die
cd "$root"
# shellcheck source=lib/checks.sh
source "$root/lib/checks.sh" # knob_defaults (jobs/lib/knobs.sh), memory_gib
knob_defaults

read -r -a args <<<"$ARGS"
plan=(--config-knob CONFIG --config "$CONFIG" --nodes "$NODES" --gpus "$GPUS")
[[ $GPUS_PER_TASK != 0 ]] || plan+=(--cpu)
[[ -z $PARTITION ]] || plan+=(--partition "$PARTITION")
[[ -z $NODE_MEMORY ]] || plan+=(--node-memory "$(memory_gib "$NODE_MEMORY")")
[[ -z $GPU_MEMORY ]] || plan+=(--gpu-memory "$(memory_gib "$GPU_MEMORY")")
PYTHONPATH=${CODE_DIR:+$CODE_DIR:}$root exec "$VENV/bin/python" -m train plan "${plan[@]}" -- "${args[@]}"
