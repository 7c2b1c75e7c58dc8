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
# shellcheck source=jobs/lib/pyxis.sh
source "$root/jobs/lib/pyxis.sh" # launch_line: the pyxis flags of every step in the image

# ---- checks: the same in a dry run as in a real one; nothing is created before they pass --------
shipped=$(cd train/configs && for f in *.yaml; do printf '%s ' "${f%.yaml}"; done)
[[ -n $DATASET ]] || die "DATASET is empty; give a config name (e.g. DATASET=reddit) or a PyG dataset name (e.g. DATASET=Flickr)"
[[ $DATASET =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] ||
    die "DATASET='$DATASET' is not a dataset name: expected letters, digits, '_', '.', '-' (a shipped config: ${shipped% }; or a PyG dataset name such as Reddit, Flickr, Cora)"
[[ -n $DATA_DIR && $DATA_DIR != *[[:cntrl:]]* ]] ||
    die "DATA_DIR='$DATA_DIR' is not a usable path: expected a directory path without control characters (default: data)"
if [[ -e $DATA_DIR && ! -d $DATA_DIR ]]; then
    die "DATA_DIR='$DATA_DIR' is a file, not a directory; give the datasets folder"
fi
parent=$DATA_DIR
while [[ ! -e $parent ]]; do parent=$(dirname -- "$parent"); done
[[ -d $parent ]] || die "DATA_DIR='$DATA_DIR' cannot be created: '$parent' is a file, not a directory"
case $IMAGE in
none | '' | /* | .* | *.sqsh) ;;
*)
    [[ $IMAGE =~ ^[A-Za-z0-9][A-Za-z0-9@#:/._-]*$ ]] ||
        die "IMAGE='$IMAGE' is not valid: expected none, a .sqsh path, or a registry image like nvcr.io#nvidia/pyg:25.05-py3"
    ;;
esac
[[ $IMAGE != *[[:cntrl:]]* ]] || die "IMAGE='$IMAGE' contains control characters"
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
    die "IMAGE='$IMAGE' does not exist; build it with 'make image' or set IMAGE=none for the local venv"
fi

# The package itself checks the name when this host can import it (a dry run as much as a real one).
python=python3
[[ -x .venv/bin/python ]] && python=.venv/bin/python
check='
import sys
try:
    from train.config import load_config
    from train.graph.data import check_dataset_name
except ImportError:
    sys.exit(0)  # no package environment on this host: the image checks it
from train.errors import UserError
try:
    check_dataset_name(load_config(sys.argv[3], sys.argv[4:]).data.name)
except UserError as exc:
    sys.exit(str(exc))
'
if ! err=$(PYTHONPATH=$root "$python" -c "$check" "${train_args[@]}" 2>&1); then
    die "DATASET='$DATASET': ${err}"
fi

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
    launch_line "$IMAGE" "$root" "$data_abs" # the jobs' launch line (jobs/lib/pyxis.sh)
    cmd=(srun --nodes=1 --ntasks=1 "--export=ALL,DATA_DIR=/data,PYTHONPATH=/workspace" "${LAUNCH[@]}"
        -m train "${train_args[@]}")
    ;;
bare)
    cmd=(env "DATA_DIR=$data_abs" "PYTHONPATH=$root" "$python" -m train "${train_args[@]}")
    ;;
esac

[[ -n $DRY_RUN ]] || printf '==> preparing %s into %s (%s)\n' "$DATASET" "$data_abs" "$DATA_MODE" >&2
run "${cmd[@]}"
