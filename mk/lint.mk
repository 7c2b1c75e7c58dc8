# Linters: shellcheck on every shell script, hadolint on the Dockerfile, ruff on the Python (all pinned in
# requirements-dev.lock; ruff's rules are in pyproject.toml).
SHELL_SCRIPTS = $(shell git ls-files '*.sh' '*.sbatch' .ci/run 2>/dev/null)
DOCKERFILES = $(wildcard container/Dockerfile)

lint: check-lint setup ## Run shellcheck, hadolint and ruff
	@if [ -n "$(SHELL_SCRIPTS)" ]; then "$$VENV/bin/shellcheck" -x $(SHELL_SCRIPTS) && echo "shellcheck: $(words $(SHELL_SCRIPTS)) scripts clean"; fi
	@if [ -n "$(DOCKERFILES)" ]; then "$$VENV/bin/hadolint" $(DOCKERFILES) && echo "hadolint: $(DOCKERFILES) clean"; fi
	@"$$VENV/bin/ruff" check --quiet . && echo "ruff: every Python file of the checkout clean"
