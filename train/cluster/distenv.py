"""The distributed environment contract: who am I, how many are we, where is the master.

`resolve(environ)` is a pure function from an environment mapping to a frozen `DistEnv` whose `sources`
say which variable gave each field. Who started the process (`train/cluster/launchers.py`: torchrun, an
srun step, a batch script or salloc shell, variables set by hand, one local process; the first whose
`detect()` holds) answers each field itself (train/cluster/launcher_base.py), and so decides which
variables are read:

- WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK/NODE_RANK, MASTER_ADDR and MASTER_PORT
  (the container's: the enroot PyTorch hook's, torchrun's or a user's) come first under every launcher;
- then the launcher's own (SLURM's for an srun step: the step's SLURM_STEP_* before the job's
  SLURM_NTASKS/SLURM_NNODES/SLURM_TASKS_PER_NODE, which `srun --preserve-env` leaves behind, and only
  then sbatch's inherited SLURM_NTASKS_PER_NODE). In an srun step both must agree: a disagreement is
  a leftover from another launch and is refused naming both variables. Under torchrun SLURM's describe
  the tasks that run torchrun, not its processes, so they are not read;
- a field that nothing gives is derived (the node and local rank: train/cluster/placement.py) or
  takes its default (one process on 127.0.0.1).

A heterogeneous job (SLURM_HET_SIZE > 1) trains on one component (`srun --het-group=N`); a step
spanning several components is refused. A variable that is set but empty, malformed or
inconsistent raises `UserError` naming it.

The port, when MASTER_PORT is not set, is `port_for_job(SLURM_JOB_ID)` (one process: any free
port). `python -m train env --port` prints it for scripts.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from train.cluster.envvalues import (  # noqa: F401 (the value forms: public here, where the contract is documented)
    PORT_BASE,
    PORT_SPAN,
    check_master_addr,
    expand_nodelist,
    expand_tasks_per_node,
    parse_job_id,
    port_for_job,
)
from train.cluster.hetjob import HET_SIZE_VARS
from train.cluster.launcher_base import LOCAL_ADDR
from train.cluster.launchers import (  # noqa: F401 (JOB_ID_VARS, EXPLICIT, first: public here, as before)
    EXPLICIT,
    JOB_ID_VARS,
    LAUNCHERS,
    SLURM_NODELIST_VARS,
    SLURM_NODES_VARS,
    SLURM_TASKS_LIST_VARS,
    SLURM_WORLD_VARS,
    STEP_ID_VARS,
    Launcher,
    LocalProcess,
    detect,
    first,
)
from train.errors import UserError

TORCHRUN_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                 "MASTER_ADDR", "MASTER_PORT")
# Every variable the contract reads (and, after these, every one a launcher of the list reads): set but empty
# is an error, never "unset".
CONTRACT_VARS = (
    "TORCHELASTIC_RUN_ID", *TORCHRUN_VARS, "NODE_RANK", *JOB_ID_VARS, *STEP_ID_VARS, *SLURM_WORLD_VARS,
    *SLURM_NODES_VARS, *SLURM_TASKS_LIST_VARS, "SLURM_NTASKS_PER_NODE", *SLURM_NODELIST_VARS,
    "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_DISTRIBUTION", *HET_SIZE_VARS,
)


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in the job; `sources` says which variable gave each field."""

    world_size: int
    rank: int
    local_rank: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    master_addr: str
    master_port: int
    job_id: str | None = None
    launcher: str = LocalProcess.name  # train/cluster/launchers.py: who started the process
    # torchrun's agent already serves the store at MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True):
    # rank 0 connects as a client instead of binding it again (torch would log a bind error).
    agent_store: bool = False
    # Facts of the job beside the rank (train/cluster/jobfacts.py), so that nothing below the entry reads os.environ:
    restart_count: int = 0  # SLURM's requeues of this job (under torchrun outside SLURM: torchrun's restarts)
    data_dir: str | None = None  # DATA_DIR: the datasets' root unless data.root says otherwise
    node_tmpdirs: tuple[str, ...] = ()  # node-local scratch: SLURM_TMPDIR, TMPDIR (set ones, in that order)
    cuda_visible_devices: str | None = None  # as the launcher left it; for messages about device binding
    cluster_name: str | None = None  # SLURM_CLUSTER_NAME: job ids repeat across clusters (train/loop/rundir.py)
    submission_id: str | None = None  # PYG_SUBMISSION_ID: one id for every requeue of a `make submit`
    gpu_allocation: tuple[tuple[str, str], ...] = ()  # SLURM's GPU variables that are set, as (name, value)
    mem_per_node: int | None = None  # SLURM_MEM_PER_NODE: the job's --mem in MB (0: the whole node)
    planned_node_memory: int | None = None  # bytes: the node's memory make submit's plan weighed (PYG_MEMORY_PLAN)
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_local_main(self) -> bool:
        return self.local_rank == 0

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["sources"] = dict(self.sources)
        return out


def free_port() -> int:
    """A TCP port that is free on this machine right now (for single-process runs)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOCAL_ADDR, 0))
        return sock.getsockname()[1]


def check_empty(environ: Mapping[str, str], launchers: tuple[Launcher, ...] = LAUNCHERS) -> None:
    """A contract variable set to nothing is a mistake (`export WORLD_SIZE=`), not "unset"."""
    names = dict.fromkeys((*CONTRACT_VARS, *(name for launcher in launchers for name in launcher.reads())))
    empty = [name for name in names if name in environ and not environ[name].strip()]
    if empty:
        raise UserError(
            f"{', '.join(f'{n}={environ[n]!r}' for n in empty)}: set but empty; give "
            f"{'it a value' if len(empty) == 1 else 'them values'} or unset "
            f"{'it' if len(empty) == 1 else 'them'} (`unset {' '.join(empty)}`)."
        )


def resolve(environ: Mapping[str, str], pick_free_port: Callable[[], int] = free_port,
            command: str = "python -m train fit ...", launchers: tuple[Launcher, ...] = LAUNCHERS) -> DistEnv:
    """Resolve the contract from `environ` (pure, apart from `pick_free_port` for local runs).

    `command` is the command line shown in the srun hint when a process was not started by srun;
    `launchers` the ones to detect, in order (train/cluster/launchers.py).
    """
    check_empty(environ, launchers)
    launcher = detect(environ, launchers)
    launcher.refuse_early(environ, command)
    reading = launcher.answer(environ, pick_free_port)  # train/cluster/launcher_base.py: each field, in order
    facts, fact_sources = launcher.job_facts(environ)  # train/cluster/jobfacts.py
    return DistEnv(**reading.values, **facts, launcher=launcher.name, sources={**reading.sources, **fact_sources})


def job_facts(environ: Mapping[str, str]) -> tuple[dict, dict[str, str]]:
    """The job's facts alone, never refused (no rank): for a command that runs outside a training step."""
    return detect(environ).job_facts(environ)
