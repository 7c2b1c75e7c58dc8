"""GPU numerics: which results a GPU run repeats bit for bit, and the switches that make it so.

On the CPU a run is deterministic as it stands: the same config, seed and world size give the same
weights, and a resumed run continues bit-exactly. On a GPU three things vary unless switched off:
TF32 matmuls (NVIDIA's containers turn them on with TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1), atomic
adds in scatter (SAGE's mean aggregation, the backward of the feature gather), and cuBLAS's choice of
workspace. `trainer.deterministic=true` switches all three off on a GPU: the same run on
the same GPU model and software then repeats its weights bit for bit, and so does a resumed run; an
op torch has no deterministic kernel for warns once instead of failing (warn_only). What stays within
a tolerance: a GPU against the CPU (other kernels sum in another order: logits differ in the last
bits, so an argmax may flip where two classes tie within them), and GPUs of another model or another
CUDA/NCCL version. `trainer.deterministic=false` (the default: docs/training.md gives the cost measured)
keeps torch's (and the container's) fast defaults.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

CUBLAS_WORKSPACE = ":4096:8"  # what torch's reproducibility notes give for deterministic cuBLAS


def numerics_env(deterministic: bool, environ: Mapping[str, str]) -> dict[str, str]:
    """What to export before CUDA starts (cuBLAS reads these once): TF32 override off, a fixed workspace."""
    if not deterministic:
        return {}
    wanted = {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "0"}  # the container's 1 would force TF32 on whatever torch says
    if "CUBLAS_WORKSPACE_CONFIG" not in environ:
        wanted["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
    return wanted


def set_gpu_numerics(deterministic: bool) -> str:
    """Set torch's switches for a GPU run (process-wide; call before the first CUDA op); a line for the log.

    Not for CPU runs: their numerics stay as they are (deterministic already).
    """
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = False  # nothing reads memory it did not write
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    return (f"GPU numerics: trainer.deterministic={str(deterministic).lower()} (deterministic algorithms "
            f"{torch.are_deterministic_algorithms_enabled()}, TF32 matmul {torch.backends.cuda.matmul.allow_tf32}, "
            f"float32 matmul precision {torch.get_float32_matmul_precision()})")
