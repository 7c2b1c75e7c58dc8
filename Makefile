# pyg-slurm-train: one command builds the image, one submits the job.
# `make help` lists every target; every variable below can be set on the command line.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CONFIG ?= synthetic
NPROC ?= 2
ARGS ?=
PYTEST_ARGS ?=
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))

.PHONY: help setup run test lint clean

help: ## List every target and the variables it reads
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  make %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo
	@echo "Variables (set as make VAR=value):"
	@awk '/^[A-Z_]+ \?=/ {sub(/ \?= */, "="); printf "  %s\n", $$0}' $(MAKEFILE_LIST)

# The venv is rebuilt only when the pinned dependency files change.
$(VENV)/.stamp: requirements.lock requirements-dev.lock
	$(PYTHON) -m venv $(VENV)
	@echo "setting up $(VENV) from requirements-dev.lock (pinned; CPU torch)"
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.lock 2>&1 \
		| { grep -v "^WARNING: Location 'file:" || true; }  # this machine's pip config lists local indexes
	touch $@

setup: $(VENV)/.stamp ## Create the pinned local venv (.venv), idempotent

run: setup ## Train the default config on NPROC local processes (torchrun, gloo on CPU)
	$(VENV)/bin/torchrun --standalone --nproc-per-node=$(NPROC) -m train fit --config $(CONFIG) $(ARGS)

test: setup lint ## Lint scripts and run the whole test suite (starts its own SLURM cluster)
	$(PY) -m pytest $(PYTEST_ARGS)

clean: ## Remove runs/, logs/ and caches (keeps .venv and data/)
	rm -rf runs logs .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

include $(wildcard mk/*.mk)
