# `make data DATASET=...`: prepare a dataset into DATA_DIR on a login node, inside the job image.
# DATA_DIR (default: data/) is shared with `make submit` (mk/jobs.mk).

# make data: a shipped config's dataset or a PyG dataset name
DATASET ?=
# make data: where it runs: auto, enroot (the image here), srun (the image on a node), bare (the venv)
DATA_MODE ?= auto

.PHONY: data

DATA_VARS = DATASET DATA_DIR IMAGE DATA_MODE DRY_RUN  # reach container/data.sh as environment variables

data: ## Prepare DATASET (config or PyG name) into DATA_DIR, inside IMAGE (enroot/srun) or the venv (IMAGE=none)
	@bash container/data.sh
