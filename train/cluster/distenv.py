"""The distributed environment contract: who am I, how many are we, where is the master.

`resolve(environ)` is a pure function from an environment mapping to a frozen `DistEnv`.
Who started this process decides which variables are read (`launcher`):

- **torchrun** (`TORCHELASTIC_RUN_ID` set): torchrun's own variables only (WORLD_SIZE, RANK,
  LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT). SLURM's
  describe the tasks that run torchrun, not the processes torchrun starts (`srun -N2
  --ntasks-per-node=1 torchrun --nproc-per-node=4` has SLURM_NTASKS=2 and WORLD_SIZE=8), so
  they are not compared.
- **an srun step** (`SLURM_STEP_ID` set): the step's own variables, which describe the step even
  when it runs on some of the job's nodes (`srun -N1` in a 2-node job) or under
  `srun --preserve-env` (which leaves the job's SLURM_NTASKS/SLURM_NNODES/SLURM_TASKS_PER_NODE):
    world size   SLURM_STEP_NUM_TASKS, SLURM_NTASKS, SLURM_NPROCS
    nodes        SLURM_STEP_NUM_NODES, SLURM_NNODES, SLURM_JOB_NUM_NODES
    per node     SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE ("2(x3),1"), and only then
                 SLURM_NTASKS_PER_NODE (sbatch's --ntasks-per-node, inherited by every step)
    ranks        SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID
                 (without the last two: derived where the tasks fill the nodes in blocks, else
                 refused; train/cluster/placement.py)
    master       the first host of SLURM_STEP_NODELIST, SLURM_NODELIST, SLURM_JOB_NODELIST
  WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK/NODE_RANK and MASTER_ADDR set next
  to them (the enroot PyTorch hook, or a user) win, but must agree with the step's values: a
  disagreement is a leftover from another launch and is refused naming both variables.
- **inside an allocation but not by srun** (`SLURM_JOB_ID` without an srun step: no
  `SLURM_STEP_ID`, or SLURM's own batch/extern/interactive step; no `SLURM_STEP_*` variable; and
  SLURM_PROCID/LOCALID/NODEID 0 or unset, as in a batch script or an salloc shell): one process.
  If the allocation has several tasks the process is refused at once with the srun line to use
  (it would otherwise wait for ranks that never start).
- **nothing** of the above: WORLD_SIZE & co. if set, else one local process on 127.0.0.1.

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
from train.cluster.placement import counts_per_node, node_layout, place
from train.errors import UserError

LOCAL_ADDR = "127.0.0.1"
JOB_ID_VARS = ("SLURM_JOB_ID", "SLURM_JOBID")
STEP_ID_VARS = ("SLURM_STEP_ID", "SLURM_STEPID")
SLURM_WORLD_VARS = ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
SLURM_NODES_VARS = ("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
SLURM_TASKS_LIST_VARS = ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
SLURM_NODELIST_VARS = ("SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST")
TORCHRUN_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                 "MASTER_ADDR", "MASTER_PORT")
# Every variable this module reads: set but empty is an error, never "unset".
CONTRACT_VARS = (
    "TORCHELASTIC_RUN_ID", *TORCHRUN_VARS, "NODE_RANK", *JOB_ID_VARS, *STEP_ID_VARS, *SLURM_WORLD_VARS,
    *SLURM_NODES_VARS, *SLURM_TASKS_LIST_VARS, "SLURM_NTASKS_PER_NODE", *SLURM_NODELIST_VARS,
    "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_DISTRIBUTION", *HET_SIZE_VARS,
)

TORCHRUN, STEP, ALLOCATION, PLAIN = "torchrun", "srun step", "allocation without srun", "plain"


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
    launcher: str = PLAIN
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


def _first(environ: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    """The first of `names` that is set, as (name, value); `check_empty` has refused empty ones."""
    for name in names:
        if name in environ:
            return name, environ[name].strip()
    return None


def check_empty(environ: Mapping[str, str]) -> None:
    """A contract variable set to nothing is a mistake (`export WORLD_SIZE=`), not "unset"."""
    empty = [name for name in CONTRACT_VARS if name in environ and not environ[name].strip()]
    if empty:
        raise UserError(
            f"{', '.join(f'{n}={environ[n]!r}' for n in empty)}: set but empty; give "
            f"{'it a value' if len(empty) == 1 else 'them values'} or unset "
            f"{'it' if len(empty) == 1 else 'them'} (`unset {' '.join(empty)}`)."
        )


# SLURM's own steps that are not srun's: the batch script, the extern and salloc's interactive step
# (by name, or by their ids 0xfffffffa..0xfffffffe as some versions print them).
NON_SRUN_STEPS = {"batch", "extern", "interactive", *(str(n) for n in range(0xFFFFFFFA, 0xFFFFFFFF))}
STEP_VARS = ("SLURM_STEP_NUM_TASKS", "SLURM_STEP_NUM_NODES", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE")


def launcher(environ: Mapping[str, str]) -> str:
    """Who started this process: torchrun, an srun step, a batch/salloc shell, or nobody known.

    An srun step is told by its step id, or (a hand-made environment without one) by any of the
    step's own variables, which a batch script or salloc shell never has.
    """
    if "TORCHELASTIC_RUN_ID" in environ:
        return TORCHRUN
    step = _first(environ, STEP_ID_VARS)
    if step is not None:
        return ALLOCATION if step[1].lower() in NON_SRUN_STEPS else STEP
    if _first(environ, STEP_VARS):
        return STEP
    if _first(environ, JOB_ID_VARS):
        return ALLOCATION
    return PLAIN


def _agree(explicit: tuple[str, int] | None, slurm: tuple[str, int] | None, what: str) -> None:
    """Both set and different: a leftover from another launch; name both."""
    if explicit is not None and slurm is not None and explicit[1] != slurm[1]:
        raise UserError(
            f"{explicit[0]}={explicit[1]} contradicts this srun step's {slurm[0]}={slurm[1]} ({what}). "
            f"{explicit[0]} is left over from another launch (exported in the batch script or shell, or "
            "the enroot hook's copy of the job's SLURM_NTASKS under srun --preserve-env); unset it, or "
            "start the processes with torchrun, whose own variables then win."
        )


def _not_under_srun(environ: Mapping[str, str], command: str) -> None:
    """In a batch script or salloc shell, a lone process claiming several tasks would wait forever."""
    job = _first(environ, JOB_ID_VARS)
    claims: tuple[str, int] | None = None
    for name in ("SLURM_NTASKS", "SLURM_NPROCS"):
        found = _first(environ, (name,))
        if found is not None:
            claims = (name, _parse_int(found[0], found[1], 1))
            break
    if claims is None:
        listed = _first(environ, ("SLURM_TASKS_PER_NODE",))
        if listed is not None:
            claims = (listed[0], sum(expand_tasks_per_node(*listed)))
    if claims is None or claims[1] < 2:
        return
    raise UserError(
        f"this process runs inside job {job[1]} ({job[0]}={job[1]}) but was not started by srun ("
        f"{_step_note(environ)}: a batch script or an salloc shell), and the job has {claims[1]} tasks "
        f"({claims[0]}={environ[claims[0]]}): alone it would wait for {claims[1] - 1} more that never start. "
        f"Start one process per task with: srun {command} (the job's srun options are in "
        "`make srun`), or a single process with: srun --ntasks=1 " + command
    )


def _looks_like_a_task(environ: Mapping[str, str]) -> bool:
    """SLURM_PROCID/LOCALID/NODEID above 0: a task of a step (a batch script has 0 for each)."""
    for name in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID"):
        found = _first(environ, (name,))
        if found is not None and found[1].isdigit() and int(found[1]) > 0:
            return True
    return False


def _step_note(environ: Mapping[str, str]) -> str:
    step = _first(environ, STEP_ID_VARS)
    return f"{step[0]}={step[1]} is SLURM's own step, not srun's" if step else "no SLURM_STEP_ID"


class _Reading:
    """One resolution under way: the environment, the launcher, the fields found so far and their sources."""

    def __init__(self, environ: Mapping[str, str], kind: str, pick_free_port: Callable[[], int] = free_port):
        self.environ, self.kind, self.pick_free_port = environ, kind, pick_free_port
        self.use_slurm = kind in (STEP, PLAIN)  # PLAIN: SLURM-like variables without a job id (hand-made)
        self.sources: dict[str, str] = {}
        self.values: dict = {}
        self.tasks_list: tuple[str, str] | None = None  # (variable, value) of SLURM's tasks-per-node list
        self.tasks_per_node: list[int] | None = None
        self.explicit_local: tuple[str, int] | None = None
        self.local_rank: int | None = None  # given or derived beside the node rank (`_placement`)

    def first(self, names: tuple[str, ...]) -> tuple[str, str] | None:
        return _first(self.environ, names)

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
        """The field from its explicit variable, else SLURM's; in an srun step both must agree."""
        explicit_names, slurm_names = VARIABLES[field_name]
        explicit = self.integer(field_name, explicit_names, minimum)
        slurm = self.integer(field_name, slurm_names, minimum, record=explicit is None) if self.use_slurm else None
        if self.kind == STEP:
            _agree(explicit, slurm, what)
        chosen = explicit or slurm
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
        names = "SLURM_PROCID (or RANK)" if r.sources["world_size"].startswith("SLURM_") else "RANK"
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
               "srun --het-group=N ..." if het and r.kind == STEP else
               "Were these variables left over from another job?")
        )
    return rank


