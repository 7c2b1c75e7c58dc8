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

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

die() {
    printf 'data.sh: error: %s\n' "$*" >&2
    exit 2
}

DATASET=${DATASET:-}
DATA_DIR=${DATA_DIR:-data}
IMAGE=${IMAGE:-none}
DATA_MODE=${DATA_MODE:-auto}
# shellcheck source=lib/cmd.sh
source "$root/lib/cmd.sh" # quote, run, DRY_RUN

[[ -n $DATASET ]] || die "DATASET is empty; give a config name (e.g. DATASET=reddit) or a PyG dataset name (e.g. DATASET=Flickr)"
if [[ -f train/configs/$DATASET.yaml ]]; then
    train_args=(data --config "$DATASET")
else
    train_args=(data --config synthetic "data.name=$DATASET")
fi

case $DATA_MODE in
auto)
    if [[ $IMAGE == none || -z $IMAGE ]]; then
        DATA_MODE=bare
    elif [[ $IMAGE == *.sqsh ]]; then
        if command -v enroot >/dev/null 2>&1; then DATA_MODE=enroot; else DATA_MODE=bare; fi
    else
        DATA_MODE=srun
    fi
    ;;
enroot | srun | bare) ;;
*) die "unknown DATA_MODE '$DATA_MODE'; valid values: auto, enroot, srun, bare" ;;
esac

if [[ $DATA_MODE == enroot && ! -f $IMAGE ]]; then
    die "IMAGE=$IMAGE does not exist; build it with 'make image' or set IMAGE=none for the local venv"
fi

mkdir -p "$DATA_DIR"
data_abs=$(cd "$DATA_DIR" && pwd)
case $DATA_MODE in
enroot)
    cmd=(enroot start --mount "$root:/workspace" --mount "$data_abs:/data" --env DATA_DIR=/data
        --env PYTHONPATH=/workspace "$IMAGE" python -m train "${train_args[@]}")
    ;;
srun)
    cmd=(srun --nodes=1 --ntasks=1 "--container-image=$IMAGE" "--container-mounts=$root:/workspace,$data_abs:/data"
        --container-workdir=/workspace --no-container-mount-home "--export=ALL,DATA_DIR=/data,PYTHONPATH=/workspace"
        python -m train "${train_args[@]}")
    ;;
bare)
    python=python3
    [[ -x .venv/bin/python ]] && python=.venv/bin/python
    cmd=(env "DATA_DIR=$data_abs" "PYTHONPATH=$root" "$python" -m train "${train_args[@]}")
    ;;
esac

[[ -n $DRY_RUN ]] || printf '==> preparing %s into %s (%s)\n' "$DATASET" "$data_abs" "$DATA_MODE" >&2
run "${cmd[@]}"
