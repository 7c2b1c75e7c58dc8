"""The distributed environment contract: who am I, how many are we, where is the master.

`resolve(environ)` is a pure function from an environment mapping to a frozen `DistEnv`.
Precedence per field, first match wins:

1. torchrun / the enroot PyTorch hook: WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE,
   GROUP_RANK / NODE_RANK, MASTER_ADDR, MASTER_PORT;
2. SLURM: SLURM_NTASKS, SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID,
   SLURM_JOB_NUM_NODES / SLURM_NNODES, SLURM_NTASKS_PER_NODE or the compressed
   SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE ("2(x3),1"), the first host of
   SLURM_JOB_NODELIST (python-hostlist) and 10000 + the last four digits of SLURM_JOB_ID
   (the seed's sbatch);
3. a single local process on 127.0.0.1 and a free port.

A variable that is set but malformed or inconsistent raises `UserError` naming it.
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
SEED_PORT_BASE = 10000  # the seed's sbatch: MASTER_PORT = 10000 + last 4 digits of the job id


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
    """The first of `names` that is set and non-empty, as (name, value)."""
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return name, value
    return None


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
        if not match:
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
    if not hosts:
        raise UserError(f"{name}={value!r} names no host; expected e.g. 'node[01-04]'.")
    return hosts


def seed_port(job_id: str, name: str = "SLURM_JOB_ID") -> int:
    """10000 + the last four digits of the job id, as the seed's sbatch computes it."""
    digits = job_id.split("_")[0]  # array jobs: "1234_5" -> 1234
    if not digits.isdigit():
        raise UserError(f"{name}={job_id!r} is not a numeric job id; set MASTER_PORT explicitly.")
    return SEED_PORT_BASE + int(digits[-4:])


def resolve(environ: Mapping[str, str], pick_free_port: Callable[[], int] = free_port) -> DistEnv:
    """Resolve the contract from `environ` (pure, apart from `pick_free_port` for local runs)."""
    sources: dict[str, str] = {}

    def integer(field_name: str, names: tuple[str, ...], minimum: int) -> int | None:
        found = _first(environ, names)
        if found is None:
            return None
        sources[field_name] = found[0]
        return _parse_int(found[0], found[1], minimum)

    world_size = integer("world_size", ("WORLD_SIZE", "SLURM_NTASKS", "SLURM_NPROCS"), 1)
    if world_size is None:
        world_size, sources["world_size"] = 1, "default"
    rank = integer("rank", ("RANK", "SLURM_PROCID"), 0)
    if rank is None:
        rank, sources["rank"] = 0, "default"
    if rank >= world_size:
        raise UserError(
            f"{sources['rank']}={rank} is not a valid rank for a world of {world_size} processes "
            f"({sources['world_size']}={world_size}); expected 0..{world_size - 1}. "
            "Were these variables left over from another job?"
        )

    num_nodes = integer("num_nodes", ("SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"), 1)
    tasks_per_node: list[int] | None = None
    local_world_size = integer("local_world_size", ("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"), 1)
    if local_world_size is None:
        found = _first(environ, ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"))
        if found is not None:
            tasks_per_node = expand_tasks_per_node(*found)
            sources["local_world_size"] = found[0]
            if num_nodes is None:
                num_nodes, sources["num_nodes"] = len(tasks_per_node), found[0]
    if num_nodes is None:
        if local_world_size is not None:
            num_nodes = -(-world_size // local_world_size)
            sources["num_nodes"] = "derived from world_size / local_world_size"
        else:
            num_nodes, sources["num_nodes"] = 1, "default"

    node_rank = integer("node_rank", ("GROUP_RANK", "NODE_RANK", "SLURM_NODEID"), 0)
    if node_rank is None:
        per_node = local_world_size or (tasks_per_node[0] if tasks_per_node else world_size // num_nodes or 1)
        node_rank, sources["node_rank"] = min(rank // per_node, num_nodes - 1), "derived from rank"
    if node_rank >= num_nodes:
        raise UserError(
            f"{sources['node_rank']}={node_rank} is not a valid node rank for {num_nodes} nodes "
            f"({sources['num_nodes']}); expected 0..{num_nodes - 1}."
        )

    if local_world_size is None:
        if tasks_per_node is not None:
            if len(tasks_per_node) != num_nodes:
                raise UserError(
                    f"{sources['local_world_size']} lists {len(tasks_per_node)} nodes but "
                    f"{sources['num_nodes']}={num_nodes}; the two must agree."
                )
            local_world_size = tasks_per_node[node_rank]
        elif num_nodes == 1:
            local_world_size, sources["local_world_size"] = world_size, "derived: one node"
        else:
            local_world_size, sources["local_world_size"] = -(-world_size // num_nodes), "derived: world_size / num_nodes"

    local_rank = integer("local_rank", ("LOCAL_RANK", "SLURM_LOCALID"), 0)
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

    job = _first(environ, ("SLURM_JOB_ID", "SLURM_JOBID"))
    job_id = job[1] if job else None

    found = _first(environ, ("MASTER_ADDR",))
    if found is not None:
        master_addr, sources["master_addr"] = found[1], found[0]
    else:
        found = _first(environ, ("SLURM_JOB_NODELIST", "SLURM_NODELIST"))
        if found is not None:
            master_addr, sources["master_addr"] = expand_nodelist(*found)[0], found[0]
        elif world_size > 1 and num_nodes > 1:
            raise UserError(
                f"{world_size} processes on {num_nodes} nodes but neither MASTER_ADDR nor "
                "SLURM_JOB_NODELIST is set; set MASTER_ADDR to the first node's hostname."
            )
        else:
            master_addr, sources["master_addr"] = LOCAL_ADDR, "default"

    found = _first(environ, ("MASTER_PORT",))
    if found is not None:
        master_port, sources["master_port"] = _parse_int(found[0], found[1], 1), found[0]
        if master_port > 65535:
            raise UserError(f"MASTER_PORT={found[1]!r} is out of range; expected 1..65535.")
    elif job is not None:
        master_port, sources["master_port"] = seed_port(job[1], job[0]), f"10000 + last 4 digits of {job[0]}"
    elif world_size > 1:
        raise UserError(
            f"{world_size} processes but neither MASTER_PORT nor SLURM_JOB_ID is set; "
            "set MASTER_PORT to the same free port on every process."
        )
    else:
        master_port, sources["master_port"] = pick_free_port(), "free port"

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
        sources=sources,
    )