def _num_nodes(r: _Reading) -> int:
    """GROUP_WORLD_SIZE (torchrun) or SLURM's node count, else the length of SLURM's tasks-per-node list."""
    names = ("GROUP_WORLD_SIZE",) if r.kind == TORCHRUN else SLURM_NODES_VARS if r.use_slurm else ()
    found = r.integer("num_nodes", names, 1)
    num_nodes = found[1] if found else None
    r.explicit_local = r.integer("local_world_size", ("LOCAL_WORLD_SIZE",), 1)
    local = r.explicit_local[1] if r.explicit_local else None
    r.tasks_list = r.first(SLURM_TASKS_LIST_VARS) if r.use_slurm else None
    if r.tasks_list is not None:
        r.tasks_per_node = expand_tasks_per_node(*r.tasks_list)
        if local is None:
            r.sources["local_world_size"] = r.tasks_list[0]
        if num_nodes is None:
            num_nodes = r.take("num_nodes", len(r.tasks_per_node), r.tasks_list[0])
        world_var, world_size = r.sources["world_size"], r.values["world_size"]
        if world_var in SLURM_WORLD_VARS and sum(r.tasks_per_node) != world_size:
            raise UserError(f"{r.tasks_list[0]}={r.tasks_list[1]} adds up to {sum(r.tasks_per_node)} tasks but "
                            f"{world_var}={world_size}; the two must agree.")
    elif local is None and r.use_slurm:
        local = (r.integer("local_world_size", ("SLURM_NTASKS_PER_NODE",), 1) or (None, None))[1]
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
    listed = r.first(SLURM_NODELIST_VARS) if r.use_slurm else None
    if listed is not None:
        return r.take("num_nodes", len(expand_nodelist(*listed)), f"the hosts of {listed[0]}")
    return r.take("num_nodes", 1)


