# `make submit` / `make srun`: the multi-node job (jobs/train.sbatch), checked by jobs/submit.sh.
# GPUS is the number of GPUs in total, one task (rank) each, GPUS/NODES per node.
# IMAGE and DRY_RUN come from mk/image.mk (IMAGE: the .sqsh `make image` writes; empty or
# undefined means none); IMAGE=none runs on the host's Python (bare mode).
NODES ?= 1
GPUS ?= 1
GPUS_PER_TASK ?= 1
CPUS_PER_TASK ?=
MEM ?=
TIME ?=
PARTITION ?=
ACCOUNT ?=
QOS ?=
SBATCH_ARGS ?=
SRUN_ARGS ?=
DATA_DIR ?=
LOG_DIR ?= logs
JOB_NAME ?= pyg-train

# Every knob reaches jobs/submit.sh as an environment variable (Makefile: export_for).
JOBS_VARS = NODES GPUS CONFIG ARGS IMAGE GPUS_PER_TASK CPUS_PER_TASK MEM TIME PARTITION ACCOUNT QOS SBATCH_ARGS \
	SRUN_ARGS DATA_DIR LOG_DIR JOB_NAME CONTAINER_MOUNTS INSTALL_PROJECT BARE_PYTHON DOCTOR DOCTOR_TIMEOUT DRY_RUN

.PHONY: submit srun

submit: ## Submit the training job: NODES=2 GPUS=4 [CONFIG= IMAGE= TIME= PARTITION= ...]; DRY_RUN=1 prints it
	@bash jobs/submit.sh submit

srun: ## Print the direct srun line (pyxis flags) for NODES/GPUS, to paste in an interactive allocation
	@bash jobs/submit.sh srun
