#!/usr/bin/env bash
# `make submit` / `make srun`: check the request, then submit jobs/train.sbatch with sbatch, or
# print the equivalent direct srun line for an interactive allocation.
#
# Usage: jobs/submit.sh [submit|srun]     (make passes every knob as an environment variable)
#
# The knobs (NODES, GPUS, CONFIG, ARGS, IMAGE, GPUS_PER_TASK, CPUS_PER_TASK, MEM, TIME, PARTITION, ...):
# their defaults and documentation have one home, jobs/knobs.mk (`make help` lists them); a knob that is
# unset or empty gets its default. DRY_RUN=1 prints the memory plan, the sbatch command and the script,
# and submits nothing.
#
# Every check runs before sbatch; each problem found names the bad value and what is valid; then it exits 2
# and submits nothing. Last, once the request is otherwise valid, the memory plan (`python -m train plan`):
# one that cannot fit is refused the same way.
# shellcheck disable=SC2153 # the knobs are set by knob_defaults (jobs/lib/knobs.sh)
set -euo pipefail

prog="make submit"
mode=${1:-submit}
case $mode in
submit) ;;
srun) prog="make srun" ;;
*)
    printf 'usage: %s [submit|srun]\n' "$0" >&2
    exit 2
    ;;
esac

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
script=$root/jobs/train.sbatch

die() {
    printf '%s: error: %s\n' "$prog" "$*" >&2
    exit 2
}
note() { printf '%s: %s\n' "$prog" "$*" >&2; }

# shellcheck source=lib/cmd.sh
source "$root/lib/cmd.sh" # quote, run, DRY_RUN

# shellcheck source=jobs/lib/knobs.sh
source "$root/jobs/lib/knobs.sh"
knob_defaults "$root/jobs/knobs.mk"
# shellcheck source=jobs/lib/pyxis.sh
source "$root/jobs/lib/pyxis.sh" # host_python, launch_line, pyxis_flags
# shellcheck source=jobs/lib/code_dir.sh
source "$root/jobs/lib/code_dir.sh" # code_dir_check, code_dir_launch: CODE_DIR on every task's PYTHONPATH

# ---- checks -----------------------------------------------------------------------------------
# Every check runs; each problem is one line naming the value and what is valid.
problems=()
problem() { problems+=("$*"); }

positive() {
    [[ $2 =~ ^[1-9][0-9]*$ ]] && return 0
    problem "$1='$2' is not valid: expected a positive whole number, $3."
    return 1
}
nodes_ok=1
positive NODES "$NODES" "the number of nodes (e.g. NODES=2)" || nodes_ok=0
positive GPUS "$GPUS" "the number of GPUs in total, one task each (e.g. GPUS=4)" || nodes_ok=0
per_node=1
if ((nodes_ok)); then
    if ((GPUS % NODES != 0)); then
        lower=$((GPUS / NODES * NODES))
        hint="GPUS=$((lower + NODES))"
        ((lower > 0)) && hint="GPUS=$lower or $hint"
        problem "GPUS=$GPUS is not a multiple of NODES=$NODES: tasks are spread evenly, GPUS/NODES per node; use e.g. $hint."
    fi
    per_node=$((GPUS / NODES))
fi
case $GPUS_PER_TASK in
0 | 1) ;;
*) problem "GPUS_PER_TASK='$GPUS_PER_TASK' is not valid: expected 1 (each task drives one GPU) or 0 (CPU-only cluster, gloo)." ;;
esac
if [[ -n $CPUS_PER_TASK ]]; then
    positive CPUS_PER_TASK "$CPUS_PER_TASK" "CPUs per task (or empty for the cluster's default)" || true
