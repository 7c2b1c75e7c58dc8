# `make bench`: benchmarks of what the project costs against the strongest anchor, measured in one run.
# Tables go to stdout, figures with the machine's description to bench/results/<name>-<time>.json.
# Never run by `make test`. Sized for a 2-core, 24 GiB machine (a few minutes each).

# make bench: which benchmarks (all of them: python -m bench --help)
BENCH ?= memory evalmem sampler training gpu
# make bench: their options, e.g. "--scale 0.1"
BENCH_ARGS ?=
# pyg-lib's saved sources (README.md and build.sh there); empty: ../shared/pyg-lib (bench/anchor.sh).
PYG_LIB_SRC ?=

.PHONY: bench anchor

anchor: check-anchor ## Build pyg-lib (PyG's C++ sampler) into .venv-anchor from PYG_LIB_SRC, once per source change (~3 min)
	@bash bench/anchor.sh

bench: check-bench setup ## Benchmarks BENCH (bench/README.md) against pyg-lib where it builds; BENCH_ARGS e.g. "--scale 0.1"
	@$(call split,names,BENCH); "$$VENV/bin/python" -m bench --check-names "$${names[@]}"
	@bash bench/anchor.sh || echo "bench: the pyg-lib anchor is not available (above); the benchmarks run without it"
	@$(call split,names,BENCH); $(call split,args,BENCH_ARGS); "$$VENV/bin/python" -m bench "$${names[@]}" "$${args[@]}"
