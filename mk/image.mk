# `make image`: the training image (NVIDIA's PyG container + this project), built with enroot or docker.
# The base tag has one source, the `ARG PYG_TAG=` line of container/Dockerfile, read by jobs/lib/knobs.sh.
# IMAGE and IMAGE_DIR, shared with `make submit` and `make data`, are settings of jobs/knobs.md.
PYG_TAG_DEFAULT := $(shell env -u PYG_TAG bash $(CURDIR)/jobs/lib/knobs.sh PYG_TAG)
# make image: the tag of nvcr.io/nvidia/pyg to build on (default: container/Dockerfile's)
PYG_TAG ?= $(PYG_TAG_DEFAULT)
# make image: auto (docker where a daemon answers, else enroot), docker or enroot
BUILDER ?= auto
# every target that acts: 1 prints what it would do, does nothing
DRY_RUN ?=
# make image BUILDER=docker: 1 also converts the docker image to IMAGE (.sqsh) with enroot
SQSH ?=
# the imported NVIDIA base (enroot route), reused when it exists; empty: $(IMAGE_DIR)/nvidia+pyg+$(PYG_TAG).sqsh
BASE_SQSH ?=

.PHONY: image

IMAGE_VARS = BUILDER PYG_TAG IMAGE_DIR IMAGE DRY_RUN SQSH BASE_SQSH  # reach container/image.sh as environment variables

image: ## Build IMAGE (.sqsh) with BUILDER=auto|docker|enroot on nvcr.io/nvidia/pyg:PYG_TAG; DRY_RUN=1 prints the commands
	@bash container/image.sh
