"""A rank that a signal ended, in words: which rank, on which node, the signal and its likely cause.

A rank killed by a signal cannot say so itself. Its launcher sees the signal (torchrun's agent in `make run`,
login/launch.py; srun in a job, whose status jobs/train.sbatch reports); the survivors see only that it went
silent (train/loop/failure_report.py). Both say it in the words made here, from numbers: the memory plan's
figures (train/plan/terms.py) against what the node has tell whether the kernel's out-of-memory killer is the
likely cause, and so does sacct's MaxRSS where sacct answers. The words need only the standard library.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

GIB = 2**30
# What lowers a node's memory peak, as the memory plan's refusal says it (train/cli/plan.py).
NODE_MEMORY_REMEDIES = ("use nodes with more memory, fewer ranks per node, data.share=node (one copy of the graph "
                        "per node), or eval.mode=sampled")


@dataclass(frozen=True)
class MemoryFigures:
    """What the memory plan said and what the node has, in bytes; None where it is not known."""

    rank_peak: int | None = None  # one rank at its peak (the plan's "per rank" peak)
    node_memory: int | None = None  # the memory of the node
    shared_graph: int = 0  # the graph shared once per node in /dev/shm (data.share=node); 0: none
    max_rss: str = ""  # sacct's MaxRSS of the step, as sacct wrote it ("" where sacct did not answer)


def _gib(n: int) -> str:
    return f"{n / GIB:,.1f} GiB"


def memory_sentence(figures: MemoryFigures, who: str = "this rank", node: str = "the node") -> str:
    """"the plan said this rank peaks at X GiB and the node has Y", with what is known of it."""
    peak = f"the plan said {who} peaks at {_gib(figures.rank_peak)}" if figures.rank_peak is not None else \
        "the plan's figures are not known here (`python -m train plan` prints them)"
    has = f"{node} has {_gib(figures.node_memory)}" if figures.node_memory is not None else \
        f"{node}'s memory is not known"
    rss = f"; sacct says the step's MaxRSS was {figures.max_rss}" if figures.max_rss else ""
    return f"{peak} and {has}{rss}"


def likely_cause(signum: int, figures: MemoryFigures) -> str:
    """Why a process usually dies of `signum`, with the figures that bear on it."""
    if signum == signal.SIGKILL:
        return (f"often the kernel's out-of-memory killer: {memory_sentence(figures)}; if it was, "
                f"{NODE_MEMORY_REMEDIES}. Else a kill -9, or SLURM ending the step")
    if signum == signal.SIGBUS:
        if figures.shared_graph:
            return (f"a memory-mapped file could not be backed, most often a full /dev/shm under the node-shared "
                    f"graph ({_gib(figures.shared_graph)}, data.share=node): see `df -h /dev/shm` on that node, "
                    "or use data.share=process")
        return "a memory-mapped file could not be read: removed, truncated, or its file system gone"
    if signum == signal.SIGSEGV:
        return ("a crash in native code (torch, PyG, a CUDA or NCCL library, or an extension built for another "
                "version); the rank's output above holds its Python stack")
    if signum == signal.SIGABRT:
        return "a fatal error in native code (a C++ exception, a CUDA or NCCL error); its message is above"
    try:
        return signal.strsignal(signum) or "an unexpected signal"
    except ValueError:  # a number no signal has
        return "an unexpected signal"


def killed_rank_message(signum: int, rank: int | str, node: str, figures: MemoryFigures, pid: int | None = None) -> str:
    """The launcher's line for a rank that `signum` ended: its rank, node, the signal and the likely cause."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    where = f"on {node}" + (f" (pid {pid})" if pid is not None else "")
    return f"rank {rank} {where} was ended by {name}: {likely_cause(signum, figures)}."


def silent_rank_cause(figures: MemoryFigures) -> str:
    """What a survivor can say of a rank that went silent without a word: its launcher sees the signal."""
    return (f"killed (often by the kernel's out-of-memory killer: {memory_sentence(figures, 'a rank', 'this node')}), "
            "crashed (SIGSEGV, or SIGBUS from a full /dev/shm), or its node was lost; "
            "the launcher's line names the signal")


def node_memory_bytes() -> int | None:
    """This machine's physical memory, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def plan_figures(config, nodes: int, ranks: int, gpus: bool) -> MemoryFigures:
    """The memory plan's figures for this run (train/plan/terms.py) and this node's memory; unknown where the
    plan cannot be made (it is asked after a failure: it must not fail in turn)."""
    memory = node_memory_bytes()
    try:
        from train.graph.data import dataset_kind
        from train.graph.segments import shares_graph
        from train.plan.terms import make_plan, shared_graph_bytes

        size = dataset_kind(config.data).plan_size(config.data)
        plan = make_plan(config, size, nodes, ranks, gpus=gpus)
        shared = shared_graph_bytes(size) if shares_graph(config.data.share, ranks // nodes) else 0
        return MemoryFigures(rank_peak=plan.rank_peak, node_memory=memory, shared_graph=shared)
    except Exception:  # a plan that cannot be made leaves the figures unknown, and the message says so
        return MemoryFigures(node_memory=memory)
