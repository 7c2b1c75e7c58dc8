# Linters: shellcheck on every shell script, hadolint on the Dockerfile (both pinned in requirements-dev.lock).
SHELL_SCRIPTS = $(shell git ls-files '*.sh' '*.sbatch' .ci/run 2>/dev/null)
DOCKERFILES = $(wildcard container/Dockerfile)

lint: setup ## Run shellcheck and hadolint
	@if [ -n "$(SHELL_SCRIPTS)" ]; then "$$VENV/bin/shellcheck" -x $(SHELL_SCRIPTS) && echo "shellcheck: $(words $(SHELL_SCRIPTS)) scripts clean"; fi
	@if [ -n "$(DOCKERFILES)" ]; then "$$VENV/bin/hadolint" $(DOCKERFILES) && echo "hadolint: $(DOCKERFILES) clean"; fi
