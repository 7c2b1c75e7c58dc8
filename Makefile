# pyg-slurm-train: one command builds the image, one submits the job.
# `make help` lists every target; every variable below can be set on the command line.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
# The order `make help` lists the targets in: the order a user needs them (a target not named here comes last).
HELP_ORDER := help setup run test model-check image data submit srun doctor tail logs report bench anchor gpu-check lint clean

# the Python that builds the venv (3.10 or newer)
PYTHON ?= python3
# the pinned venv every target runs in
VENV ?= .venv
# make run / make doctor: local processes (ranks)
NPROC ?= 2
# make test: pytest's arguments, e.g. '-k doctor -x'
PYTEST_ARGS ?=
# The job's knobs (CONFIG, ARGS, IMAGE, NODES, GPUS, ...): each default and its documentation, once.
include jobs/knobs.mk
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))

# No user string is ever run by a shell: a make variable reaches a recipe as an environment variable
# holding its text as given ($(call export_for,TARGETS,VARS), after all defaults are set, at the end
# of this file); recipes read "$$VAR", never '$(VAR)', and split word lists with `read -r -a`.
raw_value = $(if $(filter command line environment environment override override,$(origin $(1))),$(value $(1)),$($(1)))
export_for = $(foreach t,$(1),$(eval $(t)_VARS += $(2))$(foreach v,$(2),$(eval $(t): export $(v) := $$(call raw_value,$(v)))))
# check-TARGET, TARGET's first prerequisite (it sees TARGET's variables): the shape of every variable the
# target reads (its export_for list), by lib/checks.sh, the one table of shapes that the scripts
# (jobs/submit.sh, container/*.sh) use too; before anything is built.
check-%:
	@bash lib/checks.sh "make $*" $($*_VARS)
# `read -r -a NAME <<<"$$VAR"`: a whitespace-separated list as argv words (no globbing, no re-parsing).
split = read -r -a $(1) <<<"$$$(2)"

.PHONY: help setup run model-check test lint clean

help: ## List every target and the variables it reads
	@awk -v order="$(HELP_ORDER)" 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {doc[$$1] = $$2} \
		END {n = split(order, names, " "); for (i = 1; i <= n; i++) {printf "  make %-10s %s\n", names[i], doc[names[i]]; \
		delete doc[names[i]]} for (t in doc) printf "  make %-10s %s\n", t, doc[t]}' $(MAKEFILE_LIST)
	@echo
	@echo "Variables (make VAR=value; the job's knobs are defined in jobs/knobs.mk):"
	@awk '/^# / {doc = substr($$0, 3); next} /^[A-Z_]+ \?=/ {sub(/ \?= */, "="); printf "  %-21s  %s\n", $$0, doc} \
		{doc = ""}' $(MAKEFILE_LIST)

# The venv is rebuilt only when the pinned dependency files change.
$(VENV)/.stamp: requirements.lock requirements-dev.lock
	@bash lib/checks.sh "make setup" $(setup_VARS)
	"$$PYTHON" -m venv -- "$$VENV"
	@echo "setting up $$VENV from requirements-dev.lock (pinned; CPU torch)"
	"$$VENV/bin/pip" install --quiet --disable-pip-version-check -r requirements-dev.lock 2>&1 \
		| { grep -v "^WARNING: Location 'file:" || true; }  # this machine's pip config lists local indexes
	touch -- "$$VENV/.stamp"

setup: $(VENV)/.stamp ## Create the pinned local venv (.venv), idempotent

run: check-run setup ## Train the default config on NPROC local processes (torchrun, gloo on CPU); CODE_DIR= your model's code
	@$(call split,args,ARGS); \
	"$$VENV/bin/python" -m login.launch --nproc "$$NPROC" --code-dir "$$CODE_DIR" fit --config "$$CONFIG" "$${args[@]}"

model-check: check-model-check setup ## Check model.name (CODE_DIR= your code, ARGS=) as training will build it; nothing is written
	@$(call split,args,ARGS); \
	"$$VENV/bin/python" -m login.launch --code-dir "$$CODE_DIR" model --config "$$CONFIG" "$${args[@]}"

test: check-test setup lint ## Lint scripts and run the whole test suite (starts its own SLURM cluster)
	@$(call split,args,PYTEST_ARGS); "$$VENV/bin/python" -m pytest "$${args[@]}"

clean: ## Remove runs/, logs/ and caches (keeps .venv and data/)
	rm -rf runs logs .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

include $(wildcard mk/*.mk)

# Every variable a user may set, to the recipes that read it (see raw_value above).
$(call export_for,$(VENV)/.stamp setup,PYTHON VENV)
$(call export_for,run,VENV NPROC CONFIG ARGS CODE_DIR)
$(call export_for,model-check,VENV CONFIG ARGS CODE_DIR)
$(call export_for,test,VENV PYTEST_ARGS)
$(call export_for,lint,VENV)
$(call export_for,bench,VENV BENCH BENCH_ARGS PYG_LIB_SRC PYTHON)
$(call export_for,anchor,PYG_LIB_SRC PYTHON)
$(call export_for,gpu-check,VENV GPU_PYTHON GPU_CHECK_ARGS)
$(call export_for,data,$(DATA_VARS))
$(call export_for,image,$(IMAGE_VARS))
$(call export_for,submit srun,$(JOBS_VARS))
$(call export_for,doctor,VENV NPROC CONFIG ARGS CODE_DIR DOCTOR_TIMEOUT)
$(call export_for,report,VENV RUN)
$(call export_for,logs tail,LOG_DIR)
