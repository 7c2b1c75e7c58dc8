#!/usr/bin/env bash
# `make data DATASET=...`: prepare a dataset into DATA_DIR on a login node (compute nodes
# often have no internet), inside the same image the jobs use.
#
# Env (mk/data.mk passes them):
#   DATASET   a shipped config name (reddit, synthetic, ...) or a PyG dataset name (Reddit, Flickr, Cora...)
#   DATA_DIR  where the data goes (default: data); the jobs mount it at /data
#   IMAGE     a .sqsh file: run inside it with `enroot start`; a registry URI (nvcr.io#nvidia/pyg:TAG):
#             a one-task `srun --container-image`; none (or no enroot for a .sqsh): the local venv
#   DATA_MODE auto (default), enroot, srun, bare: force one of the routes above
#   DRY_RUN=1 print the command instead of running it
set -euo pipefail

# shellcheck source=lib/cmd.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cmd.sh" # root, prog, say, refuse, quote, run, host_python, DRY_RUN
cd "$root"
# shellcheck source=jobs/lib/knobs.sh
source "$root/jobs/lib/knobs.sh" # IMAGE and DATA_DIR: the job's knobs, one table (jobs/knobs.md)
knob_defaults
DATASET=${DATASET:-}
DATA_MODE=${DATA_MODE:-auto}
# shellcheck source=lib/checks.sh
source "$root/lib/checks.sh" # check_shapes, image_kind, squashfs_problem, dir_problem
# shellcheck source=jobs/lib/steps.sh
source "$root/jobs/lib/steps.sh" # launch_line: the pyxis flags of every step in the image
# shellcheck disable=SC2153 # IMAGE is set by knob_defaults

# ---- checks: the same in a dry run as in a real one; nothing is created before they pass. Shapes first
# (the others need them), then every other problem at once, the dataset's name first: a wrong name is
# named even where the image it would run in is not built yet.
check_shapes DATASET DATA_DIR IMAGE DATA_MODE DRY_RUN
DATA_DIR=${DATA_DIR:-data} # empty: data/ in the project, where make submit looks by default
if shape_ok DATA_DIR; then
    why=$(dir_problem DATA_DIR "$DATA_DIR")
    [[ -z $why ]] || problem "$why Give the datasets folder."
fi
report_problems

if [[ -f train/configs/$DATASET.yaml ]]; then
    train_args=(data --config "$DATASET")
else
    train_args=(data --config synthetic "data.name=$DATASET")
fi
# The package itself checks the name (login/config_check.py), as far as this host's Python can.
check_config "DATASET='$DATASET'" "$(host_python "$root")" --dataset "${train_args[@]:2}"

# The route, and the image it runs in: a squashfs file that exists (a dry run of the srun route may go ahead).
if [[ $DATA_MODE == auto ]]; then
    case $(image_kind "$IMAGE") in
    none) DATA_MODE=bare ;;
    file) if command -v enroot >/dev/null 2>&1; then DATA_MODE=enroot; else DATA_MODE=bare; fi ;;
    registry) DATA_MODE=srun ;;
    esac
fi
if [[ $DATA_MODE != bare && $(image_kind "$IMAGE") == file ]]; then
    if [[ -e $IMAGE || -L $IMAGE ]]; then
        why=$(squashfs_problem IMAGE "$IMAGE")
        [[ -z $why ]] || problem "$why"
    elif [[ $DATA_MODE == enroot || -z $DRY_RUN ]]; then
        problem "IMAGE='$IMAGE' does not exist; build it with 'make image' or set IMAGE=none for the local venv"
    else
        say "warning: IMAGE='$IMAGE' does not exist (yet): build it with 'make image'; a real run stops here."
    fi
fi
report_problems

if [[ -n $DRY_RUN ]]; then # nothing is created: the path as it will be
    if [[ -d $DATA_DIR ]]; then data_abs=$(cd "$DATA_DIR" && pwd); else data_abs=$DATA_DIR; fi
    [[ $data_abs == /* ]] || data_abs=$root/${data_abs#./}
else
    mkdir -p -- "$DATA_DIR"
    data_abs=$(cd "$DATA_DIR" && pwd)
fi
case $DATA_MODE in
enroot)
    cmd=(enroot start --mount "$root:/workspace" --mount "$data_abs:/data" --env DATA_DIR=/data
        --env PYTHONPATH=/workspace "$IMAGE" python -m train "${train_args[@]}")
    ;;
srun)
    launch_line "$(image_path "$IMAGE" "$root")" "$root" "$data_abs" # the jobs' launch line (jobs/lib/pyxis.sh)
    cmd=(srun --nodes=1 --ntasks=1 "--export=ALL,DATA_DIR=/data,PYTHONPATH=/workspace" "${LAUNCH[@]}"
        -m train "${train_args[@]}")
    ;;
bare)
    cmd=(env "DATA_DIR=$data_abs" "PYTHONPATH=$root" "$(host_python "$root")" -m train "${train_args[@]}")
    ;;
esac

[[ -n $DRY_RUN ]] || say "preparing $DATASET into $data_abs ($DATA_MODE)"
run "${cmd[@]}"
# the image saw DATA_DIR at /data: say where that is here
[[ -n $DRY_RUN || $DATA_MODE == bare ]] || say "$DATASET is in $data_abs on this host (/data in the image and in the jobs)"
