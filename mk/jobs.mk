# `make submit` / `make srun`: the multi-node job (jobs/train.sbatch), checked by jobs/submit.sh.
# Its knobs (NODES, GPUS, IMAGE, ...), their defaults and documentation: jobs/knobs.mk (Makefile includes it).
# DRY_RUN comes from mk/image.mk.

# Every knob reaches jobs/submit.sh as an environment variable (Makefile: export_for).
JOBS_VARS = NODES GPUS CONFIG ARGS IMAGE GPUS_PER_TASK CPUS_PER_TASK MEM TIME PARTITION ACCOUNT QOS SBATCH_ARGS \
	SRUN_ARGS DATA_DIR LOG_DIR JOB_NAME CONTAINER_MOUNTS CODE_DIR INSTALL_PROJECT BARE_PYTHON DOCTOR DOCTOR_TIMEOUT DRY_RUN

.PHONY: submit srun

submit: ## Submit the training job: NODES=2 GPUS=4 [CONFIG= IMAGE= TIME= PARTITION= ...]; DRY_RUN=1 prints it
	@bash jobs/submit.sh submit

srun: ## Print the direct srun line (pyxis flags) for NODES/GPUS, to paste in an interactive allocation
	@bash jobs/submit.sh srun
