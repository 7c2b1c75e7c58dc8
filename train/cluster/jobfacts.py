"""Facts of the job beside its ranks: restarts, the data root, node-local scratch, devices (those visible and
those SLURM allocated), whose job it is.

Read once, at the entry, by `train.cluster.distenv.resolve` (into `DistEnv`, each with the variable that
gave it in `sources`), so that no module below the entry reads os.environ. Unlike the rank, a
fact is never refused: an unset variable is an absent fact.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

Fact = tuple[object, str]  # (value, its source: a variable name, or why there is none)

# field -> the variables it is read from, first match wins.
VARIABLES: dict[str, tuple[str, ...]] = {
    # SLURM's requeues of the job, also under torchrun inside a job; torchrun's own restarts only outside SLURM
    "restart_count": ("SLURM_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"),
    "data_dir": ("DATA_DIR",),  # the datasets' root unless data.root says otherwise
    "node_tmpdirs": ("SLURM_TMPDIR", "TMPDIR"),  # node-local scratch, every one that is set, in this order
    "cuda_visible_devices": ("CUDA_VISIBLE_DEVICES",),  # as the launcher left it, for messages on binding
    "cluster_name": ("SLURM_CLUSTER_NAME",),  # job ids repeat across clusters (train/loop/rundir.py)
    "submission_id": ("PYG_SUBMISSION_ID",),  # exported by jobs/submit.sh: one id for every requeue
    # The GPUs SLURM gave the job, step or task (every one that is set, in this order): a run that sees none
    # of them is refused (train/cluster/devices.py invisible_gpus), never left to train on the CPU.
    "gpu_allocation": ("SLURM_GPUS_PER_TASK", "SLURM_GPUS_ON_NODE", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS",
                       "SLURM_GPUS_PER_NODE", "SLURM_GPUS"),
    # SLURM's --mem in MB (0: the whole node): a limit data.features=auto weighs (train/cluster/memory_limit.py)
    "mem_per_node": ("SLURM_MEM_PER_NODE",),
    # the node's memory as make submit's memory plan weighed it (sinfo's, or the smaller --mem): its figures'
    # node_memory word (train/loop/killed_rank.py figures_text), a limit the run weighs as the plan did
    "planned_node_memory": ("PYG_MEMORY_PLAN",),
}
PLANNED_NODE_MEMORY = "node_memory="  # the word of PYG_MEMORY_PLAN (figures_text) that holds it, in bytes


def _restart_count(environ: Mapping[str, str], torchrun: bool) -> Fact:
    names = VARIABLES["restart_count"] if torchrun else VARIABLES["restart_count"][:1]
    found = next(((name, environ[name].strip()) for name in names if environ.get(name, "").strip()), None)
    if found is None:
        return 0, "default"
    if not found[1].isdigit():  # as it always was: a count that is not one counts as 0
        return 0, f"{found[0]} (not a count: {found[1]!r}; taken as 0)"
    return int(found[1]), found[0]


def _data_dir(environ: Mapping[str, str], _torchrun: bool) -> Fact:
    value = environ.get("DATA_DIR") or None
    return value, "DATA_DIR" if value else "unset"


def _node_tmpdirs(environ: Mapping[str, str], _torchrun: bool) -> Fact:
    found = [(name, environ[name]) for name in VARIABLES["node_tmpdirs"] if environ.get(name)]
    return tuple(value for _, value in found), ", ".join(name for name, _ in found) or "unset"


def _mem_per_node(environ: Mapping[str, str], _torchrun: bool) -> Fact:
    value = environ.get("SLURM_MEM_PER_NODE", "").strip()
    if not value:
        return None, "unset"
    if not value.isdigit():  # SLURM writes MB; anything else is not a limit this run can read
        return None, f"SLURM_MEM_PER_NODE (not a number of MB: {value!r}; taken as unset)"
    return int(value), "SLURM_MEM_PER_NODE"


def _planned_node_memory(environ: Mapping[str, str], _torchrun: bool) -> Fact:
    words = environ.get("PYG_MEMORY_PLAN", "").split()
    value = next((word.removeprefix(PLANNED_NODE_MEMORY) for word in words if word.startswith(PLANNED_NODE_MEMORY)),
                 None)
    if value is None:
        return None, "unset"
    if not value.isdigit() or not int(value):  # "-": the plan did not know the node's memory
        return None, f"PYG_MEMORY_PLAN (the plan's node memory unknown: {value!r})"
    return int(value), "PYG_MEMORY_PLAN"


def _gpu_allocation(environ: Mapping[str, str], _torchrun: bool) -> Fact:
    names = VARIABLES["gpu_allocation"]
    found = tuple((name, environ[name].strip()) for name in names if environ.get(name, "").strip())
    return found, ", ".join(name for name, _ in found) or "unset"


def _text(field_name: str, strip: bool) -> Callable[[Mapping[str, str], bool], Fact]:
    """A fact that is the value of its one variable (None when unset)."""
    (name,) = VARIABLES[field_name]

    def read(environ: Mapping[str, str], _torchrun: bool) -> Fact:
        value = environ.get(name)
        if value is None:
            return None, "unset"
        return (value.strip() if strip else value), name
    return read


READERS: dict[str, Callable[[Mapping[str, str], bool], Fact]] = {
    "restart_count": _restart_count,
    "data_dir": _data_dir,
    "node_tmpdirs": _node_tmpdirs,
    "cuda_visible_devices": _text("cuda_visible_devices", strip=False),
    "cluster_name": _text("cluster_name", strip=True),
    "submission_id": _text("submission_id", strip=True),
    "gpu_allocation": _gpu_allocation,
    "mem_per_node": _mem_per_node,
    "planned_node_memory": _planned_node_memory,
}


def read_facts(environ: Mapping[str, str], torchrun: bool) -> tuple[dict, dict[str, str]]:
    """Every fact as (values, sources); `torchrun`: this process was started by torchrun."""
    values, sources = {}, {}
    for name, reader in READERS.items():
        values[name], sources[name] = reader(environ, torchrun)
    return values, sources
