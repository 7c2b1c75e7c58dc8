"""`python -m train doctor`: check the allocation on every rank before a long run.

Each rank collects one record (its env contract, device, network view, data and run dir)
and checks alone what it can before any rendezvous: the master address resolves, it is
reachable, the port is free on rank 0's host. A bad MASTER_ADDR thus fails fast, with a
message naming address and port, instead of hanging. The records then go to rank 0 through
the TCPStore itself, not through a process group, so the table still appears when the
collective backend is what is broken. Rank 0 runs the cross-rank checks, prints one table,
and only when every check passed times an all-reduce and a barrier over the real backend
(gloo on CPU, NCCL on GPUs).

Rooms: findings (verdicts, pure helpers), checks (pure cross-rank checks), table (what rank 0
prints), probes (what one rank sees), rendezvous (the store, the verdict, the timed collectives),
cli (the entry: arguments, and the one place the process environment is read).
"""

from train.doctor.cli import add_arguments, main

__all__ = ["add_arguments", "main"]
