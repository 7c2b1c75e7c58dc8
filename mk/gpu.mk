# `make gpu-check`: one run that tells what a lent GPU does with this project (bench/gpu_check.py).
# Needs no `make setup` on the GPU machine: GPU_PYTHON names a Python with CUDA torch and PyG (e.g. the
# system python3 there, or NVIDIA's PyG container); unset, the venv or python3 is used when it sees CUDA,
# else the checks run on the CPU and the CUDA ones are skipped with the reason.

# make gpu-check: a Python with CUDA torch and PyG; empty: the venv's, or python3
GPU_PYTHON ?=
# make gpu-check: options of bench/gpu_check.py
GPU_CHECK_ARGS ?=

.PHONY: gpu-check

gpu-check: check-gpu-check ## Check a GPU in < 8 min: CUDA tests, nccl, shared GPU, resume layout, late node, dead rank, sampler, pinned, training; GPU_PYTHON, GPU_CHECK_ARGS
	@$(call split,args,GPU_CHECK_ARGS); VENV_PY="$$(realpath -m -s -- "$$VENV/bin/python")" bash bench/gpu_check.sh "$${args[@]}"
