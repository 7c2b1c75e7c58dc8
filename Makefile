# pyg-slurm-train: one command builds the image, one submits the job.
# `make help` lists every target; every variable below can be set on the command line.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
# The order `make help` lists the targets in: the order a user needs them (a target not named here comes last).
HELP_ORDER := help setup run test model-check plan image data submit sweep srun doctor tail logs report predict tensorboard bench anchor gpu-check lint clean

# the Python that builds the venv (3.10 or newer)
PYTHON ?= python3
# the pinned venv every target runs in
VENV ?= .venv
# make run / make doctor: local processes (ranks)
NPROC ?= 2
# make test: pytest's arguments, e.g. '-k doctor -x' (one session; none: the whole suite, two sessions at once)
PYTEST_ARGS ?=
# The job's settings (CONFIG, ARGS, IMAGE, NODES, GPUS, ...): one table, jobs/knobs.md, its rows read by
# jobs/lib/knobs.sh; here each row becomes `NAME ?= default` (a default may name $(OTHER) settings).
KNOB_DEFAULTS := $(shell bash jobs/lib/knobs.sh make-defaults)
knob_name = $(firstword $(subst =, ,$(1)))
KNOBS := $(foreach row,$(KNOB_DEFAULTS),$(call knob_name,$(row)))
$(if $(KNOBS),,$(error jobs/knobs.md: no setting was read (bash jobs/lib/knobs.sh make-defaults failed)))
$(foreach row,$(KNOB_DEFAULTS),$(eval $(call knob_name,$(row)) ?= $(patsubst $(call knob_name,$(row))=%,%,$(row))))
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))

# No user string is ever run by a shell: a make variable reaches a recipe as an environment variable
# holding its text as given ($(call export_for,TARGETS,VARS), after all defaults are set, at the end
# of this file); recipes read "$$VAR", never '$(VAR)', and split word lists with `read -r -a`.
raw_value = $(if $(filter command line environment environment override override,$(origin $(1))),$(value $(1)),$($(1)))
export_to = $(foreach t,$(1),$(foreach v,$(2),$(eval $(t): export $(v) := $$(call raw_value,$(v)))))
export_for = $(foreach t,$(1),$(eval $(t)_VARS += $(2)))$(call export_to,$(1),$(2))
# check-TARGET, TARGET's first prerequisite (it sees TARGET's variables): the shape of every variable the
# target reads (its export_for list), by lib/checks.sh, the one table of shapes that the scripts
# (jobs/submit.sh, container/*.sh) use too; before anything is built. PYG_PROG: the command the user typed, where
# a target runs another (make doctor NODES=2: make submit), for the messages.
check-%:
	@bash lib/checks.sh "$${PYG_PROG:-make $*}" $($*_VARS)
# `read -r -a NAME <<<"$$VAR"`: a whitespace-separated list as argv words (no globbing, no re-parsing).
split = read -r -a $(1) <<<"$$$(2)"
# The config as the recipes give it to python -m train: from the CONFIG setting, which a refusal names
# (train/cli/fit.py --config-knob).
config_args = --config-knob CONFIG --config "$$CONFIG"

.PHONY: help setup run model-check test lint clean

help: ## List every target and the variables it reads
	@awk -v order="$(HELP_ORDER)" 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {doc[$$1] = $$2} \
		END {n = split(order, names, " "); for (i = 1; i <= n; i++) {printf "  make %-12s %s\n", names[i], doc[names[i]]; \
		delete doc[names[i]]} for (t in doc) printf "  make %-12s %s\n", t, doc[t]}' $(MAKEFILE_LIST)
	@echo
	@echo "Variables (make VAR=value; each shown with its value):"
	@awk '/^# / {doc = substr($$0, 3); next} /^[A-Z_]+ \?=/ {name = $$1; printf "  %-21s  %s\n", name "=" ENVIRON[name], \
		doc} {doc = ""}' $(MAKEFILE_LIST)
	@echo
	@echo "The job's settings (make submit, make srun; one table: jobs/knobs.md):"
	@bash jobs/lib/knobs.sh help