fi
# SLURM's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (sbatch --time), or UNLIMITED/infinite.
time_seconds() { # TIME -> seconds on stdout (-1: no limit); non-zero status when not a SLURM time
    local t=$1 d=0 h=0 m=0 sec=0 rest
    [[ $t == UNLIMITED || $t == infinite ]] && { echo -1; return 0; }
    if [[ $t =~ ^([0-9]+)-([0-9]+)(:([0-9]+)(:([0-9]+))?)?$ ]]; then
        d=${BASH_REMATCH[1]} h=${BASH_REMATCH[2]} m=${BASH_REMATCH[4]:-0} sec=${BASH_REMATCH[6]:-0}
    elif [[ $t =~ ^[0-9]+(:[0-9]+(:[0-9]+)?)?$ ]]; then
        IFS=: read -r -a rest <<<"$t"
        case ${#rest[@]} in
        1) m=${rest[0]} ;;
        2) m=${rest[0]} sec=${rest[1]} ;;
        3) h=${rest[0]} m=${rest[1]} sec=${rest[2]} ;;
        esac
    else
        return 1
    fi
    echo $((10#$d * 86400 + 10#$h * 3600 + 10#$m * 60 + 10#$sec))
}
time_ok=1
if [[ -n $TIME ]] && ! time_seconds "$TIME" >/dev/null; then
    time_ok=0
    problem "TIME='$TIME' is not a SLURM time: expected minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. TIME=02:00:00 or TIME=1-00:00:00)."
fi
[[ -z $PARTITION || $PARTITION =~ ^[A-Za-z0-9_.,-]+$ ]] ||
    problem "PARTITION='$PARTITION' is not a partition name: expected letters, digits, '_', '.', '-'."
[[ $JOB_NAME =~ ^[A-Za-z0-9._-]+$ ]] ||
    problem "JOB_NAME='$JOB_NAME' is not valid: expected letters, digits, '.', '_' or '-' (it names the log file)."
case $DOCTOR in
0 | 1 | only) ;;
*) problem "DOCTOR='$DOCTOR' is not valid: expected 0, 1 (doctor first, then training) or only." ;;
esac
[[ $DOCTOR_TIMEOUT =~ ^[1-9][0-9]*$ ]] || problem "DOCTOR_TIMEOUT='$DOCTOR_TIMEOUT' is not valid: expected a positive whole number of seconds."
case $INSTALL_PROJECT in
auto | 0 | 1) ;;
*) problem "INSTALL_PROJECT='$INSTALL_PROJECT' is not valid: expected auto, 1 or 0." ;;
esac

