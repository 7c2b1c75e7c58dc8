"""The torch half of `python -m train fit` (train/cli/fit.py), once its config and environment are known to be
good: the checks each rank makes alone before the rendezvous, NCCL's and cuBLAS's settings, then the run."""

from __future__ import annotations

from collections.abc import MutableMapping

from train.cli.preflight import check_fit
from train.cluster.distenv import DistEnv
from train.cluster.procgroup import nccl_error_handling
from train.cluster.torch_gpus import refuse_invisible_gpus
from train.config import Config
from train.loop.numerics import numerics_env
from train.loop.run import run_fit


def checked_run(config: Config, env: DistEnv, environ: MutableMapping[str, str]) -> int:
    """Refuse what each rank can see alone is wrong, set what NCCL and cuBLAS read as they start in `environ` (the
    process environment, read at the entry), and train. Returns the run's exit status."""
    refuse_invisible_gpus(env.gpu_allocation, env.cuda_visible_devices)  # never train on the CPU beside idle GPUs
    check_fit(config, env)  # before the rendezvous and before anything is written
    # Read once by NCCL and cuBLAS when they start: a dead rank is named, a GPU run repeats itself.
    environ.update({**nccl_error_handling(environ), **numerics_env(config.trainer.deterministic, environ)})
    return run_fit(config, env)
