"""`data.features`: which layout a run's features take, decided by one function the run and the plan both call.

A minimal version: `auto` keeps a copy per node. The memory plan's version (the node's own limit against the graph,
issue 40 item 5) replaces this module at merge; its callers need only `resolved_layout`.
"""

from __future__ import annotations

LAYOUTS = ("node", "sharded")  # what data.features resolves to (auto is decided)


def resolved_layout(asked: str, nodes: int, **_facts) -> tuple[str, str]:
    """The layout a run takes for `data.features=asked` on `nodes` nodes, and a line for the log ('' when none).

    Args:
        asked: data.features: node, sharded or auto.
        nodes: the job's nodes (machines).
        _facts: what the plan's version decides `auto` from (the graph's bytes, the node's limit); unused here.

    Returns:
        (layout, note): layout is node or sharded.
    """
    if asked == "sharded" and nodes <= 1:
        return "node", ("data.features=sharded on one node changes nothing: the node holds every row either way, "
                        "so the run keeps a copy per node.")
    if asked == "auto":
        return "node", ""
    return asked, ""
