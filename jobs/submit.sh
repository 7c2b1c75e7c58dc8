#!/usr/bin/env bash
# `make submit` / `make srun` / `make sweep`: check the request, then submit jobs/train.sbatch with sbatch (a sweep:
# as one job array, an element per point and seed of its grid), or print the equivalent direct srun lines for an
# interactive allocation.
#
# Usage: jobs/submit.sh [submit|srun|sweep]     (make passes every setting as an environment variable)
#
# The settings (NODES, GPUS, CONFIG, IMAGE, TIME, ...): their defaults, shapes, sbatch options and
# documentation have one home, the table jobs/knobs.md (`make help` lists them; jobs/lib/knobs.sh reads it);
# a setting that is unset or empty gets its default. DRY_RUN=1 prints the memory plan, the sbatch command,
# the job's steps (install, doctor, training) exactly as jobs/train.sbatch will run them (jobs/lib/steps.sh
# builds them for both) and the job's promises (jobs/lib/promises.sh), and submits nothing.
#
# Every check runs before sbatch, the same with DRY_RUN=1; each problem found names the bad value and what
# is valid; then it exits 2 and submits nothing. Cheap and certain checks come first (shapes, files), then
# the cluster's limits (sinfo), last the memory plan (`python -m train plan`): one that cannot fit is
# refused the same way. A sweep (SWEEP, SEEDS, MAX_PARALLEL) checks its grid as well: every element's config valid
# (login/sweep.py), the array within the cluster's MaxArraySize; each element's plan is made, and the largest
# decides whether the sweep fits. MODE=predict checks RUN as its ranks would, and plans the run's own config. A dry
# run prints the plan whenever the counts, the config and the model's code are valid, even where another check
# failed (a real submit: where only the dataset is missing): a dataset not downloaded yet is planned from its
# published size.
# shellcheck disable=SC2153 # the settings are set by knob_defaults (jobs/lib/knobs.sh)
set -euo pipefail

mode=${1:-submit}
case $mode in
submit | srun | sweep) prog=${PYG_PROG:-make $mode} ;; # PYG_PROG: make doctor, which submits the doctor's job
*)
    printf 'usage: %s [submit|srun|sweep]\n' "$0" >&2
    exit 2
    ;;
esac
# shellcheck source=lib/cmd.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cmd.sh" # root, say, die, quote, DRY_RUN
cd "$root"                                              # relative paths are the project's
script=$root/jobs/train.sbatch
# shellcheck source=lib/checks.sh
source "$root/lib/checks.sh" # the settings' table (jobs/lib/knobs.sh), check_shapes, problem, report_problems,
# image_kind (lib/image.sh), squashfs_problem, dir_problem, check_config
knob_defaults
# shellcheck source=jobs/lib/steps.sh
source "$root/jobs/lib/steps.sh" # gpu_options, job_steps
# shellcheck source=jobs/lib/cluster.sh
source "$root/jobs/lib/cluster.sh" # ask_sinfo and the checks of the request against its answer
# shellcheck source=jobs/lib/promises.sh
source "$root/jobs/lib/promises.sh" # job_promises: the warning, the time limit and what follows each

# ---- checks: shapes first (lib/checks.sh), then what each value names ---------------------------------
checked=()
for name in "${KNOBS[@]}"; do [[ $name == GPUS && $GPUS == 0 ]] || checked+=("$name"); done
if [[ $GPUS == 0 ]]; then # the number of tasks; a CPU-only cluster is asked for by GPUS_PER_TASK=0
    problem "GPUS=0 is not valid: GPUS is the number of tasks (ranks), at least 1; for a CPU-only cluster keep GPUS=N tasks and set GPUS_PER_TASK=0 (no GPU options; gloo)."
    SHAPE_FAILED[GPUS]=1
fi
check_shapes "${checked[@]}" DRY_RUN
# The sweep's settings are make sweep's: elsewhere a value given is refused, never ignored.
if [[ $mode != sweep ]]; then
    for name in SWEEP SEEDS MAX_PARALLEL; do
        [[ -z ${!name} || ($name == SEEDS && ${!name} == "${KNOB_DEFAULT[SEEDS]}") ]] ||
            problem "$(shown "$name" "${!name}") is make sweep's setting (a job array of the grid SWEEP, SEEDS runs per point): make sweep $name=... submits it; make $mode runs one configuration."
    done
