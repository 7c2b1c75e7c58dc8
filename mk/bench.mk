# `make bench`: benchmarks of what the project costs against the seed's way, measured in one run.
# Tables go to stdout, figures with the machine's description to bench/results/<name>-<time>.json.
# Never run by `make test`. Sized for a 2-core, 24 GiB machine (a few minutes each).
BENCH ?= memory sampler training gpu
BENCH_ARGS ?=

.PHONY: bench

bench: setup ## Benchmarks BENCH (memory sampler training gpu); BENCH_ARGS e.g. "--nodes 200000"; JSON in bench/results/
	@$(call split,names,BENCH); $(call split,args,BENCH_ARGS); "$$VENV/bin/python" -m bench "$${names[@]}" "$${args[@]}"