# The image: none, a squashfs file (must exist), or a registry reference.
image_kind=registry
case $IMAGE in
none) image_kind=none ;;
/* | .* | *.sqsh) image_kind="file" ;;
esac
if [[ $image_kind == file ]]; then
    if [[ -f $IMAGE ]]; then
        IMAGE=$(cd "$(dirname "$IMAGE")" && pwd)/$(basename "$IMAGE") # pyxis reads a path only if it starts with / or .
    elif [[ -n $DRY_RUN || $mode == srun ]]; then
        note "warning: IMAGE='$IMAGE' does not exist (yet): build it with 'make image'; a real submit stops here."
        [[ $IMAGE == /* ]] || IMAGE=$root/${IMAGE#./}
    else
        problem "IMAGE='$IMAGE' does not exist: build it with 'make image', or pass IMAGE=nvcr.io#nvidia/pyg:TAG (a registry image; the project is installed at job start) or IMAGE=none (bare mode: the host's Python)."
    fi
elif [[ $image_kind == registry && ! $IMAGE =~ ^[A-Za-z0-9@#:/._-]+$ ]]; then
    problem "IMAGE='$IMAGE' is not valid: expected none, a .sqsh path, or a registry image like nvcr.io#nvidia/pyg:25.05-py3."
fi

# The config: a shipped name, or a file the job can read (inside the project for a container).
config_arg=
if [[ -f $root/train/configs/$CONFIG.yaml ]]; then
    config_arg=$CONFIG
elif [[ -f $CONFIG ]]; then
    config_abs=$(cd "$(dirname "$CONFIG")" && pwd)/$(basename "$CONFIG")
    case $config_abs in
    "$root"/*) config_arg=${config_abs#"$root"/} ;; # the job runs in the project (/workspace)
    *)
        if [[ $image_kind == none ]]; then
            config_arg=$config_abs
        else
            problem "CONFIG='$CONFIG' is outside the project ($root), the only folder the container sees (at /workspace): copy it into the project."
        fi
        ;;
    esac
else
    shipped=$(cd "$root/train/configs" && for f in *.yaml; do printf '%s ' "${f%.yaml}"; done)
    problem "CONFIG='$CONFIG' is neither a shipped config nor a file: shipped configs are: ${shipped% }; or give a YAML path."
fi

# The config's content and the overrides, checked by the package itself when a Python with
# PyYAML is at hand (a typo in ARGS would otherwise surface only once the job runs).
read -r -a args <<<"$ARGS"
check_py=$(host_python "$root" "$BARE_PYTHON")
if [[ -n $config_arg ]] && (cd "$root" && "$check_py" -c 'import yaml' >/dev/null 2>&1); then
    if ! err=$(cd "$root" && PYTHONPATH=$root "$check_py" -c '
import sys
from train.config import load_config
from train.errors import UserError
try:
    load_config(sys.argv[1], sys.argv[2:])
except UserError as exc:
    sys.exit(str(exc))
' "$config_arg" "${args[@]}" 2>&1); then
        problem "CONFIG='$CONFIG' ARGS='$ARGS': ${err}"
    fi
fi

# The user's code folder (CODE_DIR): it exists, and the model the config names imports from it and passes
# its contract where the job will run it (jobs/lib/code_dir.sh).
if [[ -n $CODE_DIR ]]; then
    [[ ! -d $CODE_DIR ]] || CODE_DIR=$(cd "$CODE_DIR" && pwd) # pyxis mounts an absolute path
    [[ -z $config_arg ]] || code_dir_check "$root" "$image_kind" "$IMAGE" "$CODE_DIR" "$check_py" "$config_arg" "${args[@]}"
fi

# The data folder: a container mounts it, so it must exist (the default one is created).
if [[ -n $DATA_DIR && ! -d $DATA_DIR && $image_kind != none ]]; then
    problem "DATA_DIR='$DATA_DIR' is not a directory: it is mounted into the container at /data, so it must exist."
fi

# ---- the cluster's real limits: a request no node can satisfy would pend forever -----------------
# Asked of the cluster itself (sinfo); where it cannot be asked, say what was not checked.
check_cluster() {
    local part max_time limit name cpus gres gpus fit_cpu=0 fit_gpu=0 total=0 most_cpus=0 most_gpus=0
    local cpus_each=${CPUS_PER_TASK:-1} need_gpus=$((per_node * GPUS_PER_TASK)) item count
    local -a partitions
    if ! command -v sinfo >/dev/null 2>&1; then
        note "note: sinfo is not on PATH: the partition, the node count, CPUs and GPUs per node and the time limit were not checked against the cluster."
        return 0
    fi
    if ! mapfile -t partitions < <(sinfo -h -o '%P' 2>/dev/null | sort -u) || ((${#partitions[@]} == 0)); then
        note "note: sinfo answered nothing: the request was not checked against the cluster's limits."
        return 0
    fi
    part=$PARTITION
    if [[ -z $part ]]; then
        for item in "${partitions[@]}"; do [[ $item == *'*' ]] && part=${item%'*'}; done
        [[ -n $part ]] || return 0 # no default partition: sbatch itself will ask for one
    else
        local known=0
        for item in "${partitions[@]}"; do [[ ${item%'*'} == "$part" ]] && known=1; done
        if ((!known)); then
            problem "PARTITION='$part' is not a partition of this cluster; its partitions are: $(printf '%s ' "${partitions[@]%'*'}")."
            return 0
        fi
    fi
    job_partition=$part # the memory plan asks about the same partition
    # One line per node: name, CPUs, generic resources (gpu:4, gpu:a100:4(S:0-1), (null)).
    while read -r name cpus gres; do
        [[ -n $name ]] || continue
        total=$((total + 1))
        gpus=0
        local -a items
        IFS=, read -r -a items <<<"$gres"
        for item in "${items[@]}"; do
            item=${item%%(*}
            if [[ $item =~ ^gpu(:[^:]+)?:([0-9]+)$ ]]; then
                count=${BASH_REMATCH[2]}
                gpus=$((gpus + count))
            fi
        done
        ((cpus > most_cpus)) && most_cpus=$cpus
        ((gpus > most_gpus)) && most_gpus=$gpus
        ((cpus >= per_node * cpus_each)) && fit_cpu=$((fit_cpu + 1))
        ((gpus >= need_gpus && cpus >= per_node * cpus_each)) && fit_gpu=$((fit_gpu + 1))
    done < <(sinfo -h -N -p "$part" -o '%N %c %G' 2>/dev/null | sort -u)
    if ((NODES > total)); then
        problem "NODES=$NODES: partition '$part' has only $total node(s); use NODES=$total or less (PARTITION= picks another partition)."
    elif ((fit_cpu < NODES)); then
        problem "CPUS_PER_TASK=${CPUS_PER_TASK:-1 (default)} x $per_node tasks per node = $((per_node * cpus_each)) CPUs per node, but the nodes of partition '$part' have at most $most_cpus CPUs ($fit_cpu node(s) fit, NODES=$NODES); use CPUS_PER_TASK=$((most_cpus / per_node > 0 ? most_cpus / per_node : 1)) or fewer tasks per node (more NODES)."
    elif ((need_gpus > 0 && fit_gpu < NODES)); then
        problem "GPUS=$GPUS over NODES=$NODES asks $need_gpus GPUs per node, but the nodes of partition '$part' have at most $most_gpus GPU(s) ($fit_gpu node(s) fit); use more NODES, fewer GPUS, or GPUS_PER_TASK=0 on a CPU-only partition."
    fi
    max_time=$(sinfo -h -p "$part" -o '%l' 2>/dev/null | sort -u | head -n 1)
    if [[ -n $TIME ]] && ((time_ok)) && limit=$(time_seconds "$max_time" 2>/dev/null) && ((limit >= 0)); then
        if (($(time_seconds "$TIME") > limit)); then
            problem "TIME='$TIME' is above the time limit of partition '$part' ($max_time); use TIME=$max_time or less."
        fi
    fi
}
job_partition=$PARTITION # the default partition, where sinfo names it (check_cluster)
[[ $mode == srun ]] || ((!nodes_ok)) || check_cluster

# ---- the memory plan: what a node, a rank and a GPU will hold, against what they have -----------
# `python -m train plan` (train/cli/plan.py), once the request is otherwise valid; its table is printed
# (stdout), and a plan that cannot fit is refused with its numbers. It needs torch and PyG here.
memory_plan() {
    local err status=0
    local -a plan_args=(--config "$config_arg" --nodes "$NODES" --gpus "$GPUS")
    ((GPUS_PER_TASK > 0)) || plan_args+=(--cpu)
    [[ -z $job_partition ]] || plan_args+=(--partition "$job_partition")
    if ! (cd "$root" && "$check_py" -c 'import importlib.util as u, sys
sys.exit(not all(u.find_spec(m) for m in ("torch", "torch_geometric", "yaml")))') >/dev/null 2>&1; then
        note "note: $check_py cannot import torch and torch_geometric: the memory plan was not made ('make setup' builds .venv)."
        return 0
    fi
    { err=$(cd "$root" && PYTHONPATH=${CODE_DIR:+$CODE_DIR:}$root "$check_py" -m train plan "${plan_args[@]}" -- "${args[@]}" 2>&1 >&3 3>&-) ||
        status=$?; } 3>&1
    if ((status == 2)); then
        problem "memory plan for CONFIG='$CONFIG' ARGS='$ARGS' NODES=$NODES GPUS=$GPUS: ${err#error: }"
    elif ((status != 0)); then
        note "note: the memory plan failed (status $status), so it was not checked: ${err##*$'\n'}"
    fi
}
[[ $mode == srun ]] || ((${#problems[@]})) || memory_plan

if ((${#problems[@]})); then
    for line in "${problems[@]}"; do
        printf '%s: error: %s\n' "$prog" "$line" >&2
    done
    [[ $mode == srun ]] || printf '%s: nothing was submitted.\n' "$prog" >&2
    exit 2
fi

# ---- paths ------------------------------------------------------------------------------------
if [[ -z $DATA_DIR ]]; then
    DATA_DIR=$root/data
    [[ $image_kind == none || -n $DRY_RUN || $mode == srun ]] || mkdir -p "$DATA_DIR" # a mount source must exist
elif [[ -d $DATA_DIR ]]; then
    DATA_DIR=$(cd "$DATA_DIR" && pwd)
else
    [[ $DATA_DIR == /* ]] || DATA_DIR=$root/$DATA_DIR
fi
[[ $LOG_DIR == /* ]] || LOG_DIR=$root/$LOG_DIR

# ---- the request as SLURM options -------------------------------------------------------------
resources=(--nodes="$NODES" --ntasks="$GPUS" --ntasks-per-node="$per_node")
if ((GPUS_PER_TASK > 0)); then
    # every task sees all GPUs of its node and uses cuda:LOCAL_RANK (SLURM >= 24.05 may also
    # need --tres-bind=gres/gpu:none)
    resources+=(--gpus-per-task="$GPUS_PER_TASK" --gpu-bind=none)
fi
[[ -z $CPUS_PER_TASK ]] || resources+=(--cpus-per-task="$CPUS_PER_TASK")
[[ -z $MEM ]] || resources+=(--mem="$MEM")
[[ -z $TIME ]] || resources+=(--time="$TIME")
[[ -z $PARTITION ]] || resources+=(--partition="$PARTITION")
[[ -z $ACCOUNT ]] || resources+=(--account="$ACCOUNT")
[[ -z $QOS ]] || resources+=(--qos="$QOS")

# ---- the job-start install: its wheels are prepared here, on the login node ------------------
# (as jobs/train.sbatch decides: auto installs into a registry image, not into a .sqsh)
install=$INSTALL_PROJECT
if [[ $install == auto ]]; then
    install=0
    [[ $image_kind != registry ]] || install=1
fi
[[ $image_kind != none ]] || install=0
if [[ $install == 1 ]]; then
    note "preparing the wheels the job-start install reads (compute nodes need no index): .wheels/"
    run bash "$root/container/wheelhouse.sh" "$root/.wheels"
fi

# ---- make srun: the direct line for an interactive allocation ---------------------------------
if [[ $mode == srun ]]; then
    read -r -a srun_extra <<<"$SRUN_ARGS"
    line=(srun "${resources[@]}" --kill-on-bad-exit=1 --label "${srun_extra[@]}")
    envs=(OMP_NUM_THREADS="${CPUS_PER_TASK:-1}")
    if [[ $image_kind == none ]]; then
        envs+=(DATA_DIR="$DATA_DIR")
        line+=(--chdir="$root")
        launch_line none "$root" "$DATA_DIR" "" "" "" "$BARE_PYTHON"
        code_dir_launch "$CODE_DIR"
    else
        envs+=(DATA_DIR=/data)
        name=
        if [[ $install == 1 ]]; then
            name=pyg-train
            pyxis_flags "$IMAGE" "$root" "$DATA_DIR" "$CONTAINER_MOUNTS" "$name" WHEELS,OFFLINE
            note "first install the project into the image, once per allocation (one task per node, offline):"
            quote WHEELS=/workspace/.wheels OFFLINE=1 srun --nodes="$NODES" --ntasks="$NODES" --ntasks-per-node=1 \
                "${PYXIS[@]}" --container-remap-root --container-writable \
                sh /workspace/container/install-project.sh /workspace
        fi
        launch_line "$IMAGE" "$root" "$DATA_DIR" "$CONTAINER_MOUNTS" "$name" DATA_DIR,OMP_NUM_THREADS
        code_dir_launch "$CODE_DIR"
    fi
    line+=("${LAUNCH[@]}")
    line+=(-m train fit --config "$config_arg" "${args[@]}")
    note "inside an allocation (salloc ${resources[*]}), or from a login node, run:"
    quote "${envs[@]}" "${line[@]}"
    exit 0
fi

# ---- make submit ------------------------------------------------------------------------------
read -r -a sbatch_extra <<<"$SBATCH_ARGS"
# Unique to this submission and kept by every requeue of it (the job's saved environment): its run
# directory records it, so another job with the same id never resumes it (train/loop/rundir.py).
submission=$(date -u +%Y%m%dT%H%M%SZ)-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
sbatch_cmd=(sbatch --parsable --export=ALL --chdir="$root" --job-name="$JOB_NAME" --output="$LOG_DIR/%x-%j.log"
    "${resources[@]}" "${sbatch_extra[@]}" "$script")
# The knobs of jobs/train.sbatch travel in the environment: --export=ALL (as the seed), also where
# a site sets SBATCH_EXPORT=NONE.
job_env=(CONFIG="$config_arg" ARGS="$ARGS" IMAGE="$IMAGE" PROJECT_DIR="$root" DATA_DIR="$DATA_DIR"
    GPUS_PER_TASK="$GPUS_PER_TASK" SRUN_ARGS="$SRUN_ARGS" CONTAINER_MOUNTS="$CONTAINER_MOUNTS" CODE_DIR="$CODE_DIR"
    INSTALL_PROJECT="$INSTALL_PROJECT" BARE_PYTHON="$BARE_PYTHON" DOCTOR="$DOCTOR" DOCTOR_TIMEOUT="$DOCTOR_TIMEOUT"
    PYG_SUBMISSION_ID="$submission")

if [[ -n $DRY_RUN ]]; then
    echo "# DRY_RUN=1: nothing submitted. The sbatch command:"
    quote env "${job_env[@]}" "${sbatch_cmd[@]}"
    echo "# The script it submits, ${script#"$root"/}:"
    cat "$script"
    exit 0
fi

command -v sbatch >/dev/null 2>&1 || die "sbatch is not on PATH: run this on a SLURM login node (or use DRY_RUN=1 to see the command); nothing was submitted."
mkdir -p "$LOG_DIR" # SLURM does not create the output folder: without it the log is lost
if ! reply=$(env "${job_env[@]}" "${sbatch_cmd[@]}"); then
    printf '%s: error: sbatch refused the job (its message is above); the command was:\n%s\n' \
        "$prog" "$(quote "${sbatch_cmd[@]}")" >&2
    exit 1
fi
job_id=${reply%%;*}
[[ $job_id =~ ^[0-9]+$ ]] || {
    printf '%s: error: sbatch printed %q, not a job id\n' "$prog" "$reply" >&2
    exit 1
}
log=$LOG_DIR/$JOB_NAME-$job_id.log
echo "Submitted job $job_id ($NODES nodes, $GPUS tasks, $per_node per node, config $CONFIG, image $IMAGE)"
echo "log:    $log"
echo "follow: tail -f $(quote "$log")"
echo "status: squeue -j $job_id    cancel: scancel $job_id"