elif shape_ok DOCTOR && ! trains "$DOCTOR"; then
    problem "DOCTOR=only runs the doctor alone, with nothing to sweep: make doctor checks the nodes; DOCTOR=1 runs it before each element's training."
fi

per_node=1
nodes_ok=0
# GPUS a multiple of NODES: this rule's one home (the job's layout is chosen here: --ntasks-per-node); the memory
# plan trusts it (python -m train plan plans the busiest node of any layout).
#
# The memory plan is ready when what it reads is valid: the counts, the config, the model's code; a dataset not
# prepared yet is one problem among the others (the plan reads its published size). A dry run prints it whatever
# else is wrong; a real submit only beside a dataset not prepared (below).
plan_ready=0 data_missing=0
if shape_ok NODES && shape_ok GPUS; then # both at most 7 digits: the arithmetic below cannot overflow
    nodes_ok=1
    ((GPUS % NODES != 0)) || plan_ready=1
    if ((GPUS % NODES != 0)); then
        lower=$((GPUS / NODES * NODES))
        hint="GPUS=$((lower + NODES))"
        ((lower > 0)) && hint="GPUS=$lower or $hint"
        problem "GPUS=$GPUS is not a multiple of NODES=$NODES: tasks are spread evenly, GPUS/NODES per node; use e.g. $hint."
    fi
    per_node=$((GPUS / NODES))
fi

# The doctor waits up to DOCTOR_TIMEOUT for the ranks to meet: within the job's time limit (TIME=0: none).
if [[ -n $TIME ]] && shape_ok TIME && shape_ok DOCTOR && shape_ok DOCTOR_TIMEOUT && runs_doctor "$DOCTOR"; then
    limit=$(time_seconds "$TIME")
    ((limit <= 0 || DOCTOR_TIMEOUT < limit)) ||
        problem "DOCTOR_TIMEOUT=$DOCTOR_TIMEOUT seconds is not below TIME='$TIME' ($limit seconds): the job would end while the doctor waits; use a smaller DOCTOR_TIMEOUT or a longer TIME."
fi

# The image: none, a squashfs file (that must exist, and be one), or a registry reference.
image_kind=$(image_kind "$IMAGE")
if shape_ok IMAGE && [[ $image_kind == file ]]; then
    if [[ -e $IMAGE || -L $IMAGE ]]; then
        why=$(squashfs_problem IMAGE "$IMAGE")
        [[ -z $why ]] || problem "$why"
    elif [[ -n $DRY_RUN || $mode == srun ]]; then
        say "warning: IMAGE='$IMAGE' does not exist (yet): build it with 'make image'; a real submit stops here."
    else
        problem "IMAGE='$IMAGE' does not exist: build it with 'make image', or pass IMAGE=nvcr.io#nvidia/pyg:TAG (a registry image; the project is installed at job start) or IMAGE=none (bare mode: the host's Python)."
    fi
fi