def _placement(r: _Reading, node_rank: int | None) -> int:
    """Node rank and local rank where a variable is missing: from the layout when it is known, else refused."""
    world_size, num_nodes, local = r.values["world_size"], r.values["num_nodes"], r.values["local_world_size"]
    local_var = None if local is None else (r.sources["local_world_size"], local)
    counts, source = counts_per_node(world_size, num_nodes, r.tasks_list, r.tasks_per_node, local_var)
    distribution = r.first(("SLURM_DISTRIBUTION",)) if source.startswith("SLURM_") else None
    layout = node_layout(world_size, num_nodes, counts, source, distribution)
    known = {field: None if value is None else (r.sources[field], value)
             for field, value in (("node_rank", node_rank), ("local_rank", r.local_rank))}
    slurm = r.kind == STEP or source.startswith("SLURM_")  # then name SLURM's variables, else torchrun's
    names = {field: VARIABLES[field][1 if slurm else 0][0] for field in known}
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
        if r.explicit_local is not None and r.kind == STEP:
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
    job = r.first(JOB_ID_VARS)
    if job is None:
        return None
    r.sources["job_id"] = job[0]
    return job[1]


def _master_addr(r: _Reading) -> str:
    """MASTER_ADDR (one host), else the first host of the step's node list."""
    found = r.first(("MASTER_ADDR",))
    if found is not None:
        addr = check_master_addr(*found)
        r.sources["master_addr"] = found[0]
        step = r.first(("SLURM_STEP_NODELIST",))
        job = r.first(("SLURM_JOB_NODELIST", "SLURM_NODELIST"))
        if r.kind == STEP and step is not None and job is not None:
            step_hosts = expand_nodelist(*step)
            if addr in expand_nodelist(*job) and addr not in step_hosts:
                raise UserError(
                    f"MASTER_ADDR={addr} is a node of the job ({job[0]}={job[1]}) but not of this srun step "
                    f"({step[0]}={step[1]}): nobody would listen there. Unset MASTER_ADDR (the step's first "
                    f"node, {step_hosts[0]}, is then used) or set it to a node of the step."
                )
        return addr
    found = r.first(SLURM_NODELIST_VARS) if r.use_slurm else None
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
    found = r.first(("MASTER_PORT",))
    if found is not None:
        port = _parse_int(found[0], found[1], 1)
        if port > 65535:
            raise UserError(f"MASTER_PORT={found[1]!r} is out of range; expected 1..65535.")
        r.sources["master_port"] = found[0]
        return port
    world_size = r.values["world_size"]
    if world_size == 1:  # nobody else connects: a free port cannot collide with another job
        return r.take("master_port", r.pick_free_port(), "free port")
    job = r.first(JOB_ID_VARS) if r.use_slurm or r.kind == ALLOCATION else None
    if job is not None:
        return r.take("master_port", port_for_job(job[1], job[0]), f"{PORT_BASE} + {job[0]} mod {PORT_SPAN}")
    raise UserError(f"{world_size} processes but neither MASTER_PORT nor SLURM_JOB_ID is set; "
                    "set MASTER_PORT to the same free port on every process.")


