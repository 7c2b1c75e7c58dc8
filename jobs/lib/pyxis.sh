# shellcheck shell=bash
# The launch line of every step that runs in the image (jobs/train.sbatch, `make srun` in jobs/submit.sh,
# container/data.sh): pyxis's srun flags and the interpreter, built in one place.
#
#   source "$root/lib/cmd.sh"; source "$root/jobs/lib/pyxis.sh"      (lib/cmd.sh: host_python)
#   launch_line IMAGE PROJECT_DIR DATA_DIR [EXTRA_MOUNTS [CONTAINER_NAME [ENV_NAMES [BARE_PYTHON]]]]
#   srun ... "${LAUNCH[@]}" -m train fit ...       (pyxis_flags alone: a step that runs another program)
#
# IMAGE=none: LAUNCH is the host's interpreter alone (BARE_PYTHON, else PROJECT_DIR/.venv/bin/python,
# else python3). Otherwise LAUNCH is the pyxis flags and the image's `python`:
#   --container-image=IMAGE             a .sqsh path (absolute or ./: pyxis reads a path only then) or a
#                                       registry image (nvcr.io#nvidia/pyg:TAG)
#   --container-mounts=PROJECT_DIR:/workspace,DATA_DIR:/data[,EXTRA_MOUNTS]
#   --container-workdir=/workspace      the project, as the job runs it
#   --no-container-mount-home           keeps ~/.local packages and rc files out of the container
#   --container-name=CONTAINER_NAME     a named container (kept for the job's later steps), if given
#   --container-env=ENV_NAMES           these variables come from the job, not the image, if given
# Pyxis facts this relies on: container flags go on the srun line (an image in #SBATCH would run the
# whole batch script in the container, where srun is missing); the container's environment wins over
# the host's unless a name is listed in --container-env.

# shellcheck disable=SC2034 # read by the scripts that source this file
PYXIS=() LAUNCH=()
# shellcheck source=lib/image.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../lib/image.sh" # image_kind

# pyxis_flags IMAGE PROJECT_DIR DATA_DIR [EXTRA_MOUNTS [CONTAINER_NAME [ENV_NAMES]]]: fills PYXIS.
pyxis_flags() {
    local image=$1 project=$2 data=$3 mounts=${4:-} name=${5:-} env_names=${6:-}
    PYXIS=(--container-image="$image" --container-mounts="$project:/workspace,$data:/data${mounts:+,$mounts}"
        --container-workdir=/workspace --no-container-mount-home)
    [[ -z $name ]] || PYXIS+=(--container-name="$name")
    [[ -z $env_names ]] || PYXIS+=(--container-env="$env_names")
}

# launch_line IMAGE PROJECT_DIR DATA_DIR [EXTRA_MOUNTS [CONTAINER_NAME [ENV_NAMES [BARE_PYTHON]]]]: fills
# LAUNCH with what follows srun's own options: the pyxis flags and `python`, or the host's interpreter.
launch_line() {
    if [[ $(image_kind "$1") == none ]]; then
        LAUNCH=("$(host_python "$2" "${7:-}")")
    else
        pyxis_flags "$@"
        LAUNCH=("${PYXIS[@]}" python)
    fi
}
