# `make data DATASET=...`: prepare a dataset into DATA_DIR on a login node, inside the job image.
DATASET ?=
# DATA_DIR (default: data/) is shared with `make submit` (mk/jobs.mk).
DATA_MODE ?= auto

.PHONY: data

data: ## Prepare DATASET (config or PyG name) into DATA_DIR, inside IMAGE (enroot/srun) or the venv (IMAGE=none)
	@DATASET='$(DATASET)' DATA_DIR='$(DATA_DIR)' IMAGE='$(IMAGE)' DATA_MODE='$(DATA_MODE)' DRY_RUN='$(DRY_RUN)' \
		bash container/data.sh
