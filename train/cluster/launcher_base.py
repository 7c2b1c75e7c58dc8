"""The launcher interface: each launcher answers the contract's fields itself, from its own environment.

As in Lightning's `ClusterEnvironment`, a launcher answers `world_size()`, `global_rank()`, `node_rank()`,
`local_rank()`, `main_address()`, `main_port()` and the rest; unlike it, from the environment mapping it
is given (a `Reading`), never from os.environ, so that resolving stays a pure function. The answers here
are the contract every launcher shares: the container's variables (`EXPLICIT`: WORLD_SIZE, RANK, ...,
set by enroot's PyTorch hook, torchrun or a user) first, then the launcher's own (`variables`), then a
value derived or a default. A launcher with other semantics overrides the answer that differs;
train/cluster/launchers.py holds the ones shipped, in detection order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from train.cluster.envvalues import (
    PORT_BASE,
    PORT_SPAN,
    check_master_addr,
    expand_nodelist,
    expand_tasks_per_node,
    parse_int,
    port_for_job,
)
from train.cluster.jobfacts import read_facts
from train.cluster.placement import counts_per_node, node_layout, place
from train.errors import UserError

LOCAL_ADDR = "127.0.0.1"
JOB_ID_VARS = ("SLURM_JOB_ID", "SLURM_JOBID")

# field -> the container's variables, read first under every launcher (first set wins).
EXPLICIT: dict[str, tuple[str, ...]] = {
    "world_size": ("WORLD_SIZE",),
    "rank": ("RANK",),
    "local_world_size": ("LOCAL_WORLD_SIZE",),
    "node_rank": ("GROUP_RANK", "NODE_RANK"),
    "local_rank": ("LOCAL_RANK",),
    "master_addr": ("MASTER_ADDR",),
    "master_port": ("MASTER_PORT",),
}


def first(environ: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    """The first of `names` that is set, as (name, stripped value)."""
    for name in names:
        if name in environ:
            return name, environ[name].strip()
    return None


class Reading:
    """One resolution under way: the environment, the fields answered so far (`values`) and the variable, or the
    derivation, that gave each (`sources`)."""

    def __init__(self, environ: Mapping[str, str], pick_free_port: Callable[[], int]):
        self.environ, self.pick_free_port = environ, pick_free_port
        self.values: dict = {}
        self.sources: dict[str, str] = {}
        # What `num_nodes` found of the layout, for `node_rank` and `local_world_size` after it:
        self.tasks_list: tuple[str, str] | None = None  # (variable, value) of the launcher's tasks-per-node list
        self.tasks_per_node: list[int] | None = None
        self.explicit_local: tuple[str, int] | None = None  # LOCAL_WORLD_SIZE as (variable, value)
        self.local_count: int | None = None  # the processes per node given so far (None: derived later)
        self.local_rank: int | None = None  # given or derived beside the node rank

    def first(self, names: tuple[str, ...]) -> tuple[str, str] | None:
        return first(self.environ, names)

    def integer(self, field_name: str, names: tuple[str, ...], minimum: int,
                record: bool = True) -> tuple[str, int] | None:
        """The first of `names` as (variable, integer >= minimum), recorded as the field's source; or None."""
        found = self.first(names)
        if found is None:
            return None
        if record:
            self.sources[field_name] = found[0]
        return found[0], parse_int(found[0], found[1], minimum)

    def take(self, field_name: str, value, source: str = "default"):
        """`value` for the field, given by `source` (a variable, or how it was derived)."""
        self.sources[field_name] = source
        return value