# The venv is rebuilt only when the pinned dependency files change. What it does is said first (the first `make run`
# builds it: minutes of pip), then each command as it runs, with its values; pip's warning about a local index that
# a machine's pip config lists is dropped.
$(VENV)/.stamp: requirements.lock requirements-dev.lock
	@bash lib/checks.sh "make setup" $(setup_VARS)
	@echo "installing the pinned dependencies into $$VENV with pip (torch and PyG: a few minutes, once):"
	@cmd=("$$PYTHON" -m venv -- "$$VENV"); echo "$${cmd[*]}"; "$${cmd[@]}"
	@cmd=("$$VENV/bin/pip" install --quiet --disable-pip-version-check -r requirements-dev.lock); \
	echo "$${cmd[*]}  (pinned; CPU torch)"; "$${cmd[@]}" 2>&1 | { grep -v "^WARNING: Location 'file:" || true; }
	@touch -- "$$VENV/.stamp"

setup: $(VENV)/.stamp ## Create the pinned local venv (.venv), idempotent

# make run starts NPROC processes on this machine: a job's GPUS or NODES given to it is refused, naming what to
# give instead, never ignored (the names given; their values reach the recipe in the environment, export_to below).
job_counts = $(foreach v,GPUS NODES,$(if $(filter command line,$(origin $(v))),$(v)))

run: check-run setup ## Train the default config on NPROC local processes (torchrun, gloo on CPU); CODE_DIR= your model's code
	@set -- $(job_counts); if (( $$# )); then name=$$1 value=$${!1}; hint="make run NPROC=$$value"; \
	[[ $$name == GPUS ]] || hint="make submit $$name=$$value runs a job on $$value nodes"; \
	echo "make run: error: $$name=$$value is make submit's setting, not make run's: make run starts NPROC processes on this machine; $$hint." >&2; \
	exit 2; fi
	@$(call split,args,ARGS); \
	"$$VENV/bin/python" -m login.launch --nproc "$$NPROC" --code-dir "$$CODE_DIR" fit $(config_args) "$${args[@]}"

model-check: check-model-check setup ## Check model.name (CODE_DIR= your code, ARGS=) as training will build it; nothing is written
	@$(call split,args,ARGS); \
	"$$VENV/bin/python" -m login.launch --code-dir "$$CODE_DIR" model $(config_args) "$${args[@]}"

# With no PYTEST_ARGS the suite runs as two sessions at once, the cluster's tests beside the rest
# (tests/harness/streams.py); with them, pytest runs once with them.
test: check-test setup lint ## Lint scripts and run the whole test suite (starts its own SLURM cluster)
	@$(call split,args,PYTEST_ARGS); \
	if (( $${#args[@]} )); then "$$VENV/bin/python" -m pytest "$${args[@]}"; \
	else "$$VENV/bin/python" -m tests.harness.streams; fi

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
$(call export_for,submit srun sweep,$(JOBS_VARS))
$(call export_for,plan,VENV CONFIG ARGS NODES GPUS GPUS_PER_TASK PARTITION CODE_DIR NODE_MEMORY GPU_MEMORY)
$(call export_for,doctor,VENV NPROC CONFIG ARGS CODE_DIR DOCTOR_TIMEOUT)
$(call export_for,report,VENV RUN RUNS SWEEP LOG_DIR)
$(call export_for,predict,VENV NPROC RUN ARGS CODE_DIR)
$(call export_for,tensorboard,VENV TB_PORT)
$(call export_for,logs tail,LOG_DIR)
# make help shows the value of every variable a target reads (the lists above); it reads none itself.
SETTINGS := $(sort $(foreach list,$(filter %_VARS,$(.VARIABLES)),$($(list))))
$(call export_to,help,$(SETTINGS))
# make run: a job's GPUS or NODES, to name it in its refusal (job_counts)
$(call export_to,run,GPUS NODES)
# A variable given on the command line that no target reads and that is a typo of one (NODE=2, nodes=2) stops
# make, naming the valid ones; any other (NCCL_DEBUG=INFO) is an environment variable for the programs it starts.
quoted = '$(subst ','"'"',$(1))'
OTHER_VARS := $(foreach v,$(.VARIABLES),$(if $(filter command line,$(origin $(v))),$(filter-out $(SETTINGS),$(v))))
TYPOS := $(if $(strip $(OTHER_VARS)),$(shell bash jobs/lib/knobs.sh near-misses $(SETTINGS) -- \
	$(foreach v,$(OTHER_VARS),$(call quoted,$(v)))))
$(if $(TYPOS),$(error $(TYPOS): not a setting of this Makefile; the job's settings (jobs/knobs.md) are $(KNOBS); \
	the others are $(filter-out $(KNOBS),$(SETTINGS)) (make help says what each is)))
