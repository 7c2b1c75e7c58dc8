# shellcheck shell=bash
# The job's promises, as `make submit DRY_RUN=1` prints them: the signal SLURM sends before the time limit and
# its lead time, the time limit, and what happens at each (checkpoint, requeue, the trainer.max_restarts left).
# Each fact is read where it lives: the job script's #SBATCH lines and SBATCH_ARGS after them (as sbatch reads
# them: the command line wins), TIME, and trainer.max_restarts as the package resolves CONFIG and ARGS.
#
#   sbatch_options_of SCRIPT SBATCH_ARGS      the sbatch options the job gets, one a line, in sbatch's order
#   last_option NAME < OPTIONS                the value of the last --NAME=V or --NAME V; status 1 when none
#   warning_spec SPEC                         "SIGNAL LEAD TARGET" of a --signal value [{R|B}:]SIG[@SECONDS]
#   requeues < OPTIONS                        yes, no or default: whether the job may be requeued
#   job_promises SCRIPT SBATCH_ARGS TIME MAX_RESTARTS
#                                             the lines, each starting with "# " (MAX_RESTARTS "": not known)
# The words of what the ranks do at a stop signal follow train/loop/stop_signals.py (its stop_outcome) and
# jobs/train.sbatch (the requeue); docs/preemption.md tells it at length.

# The #SBATCH lines sbatch reads: those before the script's first command.
sbatch_options_of() {
    local line
    local -a words
    while IFS= read -r line; do
        [[ $line =~ ^[[:space:]]*(#|$) ]] || break
        [[ $line =~ ^#SBATCH[[:space:]]+(.*)$ ]] || continue
        read -r -a words <<<"${BASH_REMATCH[1]}"
        printf '%s\n' "${words[@]}"
    done <"$1"
    read -r -a words <<<"$2"
    ((${#words[@]} == 0)) || printf '%s\n' "${words[@]}"
}

last_option() {
    local name=$1 word found=0 value='' take=0
    while IFS= read -r word; do
        if ((take)); then
            value=$word take=0
        elif [[ $word == "--$name="* ]]; then
            value=${word#*=} found=1
        elif [[ $word == "--$name" ]]; then
            found=1 take=1
        fi
    done
    ((found)) && printf '%s\n' "$value"
}

warning_spec() {
    local spec=$1 target='' sig lead=60 # sbatch: the lead time defaults to 60 seconds
    if [[ $spec =~ ^([RB]+):(.*)$ ]]; then
        target=${BASH_REMATCH[1]} spec=${BASH_REMATCH[2]}
    fi
    sig=${spec%%@*}
    [[ $spec != *@* ]] || lead=${spec#*@}
    [[ $sig =~ ^[0-9]+$ ]] && sig=$(kill -l "$sig" 2>/dev/null || echo "$sig")
    printf '%s %s %s\n' "SIG${sig#SIG}" "$lead" "${target:--}"
}

# requeues < OPTIONS: yes or no as the last of --requeue and --no-requeue says; the cluster's default (JobRequeue)
# where neither is given.
requeues() {
    local word said=default
    while IFS= read -r word; do
        case $word in
        --requeue) said=yes ;;
        --no-requeue) said=no ;;
        esac
    done
    printf '%s\n' "$said"
}

# after_checkpoint REQUEUE MAX_RESTARTS: what follows the warning's checkpoint (train/loop/stop_signals.py's
# stop_outcome: a requeue while the restarts are fewer than trainer.max_restarts, then a stop).
after_checkpoint() {
    local requeue=$1 max_restarts=$2
    if [[ $requeue == no ]]; then
        echo "the job ends there (--no-requeue): resubmit with output.dir=runs/JOBID to resume"
    elif [[ -z $max_restarts ]]; then
        echo "the job requeues itself and resumes from it, up to trainer.max_restarts times (not read here: this Python cannot load the config)"
    elif ((max_restarts == 0)); then
        echo "the job ends there (trainer.max_restarts=0: no requeue): resubmit with output.dir=runs/JOBID to resume"
    else
        echo "the job requeues itself and resumes from it, up to trainer.max_restarts=$max_restarts times ($max_restarts left: a new job has not restarted yet); after that it ends there and says how to resubmit"
    fi
}

job_promises() {
    local script=$1 sbatch_args=$2 time=$3 max_restarts=$4 options spec sig lead='' target limit=-1 when=''
    options=$(sbatch_options_of "$script" "$sbatch_args")
    [[ -z $time ]] || limit=$(time_seconds "$time")
    echo "# The job's promises (jobs/train.sbatch's sbatch options, SBATCH_ARGS, TIME, trainer.max_restarts):"
    if spec=$(last_option signal <<<"$options"); then
        read -r sig lead target <<<"$(warning_spec "$spec")"
        ((limit < 0 || limit <= lead)) || when=", after $((limit - lead)) s of $limit"
        echo "#   the warning: $sig $lead s before the time limit$when (--signal=$spec): the ranks stop after the step they are in, rank 0 writes a checkpoint, and $(after_checkpoint "$(requeues <<<"$options")" "$max_restarts")"
        [[ $target == *B* ]] ||
            echo "#   note: --signal=$spec has no B: prefix, so SLURM sends $sig to the step's processes, not to the batch script that turns it into a stop request (docs/preemption.md)"
        ((limit < 0 || limit > lead)) ||
            echo "#   note: TIME=$time ($limit s) is not longer than the warning's lead of $lead s: the warning comes as the job starts"
    else
        echo "#   no warning before the time limit (no --signal): only the scheduled checkpoints (trainer.checkpoint_every) are there to resume from"
    fi
    if [[ -z $time ]]; then
        echo "#   the time limit: the partition's default (TIME is empty)"
    elif ((limit < 0)); then
        echo "#   the time limit: none (TIME=$time)"
    else
        echo "#   the time limit: TIME=$time ($limit s)"
    fi
    echo "#   at the time limit: SLURM sends SIGTERM, then SIGKILL after its KillWait; a run still going checkpoints on SIGTERM where it can and is not requeued: resubmit with output.dir=runs/JOBID (trainer.resume=auto continues from the newest checkpoint)"
}