class Launcher:
    """One way a process is started: when it started this one, and where this process sits in the job.

    A subclass sets `name`, `variables` and `detect`; the answers (`world_size`, `global_rank`,
    `num_nodes`, `node_rank`, `local_world_size`, `local_rank`, `job_id`, `main_address`, `main_port`,
    `agent_store`) then read the container's variables (`EXPLICIT`) first and the launcher's own after
    them. A launcher whose variables mean something else overrides the answer that differs, reading
    `r.environ` only (never os.environ).

    Attributes:
        name: what `DistEnv.launcher` and `python -m train env` call it.
        variables: field -> this launcher's variables for it, read after `EXPLICIT` (the first set
            wins). Fields: world_size, rank, num_nodes, tasks_per_node (a compressed list, "2(x3),1"),
            local_world_size, node_rank, local_rank, hosts (a node list whose first host is the
            master), job_id (gives the port), distribution (the task order). Each is checked for
            "set but empty" before anything is read.

    Each answer takes the same argument and returns its field:

    Args:
        r: the resolution under way (`Reading`). `r.environ` is the environment; `r.values` holds the
            fields answered before this one (in `ANSWERS` order); the answer records in
            `r.sources[field]` what gave it (a variable, or how it was derived: `r.take`).

    Returns:
        The field's value. A variable that is malformed, out of range or contradicts another raises
        `train.errors.UserError` naming it and what would be valid.

    Example: Open MPI's mpirun, one class and one entry in the detection order. Its variables mean
    what the contract's do, so a table is all it needs; one with other semantics overrides the answer
    that differs (Flux, in tests/test_launcher_answers.py and CONTRIBUTING.md)::

        class OpenMPI(Launcher):
            name = "mpirun"
            variables = {"world_size": ("OMPI_COMM_WORLD_SIZE",), "rank": ("OMPI_COMM_WORLD_RANK",),
                         "local_world_size": ("OMPI_COMM_WORLD_LOCAL_SIZE",),
                         "local_rank": ("OMPI_COMM_WORLD_LOCAL_RANK",)}

            def detect(self, environ):
                return "OMPI_COMM_WORLD_SIZE" in environ

        resolve(environ, launchers=(OpenMPI(), *LAUNCHERS))
    """

    name = ""
    variables: Mapping[str, tuple[str, ...]] = {}

    # ---- who started the process, and what it refuses before anything is read -------------------------------
    def detect(self, environ: Mapping[str, str]) -> bool:
        """Whether this launcher started the process.

        Args:
            environ: the process's environment (read only; never os.environ).

        Returns:
            True when this launcher's variables are there; the first launcher of the list that says so wins.
        """
        raise NotImplementedError

    def refuse_early(self, environ: Mapping[str, str], command: str) -> None:
        """Refuse, before anything is read, a start this launcher cannot serve (here: none).

        Args:
            environ: the process's environment.
            command: the user's command line, for the advice in the refusal.
        """

    def check_master(self, addr: str, environ: Mapping[str, str]) -> None:
        """Refuse a MASTER_ADDR that nobody started by this launcher would listen on (here: any is taken).

        Args:
            addr: MASTER_ADDR, one host.
            environ: the process's environment.
        """

    def agree(self, explicit: tuple[str, int] | None, own: tuple[str, int] | None, what: str) -> None:
        """Refuse an explicit value that contradicts the launcher's own (here: the explicit one wins, unchecked).

        Args:
            explicit: the container's variable and its value, or None when unset.
            own: the launcher's variable and its value, or None when unset.
            what: the field in words, for the refusal ("the number of processes").
        """

    def rank_hint(self, environ: Mapping[str, str]) -> str:
        """Returns the advice that follows "RANK=9 is not a valid rank for a world of 4 processes"."""
        return "Were these variables left over from another job?"

    def placement_variable(self, field_name: str, launchers_layout: bool) -> str:
        """The variable to name when a node or local rank is missing and cannot be derived.

        Args:
            field_name: node_rank or local_rank.
            launchers_layout: whether the processes per node came from this launcher's variables.

        Returns:
            The launcher's own variable when the layout is the launcher's, else the explicit one.
        """
        return ((self.own(field_name) if launchers_layout else ()) or EXPLICIT[field_name])[0]

    def job_facts(self, environ: Mapping[str, str]) -> tuple[dict, dict[str, str]]:
        """The job's facts beside the rank (train/cluster/jobfacts.py); never refused.

        Args:
            environ: the process's environment.

        Returns:
            (values, sources) by DistEnv field: restart count, DATA_DIR, scratch, devices, ...
        """
        return read_facts(environ, torchrun=False)

    def own(self, field_name: str) -> tuple[str, ...]:
        """The launcher's variables for `field_name` (none: the field is not the launcher's)."""
        return tuple(self.variables.get(field_name, ()))

    def reads(self) -> tuple[str, ...]:
        """Every variable this launcher reads, EXPLICIT's first (one set but empty is refused)."""
        names = [*(n for names in EXPLICIT.values() for n in names), *(n for v in self.variables.values() for n in v)]
        return tuple(dict.fromkeys(names))

    def answer(self, environ: Mapping[str, str], pick_free_port: Callable[[], int]) -> Reading:
        """Every field of `ANSWERS`, in order.

        Args:
            environ: the process's environment.
            pick_free_port: a free TCP port, for a lone process that has no MASTER_PORT.

        Returns:
            The reading: its `values` are the fields by name, its `sources` what gave each.
        """
        r = Reading(environ, pick_free_port)
        for field_name, method in ANSWERS:
            r.values[field_name] = getattr(self, method)(r)
        return r

    def pick(self, r: Reading, field_name: str, minimum: int, what: str) -> int | None:
        """The field from its explicit variable, else the launcher's (`agree` compares the two); None if neither."""
        explicit = r.integer(field_name, EXPLICIT[field_name], minimum)
        own = r.integer(field_name, self.own(field_name), minimum, record=explicit is None)
        self.agree(explicit, own, what)
        chosen = explicit or own
        return None if chosen is None else chosen[1]

    # ---- the answers, in `ANSWERS` order (a later one may read an earlier one in r.values) ----------------
    def world_size(self, r: Reading) -> int:
        """The number of processes across all nodes (default 1)."""
        found = self.pick(r, "world_size", 1, "the number of processes")
        return r.take("world_size", 1) if found is None else found

    def global_rank(self, r: Reading) -> int:
        """This process's rank among all of them: 0..world_size-1; required when world_size > 1."""
        rank, world_size = self.pick(r, "rank", 0, "this process's rank"), r.values["world_size"]
        if rank is None and world_size > 1:
            launchers_own = r.sources["world_size"] in self.own("world_size") and self.own("rank")
            names = f"{self.own('rank')[0]} (or RANK)" if launchers_own else "RANK"
            raise UserError(f"{r.sources['world_size']}={world_size} processes, but {names} is not set: which of "
                            "them this one is cannot be known. Set it for every process (srun sets SLURM_PROCID, "
                            "torchrun RANK).")
        if rank is None:
            return r.take("rank", 0)
        if rank >= world_size:
            raise UserError(
                f"{r.sources['rank']}={rank} is not a valid rank for a world of {world_size} processes "
                f"({r.sources['world_size']}={world_size}); expected 0..{world_size - 1}. "
                + self.rank_hint(r.environ)
            )
        return rank

    def num_nodes(self, r: Reading) -> int:
        """The launcher's node count, else the length of its tasks-per-node list, else derived (`_nodes_uncounted`).

        Notes the layout in `r` (tasks-per-node list, processes per node) for the answers after it.
        """
        found = r.integer("num_nodes", self.own("num_nodes"), 1)
        num_nodes = found[1] if found else None
        r.explicit_local = r.integer("local_world_size", EXPLICIT["local_world_size"], 1)
        local = r.explicit_local[1] if r.explicit_local else None
        r.tasks_list = r.first(self.own("tasks_per_node"))
        if r.tasks_list is not None:
            r.tasks_per_node = expand_tasks_per_node(*r.tasks_list)
            if local is None:
                r.sources["local_world_size"] = r.tasks_list[0]
            if num_nodes is None:
                num_nodes = r.take("num_nodes", len(r.tasks_per_node), r.tasks_list[0])
            world_var, world_size = r.sources["world_size"], r.values["world_size"]
            if world_var in self.own("world_size") and sum(r.tasks_per_node) != world_size:
                raise UserError(f"{r.tasks_list[0]}={r.tasks_list[1]} adds up to {sum(r.tasks_per_node)} tasks "
                                f"but {world_var}={world_size}; the two must agree.")
        elif local is None:
            local = (r.integer("local_world_size", self.own("local_world_size"), 1) or (None, None))[1]
        r.local_count = local
        if num_nodes is None:
            num_nodes = self._nodes_uncounted(r, local)
        if r.tasks_per_node is not None and len(r.tasks_per_node) != num_nodes:
            raise UserError(f"{r.tasks_list[0]} lists {len(r.tasks_per_node)} nodes but "
                            f"{r.sources['num_nodes']}={num_nodes}; the two must agree.")
        return num_nodes

    def _nodes_uncounted(self, r: Reading, local: int | None) -> int:
        """No node count nor tasks-per-node list: from the processes per node, else the node list, else one."""
        if local is not None:
            return r.take("num_nodes", -(-r.values["world_size"] // local),
                          "derived from world_size / local_world_size")
        listed = r.first(self.own("hosts"))
        if listed is not None:
            return r.take("num_nodes", len(expand_nodelist(*listed)), f"the hosts of {listed[0]}")
        return r.take("num_nodes", 1)

    def node_rank(self, r: Reading) -> int:
        """The rank of this process's node: 0..num_nodes-1, given or derived from the layout (`_placement`).

        Finds the local rank beside it (`r.local_rank`), which `local_rank` checks.
        """
        node_rank, num_nodes = self.pick(r, "node_rank", 0, "this node's rank"), r.values["num_nodes"]
        r.local_rank = self.pick(r, "local_rank", 0, "this process's rank on its node")
        if node_rank is None or r.local_rank is None:
            node_rank = self._placement(r, node_rank)
        if node_rank >= num_nodes:
            raise UserError(f"{r.sources['node_rank']}={node_rank} is not a valid node rank for {num_nodes} nodes "
                            f"({r.sources['num_nodes']}); expected 0..{num_nodes - 1}.")
        return node_rank

    def _placement(self, r: Reading, node_rank: int | None) -> int:
        """Node rank and local rank where a variable is missing: from the layout when it is known, else refused."""
        world_size, num_nodes, local = r.values["world_size"], r.values["num_nodes"], r.local_count
        local_var = None if local is None else (r.sources["local_world_size"], local)
        counts, source = counts_per_node(world_size, num_nodes, r.tasks_list, r.tasks_per_node, local_var)
        launchers_layout = source.partition("=")[0] in (*self.own("tasks_per_node"), *self.own("local_world_size"))
        distribution = r.first(self.own("distribution")) if launchers_layout else None
        layout = node_layout(world_size, num_nodes, counts, source, distribution)
        known = {field: None if value is None else (r.sources[field], value)
                 for field, value in (("node_rank", node_rank), ("local_rank", r.local_rank))}
        names = {field: self.placement_variable(field, launchers_layout) for field in known}
        derived, how = place(r.values["rank"], layout, known, names)
        how = f"derived from {r.sources.get('rank', 'rank')} and {how}"
        if r.local_rank is None:
            r.local_rank = r.take("local_rank", derived["local_rank"], how)
        return node_rank if node_rank is not None else r.take("node_rank", derived["node_rank"], how)

    def local_world_size(self, r: Reading) -> int:
        """The processes on this node: given, else this node's entry of the tasks-per-node list, else derived."""
        local, world_size, num_nodes = r.local_count, r.values["world_size"], r.values["num_nodes"]
        if r.tasks_per_node is not None:
            mine = r.tasks_per_node[r.values["node_rank"]]
            if r.explicit_local is not None:
                self.agree(r.explicit_local, (r.tasks_list[0], mine), "processes on this node")
            if local is None:
                local = mine
        if local is None:
            if num_nodes == 1:
                local = r.take("local_world_size", world_size, "derived: one node")
            else:
                local = r.take("local_world_size", -(-world_size // num_nodes), "derived: world_size / num_nodes")
        return local

    def local_rank(self, r: Reading) -> int:
        """This process's rank on its node (found by `node_rank`), checked against local_world_size."""
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

    def job_id(self, r: Reading) -> str | None:
        """SLURM's job id under any launcher (torchrun inside a job too): a fact of the job, not of the launch."""
        job = r.first(JOB_ID_VARS)
        if job is None:
            return None
        r.sources["job_id"] = job[0]
        return job[1]

    def main_address(self, r: Reading) -> str:
        """MASTER_ADDR (one host), else the first host of the launcher's node list, else (one node) 127.0.0.1."""
        found = r.first(EXPLICIT["master_addr"])
        if found is not None:
            addr = check_master_addr(*found)
            r.sources["master_addr"] = found[0]
            self.check_master(addr, r.environ)
            return addr
        found = r.first(self.own("hosts"))
        if found is not None:
            r.sources["master_addr"] = found[0]
            return expand_nodelist(*found)[0]
        world_size, num_nodes = r.values["world_size"], r.values["num_nodes"]
        if world_size > 1 and num_nodes > 1:
            raise UserError(f"{world_size} processes on {num_nodes} nodes but neither MASTER_ADDR nor "
                            "SLURM_STEP_NODELIST is set; set MASTER_ADDR to the first node's hostname.")
        return r.take("master_addr", LOCAL_ADDR)

    def main_port(self, r: Reading) -> int:
        """MASTER_PORT, else (one process) any free port, else the job's port (`port_for_job`)."""
        found = r.first(EXPLICIT["master_port"])
        if found is not None:
            port = parse_int(found[0], found[1], 1)
            if port > 65535:
                raise UserError(f"MASTER_PORT={found[1]!r} is out of range; expected 1..65535.")
            r.sources["master_port"] = found[0]
            return port
        world_size = r.values["world_size"]
        if world_size == 1:  # nobody else connects: a free port cannot collide with another job
            return r.take("master_port", r.pick_free_port(), "free port")
        job = r.first(self.own("job_id"))
        if job is not None:
            return r.take("master_port", port_for_job(job[1], job[0]), f"{PORT_BASE} + {job[0]} mod {PORT_SPAN}")
        raise UserError(f"{world_size} processes but neither MASTER_PORT nor SLURM_JOB_ID is set; "
                        "set MASTER_PORT to the same free port on every process.")

    def agent_store(self, r: Reading) -> bool:
        """Whether a launcher's agent already serves the store at MASTER_PORT (rank 0 then connects as a client)."""
        return False


# DistEnv's fields and the answer that gives each, in the order they are answered (a field may read those before).
ANSWERS: tuple[tuple[str, str], ...] = (
    ("world_size", "world_size"), ("rank", "global_rank"), ("num_nodes", "num_nodes"), ("node_rank", "node_rank"),
    ("local_world_size", "local_world_size"), ("local_rank", "local_rank"), ("job_id", "job_id"),
    ("master_addr", "main_address"), ("master_port", "main_port"), ("agent_store", "agent_store"),
)
