# `make submit` / `make srun`: the multi-node job (jobs/train.sbatch), checked by jobs/submit.sh; `make sweep`: one
# job array of it, an element per point and seed of a grid.
# Its settings (NODES, GPUS, IMAGE, ...), their defaults, shapes and documentation: the table jobs/knobs.md
# (KNOBS: the Makefile reads it). DRY_RUN comes from mk/image.mk.

# Every setting reaches jobs/submit.sh as an environment variable (Makefile: export_for).
JOBS_VARS = $(KNOBS) DRY_RUN

# make plan: the memory of one node (e.g. 2T; megabytes without a unit); empty: sinfo's, where it answers
NODE_MEMORY ?=
# GPU_MEMORY: jobs/knobs.md (make plan reads it too).

.PHONY: submit srun sweep plan

plan: check-plan setup ## Would it fit? The memory plan of CONFIG= on NODES= GPUS= [NODE_MEMORY= GPU_MEMORY=], no data needed
	@bash jobs/plan.sh

submit: ## Submit the training job: NODES=2 GPUS=4 [CONFIG= IMAGE= TIME= PARTITION= ...]; MODE=predict RUN=: predict; DRY_RUN=1 prints it
	@bash jobs/submit.sh submit

sweep: ## Submit one job array of a grid: SWEEP='optim.lr=0.01,0.001 model.name=sage,gat' SEEDS=3 [MAX_PARALLEL=]; DRY_RUN=1 prints it
	@bash jobs/submit.sh sweep

srun: ## Print the direct srun line (pyxis flags) for NODES/GPUS, to paste in an interactive allocation
	@bash jobs/submit.sh srun
