# shellcheck shell=bash
# The job's decisions and its steps, in one place: jobs/train.sbatch runs the steps, `make submit
# DRY_RUN=1` prints them and `make srun` prints them for an interactive allocation (jobs/submit.sh).
#
#   source "$root/lib/checks.sh"; source "$root/jobs/lib/steps.sh"     (steps.sh sources jobs/lib/pyxis.sh)
#   (the image's kind, path and job-start install: lib/image.sh, which lib/checks.sh sources)
#   gpu_options GPUS_PER_TASK              fills GPU_OPTIONS: the options of one GPU per task
#   runs_doctor DOCTOR / trains DOCTOR      whether the job has a doctor step / a training step
#   job_steps NODES CPUS_PER_TASK JOB_ID   fills INSTALL_STEP, DOCTOR_STEP and TRAIN_STEP
#
# job_steps reads the settings that travel to the job (jobs/knobs.md; IMAGE resolved by image_path, DATA_DIR and
# CODE_DIR absolute, on the host), PROJECT_DIR, and STEP_ALLOCATION (srun options that ask for the allocation,
# for `make srun`; empty in a job). Each step is a whole command line, `env NAME=VALUE... srun ...`, empty when the step does not run:
#   INSTALL_STEP  one task per node installs the project into a named container (container/install-project.sh,
#                 offline, from the wheels make submit prepared in PROJECT_DIR/.wheels)
#   DOCTOR_STEP   `python -m train doctor` on every task (DOCTOR=1 or only), the training step's options
#   TRAIN_STEP    `python -m train fit` on every task (not with DOCTOR=only); with MODE=predict, `python -m train
#                 predict --run-dir RUN` (every node's rows of the run RUN) instead

# shellcheck source=jobs/lib/pyxis.sh
source "$(dirname "${BASH_SOURCE[0]}")/pyxis.sh"
# shellcheck source=jobs/lib/code_dir.sh
source "$(dirname "${BASH_SOURCE[0]}")/code_dir.sh"

# shellcheck disable=SC2034 # read by the scripts that source this file
INSTALL_STEP=() DOCTOR_STEP=() TRAIN_STEP=() GPU_OPTIONS=() STEP_ALLOCATION=()

# InfiniBand into the container: enroot's hooks/99-mellanox.sh mounts the node's HCAs (/dev/infiniband) and the
# host's MOFED libraries only when MELLANOX_VISIBLE_DEVICES is set in the container. Without them NCCL's IB transport
# finds no device and falls back to TCP sockets between nodes, ten times slower or worse. Where the node running the
# job script has HCAs, the steps set it (all: NCCL picks each GPU's HCA by topology; NCCL_IB_HCA narrows it; a value
# the job was given is kept). INFINIBAND_DEVICES: where the HCAs' device files are (a test points it elsewhere).
INFINIBAND_DEVICES=${INFINIBAND_DEVICES:-/dev/infiniband}
hca_env() {
    [[ ! -d $INFINIBAND_DEVICES ]] || printf 'MELLANOX_VISIBLE_DEVICES=%s\n' "${MELLANOX_VISIBLE_DEVICES:-all}"
}

# runs_doctor DOCTOR, trains DOCTOR: whether the job has a doctor step (DOCTOR=1 or only) and a training step.
runs_doctor() { [[ $1 != 0 ]]; }
trains() { [[ $1 != only ]]; }

# Every task sees all GPUs of its node and uses cuda:LOCAL_RANK: the default binding would hide the others,
# and cuda:1.. would fail (SLURM >= 24.05 may also want --tres-bind=gres/gpu:none, in SRUN_ARGS).
gpu_options() {
    GPU_OPTIONS=()
    [[ $1 == 0 ]] || GPU_OPTIONS=(--gpus-per-task="$1" --gpu-bind=none)
}