# MODE=predict: the job writes every node's rows of a finished run, RUN (python -m train predict, docs/predict.md).
# The run's own config (RUN/config.yaml) is what the checks and the memory plan read; ARGS holds predict's data.*
# overrides and its options (--layer K, --out DIR), checked below as every rank would check them.
if [[ $MODE == predict ]] && shape_ok MODE && shape_ok RUN; then
    if [[ $mode == sweep ]]; then
        problem "MODE=predict with make sweep: a sweep trains each point; make submit MODE=predict RUN=runs/<id> predicts with one run."
    elif shape_ok DOCTOR && runs_doctor "$DOCTOR"; then
        problem "DOCTOR=$DOCTOR with MODE=predict: the doctor is a training job's first step; run make doctor NODES=$NODES GPUS=$GPUS first."
    elif [[ -z $RUN ]]; then
        problem "MODE=predict needs RUN=runs/<id>, the finished run whose model predicts (make report lists the runs)."
    elif [[ ! -d $RUN ]]; then
        problem "RUN='$RUN' is not a directory: give a finished run's directory (runs/<id>)."
    elif [[ ! -f $RUN/config.yaml ]]; then
        problem "RUN='$RUN' holds no config.yaml: give a finished run's directory (runs/<id>)."
    elif [[ $image_kind != none && $(cd "$RUN" && pwd)/ != "$root"/* ]]; then
        problem "RUN='$RUN' is outside the project ($root), the only folder the container sees (at /workspace): give a run under runs/, or IMAGE=none."
    else
        CONFIG=$RUN/config.yaml # the run's own settings, for the checks and the memory plan
    fi
fi

# The config: a shipped name, or a file the job can read (inside the project for a container).
config_arg=
if ! shape_ok CONFIG; then
    :
elif [[ -f $root/train/configs/$CONFIG.yaml ]]; then
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

# The paths the config makes the job read (data.path, data.root, a checkpoint), as the container sees them
# (login/job_paths.py): one outside every mount is refused with its fixes; one given as this machine or as the
# container sees it goes to each in its own form: check_args here, job_args (added to ARGS) in the job.
read -r -a args <<<"$ARGS"
predict_words=("${args[@]}") # MODE=predict: its options and overrides; the config's checks read the overrides
if [[ $MODE == predict ]]; then
    args=()
    for word in "${predict_words[@]}"; do [[ ! $word =~ ^[a-z_]+\.[^=]+= ]] || args+=("$word"); done
fi
check_args=("${args[@]}") job_args=()
check_py=$(host_python "$root" "$([[ $image_kind != none ]] || echo "$BARE_PYTHON")")
job_paths() {
    local mounts=$CONTAINER_MOUNTS data_dir=${DATA_DIR:-$root/data} said status=0 kind line
    [[ -z $CODE_DIR ]] || mounts+=${mounts:+,}$CODE_DIR:$CODE_MOUNT
    said=$(PYTHONPATH=$root "$check_py" -m login.job_paths --project "$root" --data-dir "$data_dir" \
        --mounts "$mounts" "$config_arg" "${args[@]}" 2>&1) || status=$?
    if ((status == 2)); then
        while IFS= read -r line; do problem "$line"; done <<<"$said"
        return 0
    elif ((status != 0)); then
        say "note: not checked ($check_py -m login.job_paths: status $status): ${said##*$'\n'}"
        return 0
    fi
    while IFS= read -r line; do
        kind=${line%%:*} line=${line#*:}
        case $kind in
        here) read -r -a check_args <<<"${ARGS} $line" ;;
        job) read -r -a job_args <<<"$line" ;;
        note) say "note:$line" ;;
        esac
    done <<<"$said"
}
if [[ $image_kind != none && -n $config_arg ]] && shape_ok ARGS && shape_ok DATA_DIR && shape_ok CODE_DIR &&
    shape_ok CONTAINER_MOUNTS; then
    job_paths
fi

# The config's content and the overrides, checked by the package itself (login/config_check.py; it says
# what it could not check where this Python lacks PyYAML): a typo in ARGS would surface only in the job.
if [[ $image_kind == none ]] && shape_ok BARE_PYTHON && ! command -v -- "$check_py" >/dev/null 2>&1; then
    problem "BARE_PYTHON='$check_py' is not a program here: with IMAGE=none the job runs it on every node (give a path every node sees)."
elif [[ -n $config_arg ]] && shape_ok ARGS; then
    found=${#PROBLEMS[@]}
    dataset=() # DOCTOR=only: the doctor job looks for the dataset on the nodes
    ! trains "$DOCTOR" || dataset=(--dataset)
    check_config "CONFIG='$CONFIG' ARGS='$ARGS'" "$check_py" "${dataset[@]}" "$config_arg" "${check_args[@]}"
    if ((${#PROBLEMS[@]} > found)); then
        plan_ready=0
    elif trains "$DOCTOR"; then # the dataset prepared in DATA_DIR, where the job reads it
        check_config "CONFIG='$CONFIG' ARGS='$ARGS'" "$check_py" --data-dir "$DATA_DIR" "$config_arg" "${check_args[@]}"
        ((${#PROBLEMS[@]} == found)) || data_missing=1
    fi
else
    plan_ready=0
fi

# The sweep's grid (make sweep): each element's config checked as ARGS was, the array against MaxArraySize
# (login/sweep.py); the elements' overrides go to a list file, a line each, that each element reads its line of
# (jobs/train.sbatch). Checked once ARGS is valid: a grid on a broken config would only repeat its refusal.
sweep_list='' array_spec='' sweep_elements=()
sweep_check() {
    local max_size said status=0 kind line
    local -a sized=()
    max_size=$(max_array_size)
    if [[ -n $max_size ]]; then
        sized=(--max-array-size "$max_size")
    else
        say "note: scontrol show config did not say the cluster's MaxArraySize: the array's size was not checked."
    fi
    [[ -z $MAX_PARALLEL ]] || sized+=(--max-parallel "$MAX_PARALLEL")
    sweep_list=$(mktemp)
    said=$(PYTHONPATH=$root "$check_py" -m login.sweep --config "$config_arg" --sweep "$SWEEP" --seeds "$SEEDS" \
        --list-file "$sweep_list" "${sized[@]}" -- "${check_args[@]}" 2>&1) || status=$?
    if ((status == 2)); then
        while IFS= read -r line; do problem "$line"; done <<<"$said"
        return 0
    elif ((status != 0)); then
        problem "the sweep could not be checked ($check_py -m login.sweep: status $status): ${said##*$'\n'}"
        return 0
    fi
    while IFS= read -r line; do
        kind=${line%%:*} line=${line#*:}
        case $kind in
        array) array_spec=$line ;;
        element) sweep_elements+=("$line") ;;
        note) say "note: $line" ;;
        esac
    done <<<"$said"
}
trap '[[ -z $sweep_list ]] || rm -f "$sweep_list"' EXIT
if [[ $mode == sweep ]]; then
    if [[ -n $config_arg ]] && shape_ok ARGS && shape_ok SWEEP && shape_ok SEEDS && shape_ok MAX_PARALLEL &&
        ((${#PROBLEMS[@]} == 0)); then
        sweep_check
    fi
    [[ -n $array_spec ]] || plan_ready=0
fi

# MODE=predict: RUN and ARGS as every rank of the job would check them (login/launch.py: the overrides predict may
# change, the run's model.pt and its checkpoint's record of the model), once the run's config is valid.
predict_check() {
    local said status=0 line
    said=$(PYTHONPATH=${CODE_DIR:+$CODE_DIR:}$root "$check_py" -m login.launch --check-only predict --run-dir "$RUN" \
        "${predict_words[@]}" 2>&1) || status=$?
    if ((status == 2)); then
        while IFS= read -r line; do problem "MODE=predict RUN='$RUN' ARGS='$ARGS': ${line#error: }"; done <<<"$said"
    elif ((status != 0)); then
        say "note: MODE=predict was not checked here ($check_py -m login.launch: status $status): ${said##*$'\n'}"
    fi
}
if [[ $MODE == predict && -n $config_arg ]] && shape_ok ARGS && ((${#PROBLEMS[@]} == 0)); then
    predict_check
fi

# The user's code folder (CODE_DIR): it exists, and the model the config names imports from it and passes
# its contract where the job will run it (jobs/lib/code_dir.sh).
if shape_ok CODE_DIR && [[ -n $CODE_DIR ]]; then
    [[ ! -d $CODE_DIR ]] || CODE_DIR=$(cd "$CODE_DIR" && pwd) # pyxis mounts an absolute path
    found=${#PROBLEMS[@]}
    [[ -z $config_arg ]] || ! shape_ok ARGS ||
        code_dir_check "$root" "$image_kind" "$IMAGE" "$CODE_DIR" "$check_py" "$config_arg" "${check_args[@]}"
    ((${#PROBLEMS[@]} == found)) || plan_ready=0
elif ! shape_ok CODE_DIR; then
    plan_ready=0
fi

# Folders: the data folder is mounted (a container), so it must exist; the log folder must be creatable.
if shape_ok DATA_DIR && [[ -n $DATA_DIR ]]; then
    if [[ $image_kind != none && ! -d $DATA_DIR ]]; then
        problem "DATA_DIR='$DATA_DIR' is not a directory: it is mounted into the container at /data, so it must exist."
    else
        why=$(dir_problem DATA_DIR "$DATA_DIR")
        [[ -z $why ]] || problem "$why"
    fi
fi
if shape_ok LOG_DIR; then
    why=$(dir_problem LOG_DIR "$LOG_DIR")
    [[ -z $why ]] || problem "$why (SLURM writes the job's log there)"
fi
# A mount's source must exist on the nodes; where this login node does not have it, say so.
if shape_ok CONTAINER_MOUNTS && [[ -n $CONTAINER_MOUNTS && $image_kind != none ]]; then
    IFS=, read -r -a mounts <<<"$CONTAINER_MOUNTS"
    for mount in "${mounts[@]}"; do
        source_path=${mount%%:*}
        [[ $source_path != /* || -e $source_path ]] ||
            say "warning: CONTAINER_MOUNTS: '$source_path' does not exist on this host; pyxis refuses the job unless every node has it."
    done
fi

# ---- the cluster's real limits: a request no node can satisfy would pend forever -----------------
# Asked of the cluster itself, one sinfo call (jobs/lib/cluster.sh); where it cannot be asked, say what was not
# checked, once. Where no controller answers, a real submit stops here (sbatch would fail the same way).
# A GPU rank runs its main thread, the prefetch thread, NCCL's proxy thread and the pinning of batches: on the
# cluster's default of one CPU a task they take turns. Where CPUS_PER_TASK is empty, a GPU job takes the node's CPUs
# divided by its GPUs (sinfo); where sinfo cannot say, the dry run and the submit warn.
gpu_rank_cpus() {
    local share
    [[ -z $CPUS_PER_TASK ]] && ((GPUS_PER_TASK > 0)) || return 0
    share=$(cpus_per_gpu "$1" "$2")
    if [[ -n $share ]]; then
        CPUS_PER_TASK=$share
        say "note: CPUS_PER_TASK=$share for each GPU rank: the CPUs of a node of partition '$2' divided by its GPUs (sinfo); set CPUS_PER_TASK to choose."
    else
        cpu_warning
    fi
}
cpu_warning() {
    [[ -z $CPUS_PER_TASK ]] && ((GPUS_PER_TASK > 0)) || return 0
    say "warning: CPUS_PER_TASK is empty and the nodes' CPUs per GPU are not known here: each GPU rank gets the cluster's default (often one CPU) for its main thread, the prefetch thread, NCCL's proxy thread and pinning; set CPUS_PER_TASK (e.g. the node's CPUs / its GPUs)."
}
job_partition=$PARTITION # the partition the memory plan asks about: the default one, where sinfo names it
unreachable=             # sinfo's first error line, where no controller answers
if [[ $mode != srun ]] && ((nodes_ok)) && shape_ok CPUS_PER_TASK && shape_ok GPUS_PER_TASK && shape_ok PARTITION; then
    if ! command -v sinfo >/dev/null 2>&1; then
        say "note: sinfo is not on PATH: the partition, the node count, CPUs, GPUs and memory per node and the time limit were not checked against the cluster."
        cpu_warning
    elif ! cluster=$(ask_sinfo); then
        unreachable="no SLURM controller is reachable from this machine (sinfo: ${cluster:-no message})"
        if [[ -n $DRY_RUN ]]; then
            say "note: $unreachable; the request was not checked against the cluster."
            cpu_warning
        else
            problem "$unreachable; run make submit on a login node of the cluster (DRY_RUN=1 prints the command)."
        fi
    elif [[ -z $cluster ]]; then
        say "note: sinfo answered nothing: the request was not checked against the cluster's limits."
    else
        job_partition=$(cluster_partition "$cluster" "$PARTITION")
        # no default partition: sbatch itself will ask for one
        if [[ -n $job_partition ]] && check_partition "$cluster" "$job_partition"; then
            problems_before=${#PROBLEMS[@]}
            check_node_fit "$cluster" "$job_partition" "$NODES" "$GPUS" "$CPUS_PER_TASK" "$GPUS_PER_TASK"
            # once the GPUs fit, the node's CPUs / its GPUs fit too: at most as many tasks as GPUs a node
            ((${#PROBLEMS[@]} > problems_before)) || gpu_rank_cpus "$cluster" "$job_partition"
            ! shape_ok MEM || check_memory_fit "$cluster" "$job_partition" "$MEM"
            ! shape_ok TIME || check_time_fit "$cluster" "$job_partition" "$TIME"
        fi
    fi
fi

# ---- the memory plan: what a node, a rank and a GPU will hold, against what they have -----------
# `python -m train plan` (train/cli/plan.py), once the request is otherwise valid; its table is printed
# (stdout), and a plan that cannot fit is refused with its numbers. It needs torch and PyG here. Its figures
# (a rank's peak, a node's memory) go to the job as PYG_MEMORY_PLAN: the job names them if a rank is killed,
# and data.features=auto weighs that node memory as the plan did (train/cluster/memory_limit.py).
memory_plan_figures=
memory_plan() {
    local err status=0 figures
    local -a plan_args=(--config "$config_arg" --nodes "$NODES" --gpus "$GPUS")
    ((GPUS_PER_TASK > 0)) || plan_args+=(--cpu)
    [[ -z $job_partition ]] || plan_args+=(--partition "$job_partition")
    [[ -z $GPU_MEMORY ]] || plan_args+=(--gpu-memory "$(memory_gib "$GPU_MEMORY")")
    [[ -z $unreachable ]] || plan_args+=(--node-memory-unknown "sinfo could not answer, see above")
    # MEM: what the job's cgroup will hold it to, weighed as the run weighs it (data.features=auto)
    [[ -z $MEM ]] || ! shape_ok MEM || plan_args+=(--mem-mb "$(memory_mb "$MEM")")
    [[ $mode != sweep ]] || plan_args+=(--sweep-file "$sweep_list") # each element's plan; the largest decides
    [[ $MODE != predict ]] ||
        say "note: MODE=predict: the memory plan is the run's training plan (its exact evaluation's pass, and a training batch predict does not hold): a bound from above."
    if ! "$check_py" -c 'import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, sys.argv[1:])))' \
        torch torch_geometric yaml >/dev/null 2>&1; then
        say "note: $check_py cannot import torch and torch_geometric: the memory plan was not made ('make setup' builds .venv)."
        return 0
    fi
    figures=$(mktemp)
    plan_args+=(--figures-file "$figures")
    { err=$(PYTHONPATH=${CODE_DIR:+$CODE_DIR:}$root "$check_py" -m train plan "${plan_args[@]}" -- "${check_args[@]}" 2>&1 >&3 3>&-) ||
        status=$?; } 3>&1
    memory_plan_figures=$(<"$figures")
    rm -f "$figures"
    if ((status == 2 && data_missing)) && [[ $err != "error: this plan does not fit"* ]]; then # it read the missing
        # files (your own graph's): one message, below
        say "note: no memory plan: it reads the dataset's files, which are not there (see below)."
    elif ((status == 2)); then
        local swept=''
        [[ $mode != sweep ]] || swept=" SWEEP='$SWEEP' SEEDS=$SEEDS"
        problem "memory plan for CONFIG='$CONFIG' ARGS='$ARGS'$swept NODES=$NODES GPUS=$GPUS: ${err#error: }"
    elif ((status != 0)); then
        say "note: the memory plan failed (status $status), so it was not checked: ${err##*$'\n'}"
    fi
}
# A real submit that another check refused makes none (a dataset not prepared aside): it says what to fix first.
[[ -n $DRY_RUN ]] || ((${#PROBLEMS[@]} == data_missing)) || plan_ready=0
[[ $mode == srun ]] || ((!plan_ready)) || ! shape_ok GPUS_PER_TASK || ! shape_ok PARTITION || memory_plan

report_problems "$([[ $mode == srun ]] || echo 'nothing was submitted.')"

# ---- paths, as the job sees them ----------------------------------------------------------------
if [[ $image_kind == file && -e $IMAGE ]]; then
    IMAGE=$(cd "$(dirname "$IMAGE")" && pwd)/$(basename "$IMAGE")
else
    IMAGE=$(image_path "$IMAGE" "$root")
fi
if [[ -z $DATA_DIR ]]; then
    DATA_DIR=$root/data
    [[ $image_kind == none || -n $DRY_RUN || $mode == srun ]] || mkdir -p "$DATA_DIR" # a mount source must exist
elif [[ -d $DATA_DIR ]]; then
    DATA_DIR=$(cd "$DATA_DIR" && pwd)
else
    [[ $DATA_DIR == /* ]] || DATA_DIR=$root/$DATA_DIR
fi
[[ $LOG_DIR == /* ]] || LOG_DIR=$root/$LOG_DIR
PROJECT_DIR=$root
CONFIG=$config_arg
((${#job_args[@]} == 0)) || ARGS="${ARGS:+$ARGS }${job_args[*]}" # the config's paths as the container sees them

# ---- the request as SLURM options -------------------------------------------------------------
# Each setting whose row (jobs/knobs.md) names an sbatch option, as that option; then what several settings
# decide together.
gpu_options "$GPUS_PER_TASK"
sbatch_options resources
resources+=(--ntasks-per-node="$per_node" "${GPU_OPTIONS[@]}")

# ---- the job-start install: its wheels are prepared here, on the login node ------------------
prepare_wheels() {
    [[ $(installs_at_start "$INSTALL_PROJECT" "$image_kind") == 1 ]] || return 0
    if [[ -n $DRY_RUN ]]; then
        echo "# First, on this login node: the wheels the job-start install reads (compute nodes need no index):"
    else
        say "preparing the wheels the job-start install reads (compute nodes need no index): .wheels/"
    fi
    run bash "$root/container/wheelhouse.sh" "$root/.wheels"
}

# print_steps: the job's steps, each a line that says what it is (as `# ...`, on stderr for make srun)
# and its command line.
print_steps() {
    local to=1
    [[ $mode != srun ]] || to=2
    if ((${#INSTALL_STEP[@]})); then
        echo "# install the project into the image, one task per node, into a named container the next steps reuse (INSTALL_PROJECT=$INSTALL_PROJECT):" >&"$to"
        quote "${INSTALL_STEP[@]}"
    fi
    if ((${#DOCTOR_STEP[@]})); then
        echo "# the doctor, on every task (DOCTOR=$DOCTOR):" >&"$to"
        quote "${DOCTOR_STEP[@]}"
    fi
    if ((${#TRAIN_STEP[@]})) && [[ $MODE == predict ]]; then
        echo "# predict: every node's rows of RUN=$RUN, on every task (python -m train predict; a preempted predict reruns from the start):" >&"$to"
        quote "${TRAIN_STEP[@]}"
    elif ((${#TRAIN_STEP[@]})); then
        echo "# training, on every task:" >&"$to"
        quote "${TRAIN_STEP[@]}"
    fi
}

# ---- make srun: the direct lines for an interactive allocation ---------------------------------
if [[ $mode == srun ]]; then
    # the allocation's options on the step; the CPUs and GPUs per task the steps pass on themselves
    # (the job's name belongs to sbatch, and names the log)
    sbatch_options STEP_ALLOCATION CPUS_PER_TASK JOB_NAME
    STEP_ALLOCATION+=(--ntasks-per-node="$per_node")
    [[ $image_kind != none ]] || STEP_ALLOCATION+=(--chdir="$root")
    prepare_wheels >&2
    job_steps "$NODES" "$CPUS_PER_TASK" ""
    say "inside an allocation (salloc ${resources[*]}), or from a login node when there is no install step, run:"
    print_steps
    exit 0
fi

# ---- make submit ------------------------------------------------------------------------------
read -r -a sbatch_extra <<<"$SBATCH_ARGS"
# Unique to this submission and kept by every requeue of it (the job's saved environment): its run
# directory records it, so another job with the same id never resumes it (train/loop/rundir.py).
submission=$(date -u +%Y%m%dT%H%M%SZ)-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
output=$LOG_DIR/%x-%j.log
array=()
if [[ $mode == sweep ]]; then # one array: an element per line of the list file, its log %A_%a (jobs/train.sbatch)
    output=$LOG_DIR/%x-%A_%a.log
    array=(--array="$array_spec")
fi
sbatch_cmd=(sbatch --parsable --export=ALL --chdir="$root" --output="$output" "${array[@]}"
    "${resources[@]}" "${sbatch_extra[@]}" "$script")
# The settings of jobs/train.sbatch (the rows whose job column says yes) travel in the environment:
# --export=ALL (as the seed), also where a site sets SBATCH_EXPORT=NONE.
job_env=(PROJECT_DIR="$root" PYG_SUBMISSION_ID="$submission")
# a sweep's list file, beside the logs: each element reads its line (jobs/train.sbatch), make report the whole
sweep_file=$LOG_DIR/sweep-$submission.list
[[ $mode != sweep ]] || job_env+=(PYG_SWEEP_FILE="$sweep_file")
[[ -z $memory_plan_figures ]] || job_env+=(PYG_MEMORY_PLAN="$memory_plan_figures") # train/cli/killed.py reads it
while read -r name; do job_env+=("$name=${!name}"); done < <(knobs_to_job)

if [[ -n $DRY_RUN ]]; then
    echo "# DRY_RUN=1: nothing submitted."
    prepare_wheels
    echo "# The sbatch command:"
    quote env "${job_env[@]}" "${sbatch_cmd[@]}"
    echo "# The job's steps, as ${script#"$root"/} will run them (JOBID: the id sbatch gives the job):"
    job_steps "$NODES" "$CPUS_PER_TASK" JOBID
    print_steps
    if [[ $mode == sweep ]]; then
        echo "# The sweep: ${#sweep_elements[@]} elements, one job array (--array=$array_spec); each element adds its line of $sweep_file to ARGS, and output.dir=runs/ARRAYID_INDEX (its log: $LOG_DIR/$JOB_NAME-ARRAYID_INDEX.log):"
        printf '%s\n' "${sweep_elements[@]}"
    fi
    echo "# The job script: $script (each step's line is also printed in the job's log)"
    if [[ $MODE == predict ]]; then # no checkpoint: its rows are written again, the same (docs/predict.md)
        echo "# MODE=predict: a preemption (SLURM requeues the job) reruns predict from the start and writes the same rows again; the time limit (TIME) ends it before its manifest.json, which is written last (a folder without one is incomplete): give it the time of one pass."
        exit 0
    fi
    max_restarts=$(PYTHONPATH=$root "$check_py" -m login.config_check --value trainer.max_restarts "$CONFIG" \
        "${args[@]}" 2>/dev/null) || max_restarts=
    job_promises "$script" "$SBATCH_ARGS" "$TIME" "$max_restarts"
    exit 0
fi

command -v sbatch >/dev/null 2>&1 || refuse "sbatch is not on PATH: run this on a SLURM login node (or use DRY_RUN=1 to see the command); nothing was submitted."
prepare_wheels
mkdir -p "$LOG_DIR" # SLURM does not create the output folder: without it the log is lost
if [[ $mode == sweep ]]; then
    mv -- "$sweep_list" "$sweep_file"
    sweep_list=
fi
if ! reply=$(env "${job_env[@]}" "${sbatch_cmd[@]}"); then
    error "sbatch refused the job (its message is above); the command was:"
    quote "${sbatch_cmd[@]}" >&2
    exit 1
fi
job_id=${reply%%;*}
[[ $job_id =~ ^[0-9]+$ ]] || die "sbatch printed $(printf %q "$reply"), not a job id"
if [[ $mode == sweep ]]; then
    # make report SWEEP=<array id> finds the list by the array's id (train/sweep.py list_link)
    ln -sfn -- "${sweep_file##*/}" "$LOG_DIR/sweep-$job_id.list"
    log=$LOG_DIR/$JOB_NAME-${job_id}_0.log
    printf '%s\n' "$(cd "$LOG_DIR" && pwd)/${log##*/}" >"$LOG_DIR/.last-submitted" # make logs: the first element
    echo "Submitted sweep $job_id: ${#sweep_elements[@]} elements (--array=$array_spec), each on $NODES node(s) with $GPUS task(s), config $CONFIG, image $IMAGE"
    echo "logs:   $LOG_DIR/$JOB_NAME-${job_id}_INDEX.log (INDEX 0 to $((${#sweep_elements[@]} - 1)))"
    echo "runs:   runs/${job_id}_INDEX"
    report_log_dir= # make report reads LOG_DIR too: named where it is not the default
    [[ $LOG_DIR == "$root/${KNOB_DEFAULT[LOG_DIR]}" ]] || report_log_dir=" LOG_DIR=$(quote "$LOG_DIR")"
    echo "report: make report SWEEP=$job_id$report_log_dir"
    echo "status: squeue -j $job_id    cancel: scancel $job_id"
    exit 0
fi
log=$LOG_DIR/$JOB_NAME-$job_id.log
# make logs / make tail follow this job, even while it is pending and has no log yet (jobs/lib/latest_log.sh)
printf '%s\n' "$(cd "$LOG_DIR" && pwd)/${log##*/}" >"$LOG_DIR/.last-submitted"
echo "Submitted job $job_id ($NODES nodes, $GPUS tasks, $per_node per node, config $CONFIG, image $IMAGE)"
echo "log:    $log"
echo "follow: tail -f $(quote "$log")"
echo "status: squeue -j $job_id    cancel: scancel $job_id"
