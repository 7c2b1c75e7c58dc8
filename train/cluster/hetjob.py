"""A heterogeneous job (SLURM_HET_SIZE > 1) trains on one component (`srun --het-group=N`), never across several.

Part of the environment contract (train/cluster/distenv.py, which calls it before the rank is read).
"""

from __future__ import annotations

from collections.abc import Mapping

from train.cluster.envvalues import expand_nodelist, parse_int
from train.errors import UserError

HET_SIZE_VARS = ("SLURM_HET_SIZE", "SLURM_PACK_SIZE")


def _first(environ: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    return next(((name, environ[name].strip()) for name in names if name in environ), None)


def check_heterogeneous(environ: Mapping[str, str], is_step: bool) -> None:
    """Refuse an srun step whose nodes lie in several components of a heterogeneous job."""
    found = _first(environ, HET_SIZE_VARS)
    if found is None or not is_step:
        return
    size = parse_int(found[0], found[1], 1)
    if size < 2:
        return
    suffix = "HET_GROUP" if found[0] == "SLURM_HET_SIZE" else "PACK_GROUP"
    step = _first(environ, ("SLURM_STEP_NODELIST",))
    if step is None:
        raise UserError(
            f"{found[0]}={size}: this is a heterogeneous job, and SLURM_STEP_NODELIST is not set, so the "
            f"step's nodes are unknown; run the training on one component: srun --het-group=N ..."
        )
    step_hosts = set(expand_nodelist(*step))
    touched = []
    for component in range(size):
        listed = _first(environ, (f"SLURM_JOB_NODELIST_{suffix}_{component}",))
        if listed is not None and step_hosts & set(expand_nodelist(*listed)):
            touched.append(f"{component} ({listed[0]}={listed[1]})")
    if len(touched) > 1:
        raise UserError(
            f"this srun step (SLURM_STEP_NODELIST={step[1]}) spans components {', '.join(touched)} of a "
            f"heterogeneous job ({found[0]}={size}); training runs on one component: "
            "srun --het-group=N python -m train ..."
        )
