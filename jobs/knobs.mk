# The job's knobs: the one home of each default and its one line of documentation.
# Read by make (Makefile includes it; `make help` prints each knob with its line), by jobs/submit.sh and
# by jobs/train.sbatch (jobs/lib/knobs.sh: a knob that is unset or empty gets its default).
# Form: a `# ` documentation line, then `NAME ?= default`. A default is one word or nothing, and may name
# another knob as $(NAME), or $(PYG_TAG): the tag of container/Dockerfile's `ARG PYG_TAG=` line.

# nodes of the job
NODES ?= 1
# GPUs in total, one task (rank) each, GPUS/NODES per node; with GPUS_PER_TASK=0 the number of CPU tasks
GPUS ?= 1
# a shipped config (train/configs/NAME.yaml) or a YAML path inside the project
CONFIG ?= synthetic
# config overrides, whitespace-separated: 'trainer.epochs=5 optim.lr=0.01'
ARGS ?=
# where `make image` writes the image
IMAGE_DIR ?= images
# the image the job runs in: a .sqsh path, a registry image (nvcr.io#nvidia/pyg:TAG), or none (the host's Python)
IMAGE ?= $(IMAGE_DIR)/pyg-train-$(PYG_TAG).sqsh
# 1: each task drives one GPU; 0: a CPU-only cluster (no GPU options, gloo)
GPUS_PER_TASK ?= 1
# CPUs per task; empty: the cluster's default (one), not a number a small node may never have
CPUS_PER_TASK ?=
# memory per node (sbatch --mem, e.g. 64G); empty: the cluster's default
MEM ?=
# time limit (sbatch --time: minutes, HH:MM:SS, D-HH:MM:SS); empty: the partition's default
TIME ?=
# partition (sbatch --partition); empty: the cluster's default partition
PARTITION ?=
# account to charge (sbatch --account)
ACCOUNT ?=
# quality of service (sbatch --qos)
QOS ?=
# extra sbatch options, whitespace-separated
SBATCH_ARGS ?=
# extra srun options of the job's steps, whitespace-separated
SRUN_ARGS ?=
# the datasets folder, mounted at /data in the image; empty: data/ in the project
DATA_DIR ?=
# where the job's log goes (LOG_DIR/JOB_NAME-JOBID.log), relative to the project or absolute
LOG_DIR ?= logs
# the job's name in squeue and its log's name
JOB_NAME ?= pyg-train
# extra pyxis mounts SRC:DST[,SRC:DST...], after the project (/workspace) and DATA_DIR (/data)
CONTAINER_MOUNTS ?=
# your own code (model.name=package.module:ClassName): a folder mounted at /code and put on PYTHONPATH on every task
CODE_DIR ?=
# install the project into the image at job start: auto (a registry image yes, a .sqsh no), 1 or 0
INSTALL_PROJECT ?= auto
# IMAGE=none only: the interpreter; empty: the project's .venv/bin/python, else python3
BARE_PYTHON ?=
# 1: run `python -m train doctor` on every task before training; only: the doctor alone; 0: no doctor
DOCTOR ?= 0
# the doctor's bound on rendezvous, in seconds
DOCTOR_TIMEOUT ?= 120
