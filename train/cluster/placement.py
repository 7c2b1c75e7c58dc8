"""Where a rank runs when its node rank or local rank is not given: derived from the layout, or refused.

srun sets SLURM_NODEID and SLURM_LOCALID for every task, torchrun GROUP_RANK and LOCAL_RANK; an
MPI-style launcher or a hand-made environment may set neither. Both can then be derived only from
how many tasks each node runs AND the order in which they were placed there: SLURM's block
distribution (its default when there are more tasks than nodes) and torchrun fill the nodes one
after the other, so `SLURM_TASKS_PER_NODE='1,2(x3)'` puts rank 0 on node 0, ranks 1-2 on node 1,
3-4 on node 2 and 5-6 on node 3. SLURM's cyclic and plane distributions deal the tasks out in
rounds that over-subscribed nodes change, and arbitrary follows a host file: for those the counts
say nothing of the order, and the placement is refused naming what is missing. Pure functions.
"""

from __future__ import annotations

import re

from train.errors import UserError

# SLURM_DISTRIBUTION's node part, as srun prints it ("block:cyclic,pack" -> "block"), or as old versions
# printed the enum (task_dist_states_t: the low four bits are the node distribution).
_DISTRIBUTION_CODES = {1: "cyclic", 2: "block", 3: "arbitrary", 4: "plane"}


def node_distribution(value: str) -> str:
    """How SLURM places the tasks on the nodes: block (also `*`, the default), cyclic, plane, arbitrary..."""
    first = re.split(r"[:,]", value.strip().lower(), maxsplit=1)[0]
    if first.isdigit():
        return _DISTRIBUTION_CODES.get(int(first) & 0xF, f"unknown ({value})")
    return "block" if first == "*" else first


def block_placement(counts: list[int], rank: int) -> tuple[int, int]:
    """(node, local rank) of `rank` when the ranks fill the nodes in order, counts[i] of them on node i.

    SLURM's block distribution (slurm_step_layout.c, _task_layout_block) and torchrun's node-major
    ranks both place tasks this way.
    """
    start = 0
    for node, count in enumerate(counts):
        if rank < start + count:
            return node, rank - start
        start += count
    raise ValueError(f"rank {rank} is beyond the {start} tasks of the layout {counts}")


def counts_per_node(world_size: int, num_nodes: int, tasks_list: tuple[str, str] | None,
                    tasks: list[int] | None, local: tuple[str, int] | None) -> tuple[list[int] | None, str]:
    """The processes each node runs and what says so: SLURM's tasks-per-node list, else one count for every node
    (LOCAL_WORLD_SIZE, SLURM_NTASKS_PER_NODE), else None and why not."""
    if tasks_list is not None and tasks is not None:
        return tasks, f"{tasks_list[0]}={tasks_list[1]}"
    if local is not None:
        if world_size % local[1]:
            return None, f"{local[0]}={local[1]} does not divide the {world_size} processes evenly among the nodes"
        return [local[1]] * (world_size // local[1]), f"{local[0]}={local[1]} on each node"
    return None, f"nothing says how many of the {world_size} processes run on each of the {num_nodes} nodes"


def node_layout(world_size: int, num_nodes: int, counts: list[int] | None, source: str,
                distribution: tuple[str, str] | None) -> tuple[list[int] | None, str]:
    """The processes on each node when they fill the nodes in blocks, and what says so; else None and why not.

    `distribution` is SLURM_DISTRIBUTION as (name, value) when the counts are SLURM's. Where every node
    runs one task every distribution places task i on node i.
    """
    if world_size == 1 or num_nodes == 1:
        return [world_size], "one node"
    if counts is None:
        return None, source
    if sum(counts) != world_size or len(counts) != num_nodes:
        return None, f"{source} lists {sum(counts)} tasks on {len(counts)} nodes, not {world_size} on {num_nodes}"
    if distribution is not None and any(count != 1 for count in counts):
        kind = node_distribution(distribution[1])
        if kind != "block":
            return None, f"{distribution[0]}={distribution[1]} places the tasks {kind}, not in blocks"
    return counts, f"{source}, in blocks"


def place(rank: int, layout: tuple[list[int] | None, str], known: dict[str, tuple[str, int] | None],
          names: dict[str, str]) -> tuple[dict[str, int], str]:
    """{"node_rank": n, "local_rank": l} of `rank` in `layout` (from `node_layout`) and how it was derived.

    `known` holds the one that was given, as (its variable, its value), and None for each missing one;
    `names` the variable that would give each. A given value the layout contradicts is refused too: the
    layout is then not the block one, and the other value cannot be derived from it.
    """
    counts, how = layout
    missing = " and ".join(names[field] for field, given in known.items() if given is None)
    if counts is None:
        verb = "are" if " and " in missing else "is"
        raise UserError(f"{missing} {verb} not set, and {how}: which node rank {rank} runs on and its place "
                        f"there cannot be derived. Set {missing} for every process (srun sets SLURM_NODEID and "
                        "SLURM_LOCALID for each task; torchrun GROUP_RANK and LOCAL_RANK).")
    derived = dict(zip(("node_rank", "local_rank"), block_placement(counts, rank)))
    for field, given in known.items():  # on one node the node rank is certain, whatever the local rank given
        if given is not None and given[1] != derived[field] and len(counts) > 1:
            raise UserError(f"{given[0]}={given[1]} does not fit {how}, where rank {rank} is local rank "
                            f"{derived['local_rank']} of node {derived['node_rank']}; set {missing} too.")
    return derived, how
