"""Where a job's ranks ran, read from the line every rank prints after rendezvous (train/cli/fit), and where
they should run: SLURM's block layout over the job's nodes, in the job's node order, the master on the first.

Jobs of the test cluster run on whichever of its nodes SLURM picks (a two-node job on n3 and n4 when n1 and n2
are still completing the previous job), so tests compare with the job's own node list, never with n1, n2.
"""
from __future__ import annotations

import re

# "<label>: rank R/W on HOST (node N, local rank L, master ADDR:PORT from SOURCE)", srun --label's prefix first
RANK_LINE = re.compile(r"^(\d+): rank (\d+)/(\d+) on (\S+) "
                       r"\(node (\d+), local rank (\d+), master (\S+):(\d+) from ([^)]*)\)$", re.M)


def placement(text: str, world: int | None = None) -> dict[int, tuple[str, str]]:
    """rank -> (host, master "addr:port") from a job's output; every line's srun label must be its rank, and
    its world size `world` where given."""
    out = {}
    for line in RANK_LINE.finditer(text):
        label, rank, size, host, _node, _local, addr, port, _src = line.groups()
        if label != rank or (world is not None and int(size) != world):
            raise AssertionError(f"rank line with another label or world size than expected ({world}): {line[0]}")
        out[int(rank)] = (host, f"{addr}:{port}")
    return out


def sources(text: str) -> set[str]:
    """Which variables gave the ranks their master (each rank says)."""
    return {src for *_x, src in RANK_LINE.findall(text)}


def block_placement(nodes: list[str], world: int, port: int | str) -> dict[int, tuple[str, str]]:
    """rank -> (host, master) for `world` ranks spread evenly in blocks over `nodes`, as srun places a job's
    tasks (ranks 0..k-1 on the first node, ...), every rank meeting at the first node."""
    per_node, rest = divmod(world, len(nodes))
    if rest or not per_node:
        raise ValueError(f"{world} ranks do not spread evenly over {len(nodes)} nodes")
    return {rank: (nodes[rank // per_node], f"{nodes[0]}:{port}") for rank in range(world)}
