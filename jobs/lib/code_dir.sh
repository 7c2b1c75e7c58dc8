# shellcheck shell=bash
# CODE_DIR: the user's own code (model.name=package.module:ClassName) on every task of every step, without
# rebuilding the image.
#
#   source "$root/jobs/lib/code_dir.sh"
#   code_dir_launch CODE_DIR     after launch_line (jobs/lib/pyxis.sh): LAUNCH's python runs with CODE_DIR
#                                first on PYTHONPATH
#   code_dir_check ROOT IMAGE_KIND IMAGE CODE_DIR PYTHON CONFIG [ARG...]
#                                make submit's check; calls `problem` (lib/checks.sh) and `say` (lib/msg.sh)
#
# In the image the folder is mounted at CODE_MOUNT (pyxis --container-mounts, as the project is at
# /workspace) and a shell inside the container puts it in front of the image's own PYTHONPATH, which stays;
# on the host (IMAGE=none) the folder itself goes in front. Python then imports the user's package on every
# rank as it imports anything; `python -m train model` (train/cli/model.py) is the check.

CODE_MOUNT=/code

# code_dir_launch CODE_DIR: in LAUNCH, mount CODE_DIR (an image) and run python with it on PYTHONPATH.
code_dir_launch() {
    local code=$1 i python script
    [[ -n $code ]] || return 0
    if [[ ${LAUNCH[0]} == --container-image=* ]]; then
        for i in "${!LAUNCH[@]}"; do
            [[ ${LAUNCH[i]} != --container-mounts=* ]] || LAUNCH[i]+=",$code:$CODE_MOUNT"
        done
        code=$CODE_MOUNT
    fi
    python=${LAUNCH[-1]}
    unset 'LAUNCH[-1]'
    # shellcheck disable=SC2016 # expanded by the shell in the task, where PYTHONPATH is the image's
    printf -v script 'PYTHONPATH=%q${PYTHONPATH:+:$PYTHONPATH} exec "$0" "$@"' "$code"
    LAUNCH+=(sh -c "$script" "$python")
}

# code_dir_check ROOT IMAGE_KIND IMAGE CODE_DIR PYTHON CONFIG [ARG...]: CODE_DIR must be a folder, and the
# model the config names must import from it and pass its contract where the job runs it: in the image
# (a .sqsh, with `enroot start` where enroot is at hand), else with PYTHON here, saying what was not checked.
code_dir_check() {
    local root=$1 kind=$2 image=$3 code=$4 python=$5 config=$6 out status=0
    shift 6
    if [[ ! -d $code ]]; then
        problem "CODE_DIR='$code' is not a directory: it is the folder of your own code (model.name=package.module:ClassName), mounted into the container at $CODE_MOUNT and put on PYTHONPATH."
        return 0
    fi
    local -a check=(-m train model --config "$config" "$@")
    if [[ $kind == file && -f $image ]] && command -v enroot >/dev/null 2>&1; then
        # shellcheck disable=SC2016 # expanded inside the container
        out=$(timeout 600 enroot start --mount "$root:/workspace:none:x-create=dir,rbind" \
            --mount "$code:$CODE_MOUNT:none:x-create=dir,rbind" "$image" \
            sh -c 'cd /workspace && PYTHONPATH=$0${PYTHONPATH:+:$PYTHONPATH} exec python "$@"' "$CODE_MOUNT" \
            "${check[@]}" 2>&1) || status=$?
        if ((status == 0)); then
            return 0
        elif ((status == 2)); then
            problem "CODE_DIR='$code' in IMAGE='$image': ${out##*error: }"
            return 0
        fi
        say "note: could not start $image here to check model.name in it (enroot: ${out##*$'\n'}); checking with $python instead."
    elif [[ $kind != none ]]; then
        say "note: model.name and CODE_DIR are checked with $python on this machine, not in IMAGE='$image' (a registry image, or no enroot here)."
    fi
    status=0
    out=$(cd "$root" && PYTHONPATH=$code:$root "$python" "${check[@]}" 2>&1) || status=$?
    if ((status == 2)); then
        problem "CODE_DIR='$code': ${out##*error: }"
    elif ((status != 0)); then
        say "note: $python could not check model.name (status $status): ${out##*$'\n'}"
    fi
}
