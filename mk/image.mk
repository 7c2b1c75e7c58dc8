# `make image`: the training image (NVIDIA's PyG container + this project), built with enroot or docker.
# The base tag has one source, the `ARG PYG_TAG=` line of container/Dockerfile.
# IMAGE and IMAGE_DIR, shared with `make submit` and `make data`, are defined in jobs/knobs.mk.
PYG_TAG_DEFAULT := $(shell sed -n 's/^ARG PYG_TAG=//p' $(CURDIR)/container/Dockerfile)
PYG_TAG ?= $(PYG_TAG_DEFAULT)
BUILDER ?= auto
DRY_RUN ?=
SQSH ?=

.PHONY: image

IMAGE_VARS = BUILDER PYG_TAG IMAGE_DIR IMAGE DRY_RUN SQSH  # reach container/image.sh as environment variables

image: ## Build IMAGE (.sqsh) with BUILDER=auto|docker|enroot on nvcr.io/nvidia/pyg:PYG_TAG; DRY_RUN=1 prints the commands
	@bash container/image.sh