def _agent_store(r: _Reading) -> bool:
    value = r.environ.get("TORCHELASTIC_USE_AGENT_STORE", "")
    return r.kind == TORCHRUN and value.strip().lower() == "true"


# field -> (its own variables, SLURM's): `_Reading.pick` takes the first set, its own ones first.
VARIABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "world_size": (("WORLD_SIZE",), SLURM_WORLD_VARS),
    "rank": (("RANK",), ("SLURM_PROCID",)),
    "num_nodes": (("GROUP_WORLD_SIZE",), SLURM_NODES_VARS),
    "local_world_size": (("LOCAL_WORLD_SIZE",), (*SLURM_TASKS_LIST_VARS, "SLURM_NTASKS_PER_NODE")),
    "node_rank": (("GROUP_RANK", "NODE_RANK"), ("SLURM_NODEID",)),
    "local_rank": (("LOCAL_RANK",), ("SLURM_LOCALID",)),
    "job_id": ((), JOB_ID_VARS),
    "master_addr": (("MASTER_ADDR",), SLURM_NODELIST_VARS),
    "master_port": (("MASTER_PORT",), JOB_ID_VARS),
    "agent_store": (("TORCHELASTIC_USE_AGENT_STORE",), ()),
}
# The rank and the rendezvous, in the order they are resolved (a field may read those before it).
PLACEMENT: tuple[tuple[str, Callable[[_Reading], object]], ...] = (
    ("world_size", _world_size), ("rank", _rank), ("num_nodes", _num_nodes), ("node_rank", _node_rank),
    ("local_world_size", _local_world_size), ("local_rank", _local_rank), ("job_id", _job_id),
    ("master_addr", _master_addr), ("master_port", _master_port), ("agent_store", _agent_store),
)


def resolve(environ: Mapping[str, str], pick_free_port: Callable[[], int] = free_port,
            command: str = "python -m train fit ...") -> DistEnv:
    """Resolve the contract from `environ` (pure, apart from `pick_free_port` for local runs).

    `command` is the command line shown in the srun hint when a process was not started by srun.
    """
    check_empty(environ)
    kind = launcher(environ)
    if kind == ALLOCATION and _looks_like_a_task(environ):
        kind = STEP  # a hand-made srun environment without step variables: only a task has a rank > 0
    check_heterogeneous(environ, is_step=kind == STEP)
    if kind == ALLOCATION and _first(environ, ("WORLD_SIZE",)) is None:
        _not_under_srun(environ, command)
    reading = _Reading(environ, kind, pick_free_port)
    for name, helper in PLACEMENT:
        reading.values[name] = helper(reading)
    facts, fact_sources = read_facts(environ, torchrun=kind == TORCHRUN)  # train/cluster/jobfacts.py
    return DistEnv(**reading.values, **facts, launcher=kind, sources={**reading.sources, **fact_sources})


def job_facts(environ: Mapping[str, str]) -> tuple[dict, dict[str, str]]:
    """The job's facts alone, never refused (no rank): for a command that runs outside a training step."""
    return read_facts(environ, torchrun=launcher(environ) == TORCHRUN)