# SC2034: the steps are read by the scripts that source this file; SC2153: the knobs are theirs (knobs.sh)
# shellcheck disable=SC2034,SC2153
job_steps() {
    local nodes=$1 cpus=$2 job_id=$3 kind install container_name='' env_names
    local -a args srun_extra run_env options
    read -r -a args <<<"$ARGS"
    read -r -a srun_extra <<<"$SRUN_ARGS"
    kind=$(image_kind "$IMAGE")
    install=$(installs_at_start "$INSTALL_PROJECT" "$kind")
    INSTALL_STEP=() DOCTOR_STEP=() TRAIN_STEP=()

    # OMP_NUM_THREADS: one thread per CPU the task was given, not one per core of the node.
    if [[ $kind == none ]]; then # bare mode: the host's interpreter, in the project
        local pythonpath=$PROJECT_DIR${PYTHONPATH:+:$PYTHONPATH}
        [[ :${PYTHONPATH:-}: != *:"$PROJECT_DIR":* ]] || pythonpath=$PYTHONPATH
        run_env=(DATA_DIR="$DATA_DIR" OMP_NUM_THREADS="${OMP_NUM_THREADS:-${cpus:-1}}" PYTHONPATH="$pythonpath")
        launch_line none "$PROJECT_DIR" "$DATA_DIR" "" "" "" "$BARE_PYTHON"
        code_dir_launch "$CODE_DIR"
    else
        if [[ $install == 1 ]]; then # into a named container, which the later steps reuse
            container_name=pyg-train${job_id:+-$job_id}
            pyxis_flags "$IMAGE" "$PROJECT_DIR" "$DATA_DIR" "$CONTAINER_MOUNTS" "$container_name" WHEELS,OFFLINE
            INSTALL_STEP=(env WHEELS=/workspace/.wheels OFFLINE=1 srun --kill-on-bad-exit=1 --nodes="$nodes"
                --ntasks="$nodes" --ntasks-per-node=1 "${PYXIS[@]}" --container-remap-root --container-writable
                sh /workspace/container/install-project.sh /workspace)
        fi
        # The image's root filesystem is read-only: matplotlib's config folder goes to the container's /tmp.
        # What the job sets wins over the image's values (--container-env); DATA_DIR as the tasks see it.
        run_env=(DATA_DIR=/data OMP_NUM_THREADS="${OMP_NUM_THREADS:-${cpus:-1}}"
            MPLCONFIGDIR="${MPLCONFIGDIR:-/tmp/matplotlib}")
        local hca
        hca=$(hca_env)
        [[ -z $hca ]] || run_env+=("$hca")
        env_names=$(printf '%s,' "${run_env[@]%%=*}")
        launch_line "$IMAGE" "$PROJECT_DIR" "$DATA_DIR" "$CONTAINER_MOUNTS" "$container_name" "${env_names%,}"
        code_dir_launch "$CODE_DIR"
    fi

    # --kill-on-bad-exit: one failed rank ends the step (and the job) instead of leaving the others blocked
    # in a collective; --label prefixes every line with its rank; srun >= 22.05 does not inherit
    # --cpus-per-task from sbatch, so it is passed on.
    gpu_options "$GPUS_PER_TASK"
    options=(--kill-on-bad-exit=1 --label "${STEP_ALLOCATION[@]}")
    [[ -z $cpus ]] || options+=(--cpus-per-task="$cpus")
    options+=("${GPU_OPTIONS[@]}" "${srun_extra[@]}")
    if runs_doctor "$DOCTOR"; then
        DOCTOR_STEP=(env "${run_env[@]}" srun "${options[@]}" "${LAUNCH[@]}" -m train doctor --config "$CONFIG"
            --timeout "$DOCTOR_TIMEOUT" "${args[@]}")
    fi
    if trains "$DOCTOR" && [[ $MODE == predict ]]; then
        TRAIN_STEP=(env "${run_env[@]}" srun "${options[@]}" "${LAUNCH[@]}" -m train predict --run-dir "$RUN" "${args[@]}")
    elif trains "$DOCTOR"; then
        TRAIN_STEP=(env "${run_env[@]}" srun "${options[@]}" "${LAUNCH[@]}" -m train fit --config "$CONFIG" "${args[@]}")
    fi
}
