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
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import hostlist

from train.errors import UserError

LOCAL_ADDR = "127.0.0.1"
# MASTER_PORT from the job id: the whole id (not its last four digits: jobs 12345 and 22345 would
# share a port) folded into 10000..32767, below Linux's ephemeral range (32768-60999), so no
# outgoing connection of the node holds the port by chance. Two jobs get one port only when their
# ids differ by a multiple of PORT_SPAN and they share a first node at the same time; rank 0 then
# fails at once naming the port and its holder (train.distributed).
PORT_BASE = 10000
PORT_SPAN = 22768

JOB_ID_VARS = ("SLURM_JOB_ID", "SLURM_JOBID")
STEP_ID_VARS = ("SLURM_STEP_ID", "SLURM_STEPID")
SLURM_WORLD_VARS = ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
SLURM_NODES_VARS = ("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
SLURM_TASKS_LIST_VARS = ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
SLURM_NODELIST_VARS = ("SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST")
HET_SIZE_VARS = ("SLURM_HET_SIZE", "SLURM_PACK_SIZE")
TORCHRUN_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                 "MASTER_ADDR", "MASTER_PORT")
# Every variable this module reads: set but empty is an error, never "unset".
CONTRACT_VARS = (
    "TORCHELASTIC_RUN_ID", *TORCHRUN_VARS, "NODE_RANK", *JOB_ID_VARS, *STEP_ID_VARS, *SLURM_WORLD_VARS,
    *SLURM_NODES_VARS, *SLURM_TASKS_LIST_VARS, "SLURM_NTASKS_PER_NODE", *SLURM_NODELIST_VARS,
    "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", *HET_SIZE_VARS,
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


def _parse_int(name: str, value: str, minimum: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise UserError(f"{name}={value!r} is not an integer; expected an integer >= {minimum}.") from None
    if number < minimum:
        raise UserError(f"{name}={value!r} is out of range; expected an integer >= {minimum}.")
    return number


_TASKS_ITEM = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def expand_tasks_per_node(name: str, value: str) -> list[int]:
    """SLURM's compressed tasks-per-node form, e.g. "2(x3),1" -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for item in value.split(","):
        match = _TASKS_ITEM.match(item.strip())
        if not match or int(match.group(1)) < 1 or int(match.group(2) or 1) < 1:
            raise UserError(
                f"{name}={value!r} is not a tasks-per-node list; expected a form like '4' or '2(x3),1'."
            )
        count, repeat = int(match.group(1)), int(match.group(2) or 1)
        counts.extend([count] * repeat)
    return counts


def expand_nodelist(name: str, value: str) -> list[str]:
    """A SLURM node list such as "gpu[007-008],cpu1" expanded with python-hostlist."""
    try:
        hosts = hostlist.expand_hostlist(value)
    except hostlist.BadHostlist as exc:
        raise UserError(f"{name}={value!r} is not a valid node list ({exc}); expected e.g. 'node[01-04],gpu7'.") from None
    hosts = [h.strip() for h in hosts]  # "a, b": spaces after commas are not part of a name
    if not hosts or any(not h or any(c.isspace() for c in h) for h in hosts):
        raise UserError(f"{name}={value!r} is not a valid node list; expected e.g. 'node[01-04],gpu7'.")
    return hosts


_HOST = re.compile(r"^[A-Za-z0-9_.:%-]+$")  # a hostname, an IPv4 or an IPv6 address


def check_master_addr(name: str, value: str) -> str:
    """One host: not a host-list expression (`n[1-4]`, `a,b`), no spaces."""
    if _HOST.match(value):
        return value
    hint = ""
    if any(c in value for c in "[],") and not any(c.isspace() for c in value):
        try:
            hint = f" (its first host is {hostlist.expand_hostlist(value)[0]!r})"
        except (hostlist.BadHostlist, IndexError):
            hint = ""
        problem = "is a host-list expression"
    elif any(c.isspace() for c in value):
        problem = "contains spaces"
    else:
        problem = "is not a hostname or an IP address"
    raise UserError(f"{name}={value!r} {problem}; expected one host, e.g. MASTER_ADDR=node01 or 10.0.0.1{hint}.")


def parse_job_id(name: str, value: str) -> int:
    """A SLURM job id as a number; the array form A_T counts as A and T."""
    if not re.fullmatch(r"\d+(_\d+)?", value):
        raise UserError(f"{name}={value!r} is not a numeric job id; set MASTER_PORT explicitly.")
    parent, _, task = value.partition("_")
    return int(parent) + int(task or 0)


def port_for_job(job_id: str, name: str = "SLURM_JOB_ID") -> int:
    """The master port of a job when MASTER_PORT is unset: PORT_BASE + job id mod PORT_SPAN."""
    return PORT_BASE + parse_job_id(name, job_id) % PORT_SPAN


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


class _Reader:
    """Reads integers from `environ`, recording in `sources` which variable gave each field."""

    def __init__(self, environ: Mapping[str, str]):
        self.environ = environ
        self.sources: dict[str, str] = {}

    def integer(self, field_name: str, names: tuple[str, ...], minimum: int, record: bool = True) -> tuple[str, int] | None:
        found = _first(self.environ, names)
        if found is None:
            return None
        if record:
            self.sources[field_name] = found[0]
        return found[0], _parse_int(found[0], found[1], minimum)


def _agree(explicit: tuple[str, int] | None, slurm: tuple[str, int] | None, what: str) -> None:
    """Both set and different: a leftover from another launch; name both."""
    if explicit is not None and slurm is not None and explicit[1] != slurm[1]:
        raise UserError(
            f"{explicit[0]}={explicit[1]} contradicts this srun step's {slurm[0]}={slurm[1]} ({what}). "
            f"{explicit[0]} is left over from another launch (exported in the batch script or shell, or "
            "the enroot hook's copy of the job's SLURM_NTASKS under srun --preserve-env); unset it, or "
            "start the processes with torchrun, whose own variables then win."
        )


def _check_heterogeneous(environ: Mapping[str, str], kind: str) -> None:
    """A heterogeneous job trains on one component (`srun --het-group=N`), never across several."""
    found = _first(environ, HET_SIZE_VARS)
    if found is None or kind != STEP:
        return
    size = _parse_int(found[0], found[1], 1)
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


def resolve(environ: Mapping[str, str], pick_free_port: Callable[[], int] = free_port,
            command: str = "python -m train fit ...") -> DistEnv:
    """Resolve the contract from `environ` (pure, apart from `pick_free_port` for local runs).

    `command` is the command line shown in the srun hint when a process was not started by srun.
    """
    check_empty(environ)
    kind = launcher(environ)
    if kind == ALLOCATION and _looks_like_a_task(environ):
        kind = STEP  # a hand-made srun environment without step variables: only a task has a rank > 0
    _check_heterogeneous(environ, kind)
    if kind == ALLOCATION and _first(environ, ("WORLD_SIZE",)) is None:
        _not_under_srun(environ, command)
    read = _Reader(environ)
    sources = read.sources
    use_slurm = kind in (STEP, PLAIN)  # PLAIN: SLURM-like variables without a job id (hand-made)

    def pick(field_name: str, explicit_names: tuple[str, ...], slurm_names: tuple[str, ...], minimum: int,
             what: str) -> int | None:
        explicit = read.integer(field_name, explicit_names, minimum)
        slurm = read.integer(field_name, slurm_names, minimum, record=explicit is None) if use_slurm else None
        if kind == STEP:
            _agree(explicit, slurm, what)
        chosen = explicit or slurm
        return None if chosen is None else chosen[1]

    world_size = pick("world_size", ("WORLD_SIZE",), SLURM_WORLD_VARS, 1, "the number of processes")
    if world_size is None:
        world_size, sources["world_size"] = 1, "default"
    rank = pick("rank", ("RANK",), ("SLURM_PROCID",), 0, "this process's rank")
    if rank is None:
        rank, sources["rank"] = 0, "default"
    if rank >= world_size:
        het = _first(environ, HET_SIZE_VARS)
        raise UserError(
            f"{sources['rank']}={rank} is not a valid rank for a world of {world_size} processes "
            f"({sources['world_size']}={world_size}); expected 0..{world_size - 1}. "
            + (f"This step spans several components of a heterogeneous job ({het[0]}={het[1]}); train on one: "
               "srun --het-group=N ..." if het and kind == STEP else
               "Were these variables left over from another job?")
        )

    if kind == TORCHRUN:
        node_names: tuple[str, ...] = ("GROUP_WORLD_SIZE",)
    else:
        node_names = SLURM_NODES_VARS if use_slurm else ()
    found_nodes = read.integer("num_nodes", node_names, 1)
    num_nodes = found_nodes[1] if found_nodes else None

    tasks_per_node: list[int] | None = None
    explicit_local = read.integer("local_world_size", ("LOCAL_WORLD_SIZE",), 1)
    local_world_size = explicit_local[1] if explicit_local else None
    tasks_list = _first(environ, SLURM_TASKS_LIST_VARS) if use_slurm else None
    if tasks_list is not None:
        tasks_per_node = expand_tasks_per_node(*tasks_list)
        if local_world_size is None:
            sources["local_world_size"] = tasks_list[0]
        if num_nodes is None:
            num_nodes, sources["num_nodes"] = len(tasks_per_node), tasks_list[0]
        world_var = sources["world_size"]
        if world_var in SLURM_WORLD_VARS and sum(tasks_per_node) != world_size:
            raise UserError(
                f"{tasks_list[0]}={tasks_list[1]} adds up to {sum(tasks_per_node)} tasks but "
                f"{world_var}={world_size}; the two must agree."
            )
    elif local_world_size is None and use_slurm:
        local_world_size = (read.integer("local_world_size", ("SLURM_NTASKS_PER_NODE",), 1) or (None, None))[1]
    if num_nodes is None:
        if local_world_size is not None:
            num_nodes = -(-world_size // local_world_size)
            sources["num_nodes"] = "derived from world_size / local_world_size"
        else:
            num_nodes, sources["num_nodes"] = 1, "default"
    if tasks_per_node is not None and len(tasks_per_node) != num_nodes:
        raise UserError(
            f"{tasks_list[0]} lists {len(tasks_per_node)} nodes but "
            f"{sources['num_nodes']}={num_nodes}; the two must agree."
        )

    node_names = ("GROUP_RANK", "NODE_RANK")
    node_rank = pick("node_rank", node_names, ("SLURM_NODEID",), 0, "this node's rank")
    if node_rank is None:
        per_node = local_world_size or (tasks_per_node[0] if tasks_per_node else world_size // num_nodes or 1)
        node_rank, sources["node_rank"] = min(rank // per_node, num_nodes - 1), "derived from rank"
    if node_rank >= num_nodes:
        raise UserError(
            f"{sources['node_rank']}={node_rank} is not a valid node rank for {num_nodes} nodes "
            f"({sources['num_nodes']}); expected 0..{num_nodes - 1}."
        )

    if tasks_per_node is not None:
        if explicit_local is not None and kind == STEP:
            _agree(explicit_local, (tasks_list[0], tasks_per_node[node_rank]), "processes on this node")
        if local_world_size is None:
            local_world_size = tasks_per_node[node_rank]
    if local_world_size is None:
        if num_nodes == 1:
            local_world_size, sources["local_world_size"] = world_size, "derived: one node"
        else:
            local_world_size, sources["local_world_size"] = -(-world_size // num_nodes), "derived: world_size / num_nodes"

    local_rank = pick("local_rank", ("LOCAL_RANK",), ("SLURM_LOCALID",), 0, "this process's rank on its node")
    if local_rank is None:
        local_rank, sources["local_rank"] = rank % local_world_size, "derived from rank"
    if local_rank >= local_world_size:
        raise UserError(
            f"{sources['local_rank']}={local_rank} is not a valid local rank for {local_world_size} "
            f"processes on this node ({sources['local_world_size']}={local_world_size}); "
            f"expected 0..{local_world_size - 1}."
        )
    if local_world_size > world_size:
        raise UserError(
            f"{sources['local_world_size']}={local_world_size} is larger than the world size "
            f"({sources['world_size']}={world_size})."
        )

    job = _first(environ, JOB_ID_VARS)
    job_id = job[1] if job else None
    master_addr = _master_addr(environ, kind, use_slurm, world_size, num_nodes, sources)
    master_port = _master_port(environ, job if use_slurm or kind == ALLOCATION else None, world_size,
                               pick_free_port, sources)
    return DistEnv(
        world_size=world_size,
        rank=rank,
        local_rank=local_rank,
        local_world_size=local_world_size,
        node_rank=node_rank,
        num_nodes=num_nodes,
        master_addr=master_addr,
        master_port=master_port,
        job_id=job_id,
        launcher=kind,
        agent_store=kind == TORCHRUN and environ.get("TORCHELASTIC_USE_AGENT_STORE", "").strip().lower() == "true",
        sources=sources,
    )


def _master_addr(environ: Mapping[str, str], kind: str, use_slurm: bool, world_size: int, num_nodes: int,
                 sources: dict[str, str]) -> str:
    """MASTER_ADDR (one host), else the first host of the step's node list."""
    found = _first(environ, ("MASTER_ADDR",))
    if found is not None:
        addr = check_master_addr(*found)
        sources["master_addr"] = found[0]
        step = _first(environ, ("SLURM_STEP_NODELIST",))
        job = _first(environ, ("SLURM_JOB_NODELIST", "SLURM_NODELIST"))
        if kind == STEP and step is not None and job is not None:
            step_hosts = expand_nodelist(*step)
            if addr in expand_nodelist(*job) and addr not in step_hosts:
                raise UserError(
                    f"MASTER_ADDR={addr} is a node of the job ({job[0]}={job[1]}) but not of this srun step "
                    f"({step[0]}={step[1]}): nobody would listen there. Unset MASTER_ADDR (the step's first "
                    f"node, {step_hosts[0]}, is then used) or set it to a node of the step."
                )
        return addr
    found = _first(environ, SLURM_NODELIST_VARS) if use_slurm else None
    if found is not None:
        sources["master_addr"] = found[0]
        return expand_nodelist(*found)[0]
    if world_size > 1 and num_nodes > 1:
        raise UserError(
            f"{world_size} processes on {num_nodes} nodes but neither MASTER_ADDR nor "
            "SLURM_STEP_NODELIST is set; set MASTER_ADDR to the first node's hostname."
        )
    sources["master_addr"] = "default"
    return LOCAL_ADDR


def _master_port(environ: Mapping[str, str], job: tuple[str, str] | None, world_size: int,
                 pick_free_port: Callable[[], int], sources: dict[str, str]) -> int:
    """MASTER_PORT, else the job's port (`port_for_job`), else (one process) any free port."""
    found = _first(environ, ("MASTER_PORT",))
    if found is not None:
        port = _parse_int(found[0], found[1], 1)
        if port > 65535:
            raise UserError(f"MASTER_PORT={found[1]!r} is out of range; expected 1..65535.")
        sources["master_port"] = found[0]
        return port
    if world_size == 1:  # nobody else connects: a free port cannot collide with another job
        sources["master_port"] = "free port"
        return pick_free_port()
    if job is not None:
        sources["master_port"] = f"{PORT_BASE} + {job[0]} mod {PORT_SPAN}"
        return port_for_job(job[1], job[0])
    raise UserError(
        f"{world_size} processes but neither MASTER_PORT nor SLURM_JOB_ID is set; "
        "set MASTER_PORT to the same free port on every process."
    )
