"""The distributed environment contract: who am I, how many are we, where is the master.

`resolve(environ)` is a pure function from an environment mapping to a frozen `DistEnv` whose `sources`
say which variable gave each field. Who started the process (`train/cluster/launchers.py`: torchrun, an
srun step, a batch script or salloc shell, variables set by hand, one local process; the first whose
`detect()` holds) decides which variables are read:

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
from train.cluster.envvalues import parse_int as _parse_int
from train.cluster.hetjob import HET_SIZE_VARS, check_heterogeneous
from train.cluster.jobfacts import read_facts
from train.cluster.launchers import (  # noqa: F401 (JOB_ID_VARS: public here, for `python -m train env`)
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
from train.cluster.placement import counts_per_node, node_layout, place
from train.errors import UserError

LOCAL_ADDR = "127.0.0.1"
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


def _agree(explicit: tuple[str, int] | None, slurm: tuple[str, int] | None, what: str) -> None:
    """Both set and different: a leftover from another launch; name both."""
    if explicit is not None and slurm is not None and explicit[1] != slurm[1]:
        raise UserError(
            f"{explicit[0]}={explicit[1]} contradicts this srun step's {slurm[0]}={slurm[1]} ({what}). "
            f"{explicit[0]} is left over from another launch (exported in the batch script or shell, or "
            "the enroot hook's copy of the job's SLURM_NTASKS under srun --preserve-env); unset it, or "
            "start the processes with torchrun, whose own variables then win."
        )


class _Reading:
    """One resolution under way: the environment, the launcher, the fields found so far and their sources."""

    def __init__(self, environ: Mapping[str, str], launcher: Launcher, pick_free_port: Callable[[], int] = free_port):
        self.environ, self.launcher, self.pick_free_port = environ, launcher, pick_free_port
        self.sources: dict[str, str] = {}
        self.values: dict = {}
        self.tasks_list: tuple[str, str] | None = None  # (variable, value) of the launcher's tasks-per-node list
        self.tasks_per_node: list[int] | None = None
        self.explicit_local: tuple[str, int] | None = None
        self.local_rank: int | None = None  # given or derived beside the node rank (`_placement`)

    def first(self, names: tuple[str, ...]) -> tuple[str, str] | None:
        return first(self.environ, names)

    def own(self, field_name: str) -> tuple[str, ...]:
        """The launcher's variables for `field_name` (none: the field is not the launcher's)."""
        return tuple(self.launcher.variables.get(field_name, ()))

    def integer(self, field_name: str, names: tuple[str, ...], minimum: int,
                record: bool = True) -> tuple[str, int] | None:
        """The first of `names` as an integer >= minimum (recorded as the field's source), or None."""
        found = self.first(names)
        if found is None:
            return None
        if record:
            self.sources[field_name] = found[0]
        return found[0], _parse_int(found[0], found[1], minimum)

    def pick(self, field_name: str, minimum: int, what: str) -> int | None:
        """The field from its explicit variable, else the launcher's; in an srun step both must agree."""
        explicit = self.integer(field_name, EXPLICIT[field_name], minimum)
        own = self.integer(field_name, self.own(field_name), minimum, record=explicit is None)
        if self.launcher.srun_step:
            _agree(explicit, own, what)
        chosen = explicit or own
        return None if chosen is None else chosen[1]

    def take(self, field_name: str, value, source: str = "default"):
        """`value` for the field, given by `source` (a variable, or how it was derived)."""
        self.sources[field_name] = source
        return value


# ---- one helper per field, in the order they are resolved (later ones read earlier ones) -----------
def _world_size(r: _Reading) -> int:
    found = r.pick("world_size", 1, "the number of processes")
    return r.take("world_size", 1) if found is None else found


def _rank(r: _Reading) -> int:
    rank, world_size = r.pick("rank", 0, "this process's rank"), r.values["world_size"]
    if rank is None and world_size > 1:
        launchers_own = r.sources["world_size"] in r.own("world_size") and r.own("rank")
        names = f"{r.own('rank')[0]} (or RANK)" if launchers_own else "RANK"
        raise UserError(f"{r.sources['world_size']}={world_size} processes, but {names} is not set: which of "
                        "them this one is cannot be known. Set it for every process (srun sets SLURM_PROCID, "
                        "torchrun RANK).")
    if rank is None:
        return r.take("rank", 0)
    if rank >= world_size:
        het = r.first(HET_SIZE_VARS)
        raise UserError(
            f"{r.sources['rank']}={rank} is not a valid rank for a world of {world_size} processes "
            f"({r.sources['world_size']}={world_size}); expected 0..{world_size - 1}. "
            + (f"This step spans several components of a heterogeneous job ({het[0]}={het[1]}); train on one: "
               "srun --het-group=N ..." if het and r.launcher.srun_step else
               "Were these variables left over from another job?")
        )
    return rank


def _num_nodes(r: _Reading) -> int:
    """The launcher's node count (GROUP_WORLD_SIZE, SLURM's), else the length of its tasks-per-node list."""
    found = r.integer("num_nodes", r.own("num_nodes"), 1)
    num_nodes = found[1] if found else None
    r.explicit_local = r.integer("local_world_size", EXPLICIT["local_world_size"], 1)
    local = r.explicit_local[1] if r.explicit_local else None
    r.tasks_list = r.first(r.own("tasks_per_node"))
    if r.tasks_list is not None:
        r.tasks_per_node = expand_tasks_per_node(*r.tasks_list)
        if local is None:
            r.sources["local_world_size"] = r.tasks_list[0]
        if num_nodes is None:
            num_nodes = r.take("num_nodes", len(r.tasks_per_node), r.tasks_list[0])
        world_var, world_size = r.sources["world_size"], r.values["world_size"]
        if world_var in r.own("world_size") and sum(r.tasks_per_node) != world_size:
            raise UserError(f"{r.tasks_list[0]}={r.tasks_list[1]} adds up to {sum(r.tasks_per_node)} tasks but "
                            f"{world_var}={world_size}; the two must agree.")
    elif local is None:
        local = (r.integer("local_world_size", r.own("local_world_size"), 1) or (None, None))[1]
    r.values["local_world_size"] = local  # provisional: `_local_world_size` completes it
    if num_nodes is None:
        num_nodes = _nodes_without_a_count(r, local)
    if r.tasks_per_node is not None and len(r.tasks_per_node) != num_nodes:
        raise UserError(f"{r.tasks_list[0]} lists {len(r.tasks_per_node)} nodes but "
                        f"{r.sources['num_nodes']}={num_nodes}; the two must agree.")
    return num_nodes


def _nodes_without_a_count(r: _Reading, local: int | None) -> int:
    """No node count nor tasks-per-node list: from the processes per node, else the node list, else one."""
    if local is not None:
        return r.take("num_nodes", -(-r.values["world_size"] // local), "derived from world_size / local_world_size")
    listed = r.first(r.own("hosts"))
    if listed is not None:
        return r.take("num_nodes", len(expand_nodelist(*listed)), f"the hosts of {listed[0]}")
    return r.take("num_nodes", 1)


def _placement(r: _Reading, node_rank: int | None) -> int:
    """Node rank and local rank where a variable is missing: from the layout when it is known, else refused."""
    world_size, num_nodes, local = r.values["world_size"], r.values["num_nodes"], r.values["local_world_size"]
    local_var = None if local is None else (r.sources["local_world_size"], local)
    counts, source = counts_per_node(world_size, num_nodes, r.tasks_list, r.tasks_per_node, local_var)
    launchers_layout = source.partition("=")[0] in (*r.own("tasks_per_node"), *r.own("local_world_size"))
    distribution = r.first(r.own("distribution")) if launchers_layout else None
    layout = node_layout(world_size, num_nodes, counts, source, distribution)
    known = {field: None if value is None else (r.sources[field], value)
             for field, value in (("node_rank", node_rank), ("local_rank", r.local_rank))}
    theirs = r.launcher.srun_step or launchers_layout  # then name the launcher's variables, else the explicit ones
    names = {field: ((r.own(field) if theirs else ()) or EXPLICIT[field])[0] for field in known}
    derived, how = place(r.values["rank"], layout, known, names)
    how = f"derived from {r.sources.get('rank', 'rank')} and {how}"
    if r.local_rank is None:
        r.local_rank = r.take("local_rank", derived["local_rank"], how)
    return node_rank if node_rank is not None else r.take("node_rank", derived["node_rank"], how)


def _node_rank(r: _Reading) -> int:
    node_rank, num_nodes = r.pick("node_rank", 0, "this node's rank"), r.values["num_nodes"]
    r.local_rank = r.pick("local_rank", 0, "this process's rank on its node")
    if node_rank is None or r.local_rank is None:
        node_rank = _placement(r, node_rank)
    if node_rank >= num_nodes:
        raise UserError(f"{r.sources['node_rank']}={node_rank} is not a valid node rank for {num_nodes} nodes "
                        f"({r.sources['num_nodes']}); expected 0..{num_nodes - 1}.")
    return node_rank


def _local_world_size(r: _Reading) -> int:
    local, world_size, num_nodes = r.values["local_world_size"], r.values["world_size"], r.values["num_nodes"]
    if r.tasks_per_node is not None:
        mine = r.tasks_per_node[r.values["node_rank"]]
        if r.explicit_local is not None and r.launcher.srun_step:
            _agree(r.explicit_local, (r.tasks_list[0], mine), "processes on this node")
        if local is None:
            local = mine
    if local is None:
        if num_nodes == 1:
            local = r.take("local_world_size", world_size, "derived: one node")
        else:
            local = r.take("local_world_size", -(-world_size // num_nodes), "derived: world_size / num_nodes")
    return local


def _local_rank(r: _Reading) -> int:
    local_rank, local = r.local_rank, r.values["local_world_size"]
    if local_rank >= local:
        raise UserError(
            f"{r.sources['local_rank']}={local_rank} is not a valid local rank for {local} "
            f"processes on this node ({r.sources['local_world_size']}={local}); expected 0..{local - 1}."
        )
    if local > r.values["world_size"]:
        raise UserError(f"{r.sources['local_world_size']}={local} is larger than the world size "
                        f"({r.sources['world_size']}={r.values['world_size']}).")
    return local_rank


def _job_id(r: _Reading) -> str | None:
    """The job's id under any launcher (torchrun inside a job too): a fact of the job, not of the launch."""
    job = r.first(JOB_ID_VARS)
    if job is None:
        return None
    r.sources["job_id"] = job[0]
    return job[1]


def _master_addr(r: _Reading) -> str:
    """MASTER_ADDR (one host), else the first host of the launcher's node list."""
    found = r.first(EXPLICIT["master_addr"])
    if found is not None:
        addr = check_master_addr(*found)
        r.sources["master_addr"] = found[0]
        r.launcher.check_master(addr, r.environ)
        return addr
    found = r.first(r.own("hosts"))
    if found is not None:
        r.sources["master_addr"] = found[0]
        return expand_nodelist(*found)[0]
    world_size, num_nodes = r.values["world_size"], r.values["num_nodes"]
    if world_size > 1 and num_nodes > 1:
        raise UserError(f"{world_size} processes on {num_nodes} nodes but neither MASTER_ADDR nor "
                        "SLURM_STEP_NODELIST is set; set MASTER_ADDR to the first node's hostname.")
    return r.take("master_addr", LOCAL_ADDR)


def _master_port(r: _Reading) -> int:
    """MASTER_PORT, else the job's port (`port_for_job`), else (one process) any free port."""
    found = r.first(EXPLICIT["master_port"])
    if found is not None:
        port = _parse_int(found[0], found[1], 1)
        if port > 65535:
            raise UserError(f"MASTER_PORT={found[1]!r} is out of range; expected 1..65535.")
        r.sources["master_port"] = found[0]
        return port
    world_size = r.values["world_size"]
    if world_size == 1:  # nobody else connects: a free port cannot collide with another job
        return r.take("master_port", r.pick_free_port(), "free port")
    job = r.first(r.own("job_id"))
    if job is not None:
        return r.take("master_port", port_for_job(job[1], job[0]), f"{PORT_BASE} + {job[0]} mod {PORT_SPAN}")
    raise UserError(f"{world_size} processes but neither MASTER_PORT nor SLURM_JOB_ID is set; "
                    "set MASTER_PORT to the same free port on every process.")


def _agent_store(r: _Reading) -> bool:
    value = r.environ.get("TORCHELASTIC_USE_AGENT_STORE", "")
    return r.launcher.elastic_agent and value.strip().lower() == "true"


# The rank and the rendezvous, in the order they are resolved (a field may read those before it).
PLACEMENT: tuple[tuple[str, Callable[[_Reading], object]], ...] = (
    ("world_size", _world_size), ("rank", _rank), ("num_nodes", _num_nodes), ("node_rank", _node_rank),
    ("local_world_size", _local_world_size), ("local_rank", _local_rank), ("job_id", _job_id),
    ("master_addr", _master_addr), ("master_port", _master_port), ("agent_store", _agent_store),
)


def resolve(environ: Mapping[str, str], pick_free_port: Callable[[], int] = free_port,
            command: str = "python -m train fit ...", launchers: tuple[Launcher, ...] = LAUNCHERS) -> DistEnv:
    """Resolve the contract from `environ` (pure, apart from `pick_free_port` for local runs).

    `command` is the command line shown in the srun hint when a process was not started by srun;
    `launchers` the ones to detect, in order (train/cluster/launchers.py).
    """
    check_empty(environ, launchers)
    launcher = detect(environ, launchers)
    check_heterogeneous(environ, is_step=launcher.srun_step)
    launcher.refuse_early(environ, command)
    reading = _Reading(environ, launcher, pick_free_port)
    for name, helper in PLACEMENT:
        reading.values[name] = helper(reading)
    facts, fact_sources = read_facts(environ, torchrun=launcher.elastic_agent)  # train/cluster/jobfacts.py
    return DistEnv(**reading.values, **facts, launcher=launcher.name, sources={**reading.sources, **fact_sources})


def job_facts(environ: Mapping[str, str]) -> tuple[dict, dict[str, str]]:
    """The job's facts alone, never refused (no rank): for a command that runs outside a training step."""
    return read_facts(environ, torchrun=detect(environ).elastic_agent)
