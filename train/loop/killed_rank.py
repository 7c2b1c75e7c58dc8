"""A rank that a signal ended, in words: which rank, on which node, the signal and its likely cause.

A rank killed by a signal cannot say so itself. Its launcher sees the signal (torchrun's agent in `make run`,
login/launch.py; srun in a job, whose status jobs/train.sbatch reports); the survivors see only that it went
silent (train/loop/failure_report.py). Both say it in the words made here, from numbers: the memory plan's
figures (train/plan/terms.py) against what the node has tell whether the kernel's out-of-memory killer is the
likely cause, and so does sacct's MaxRSS where sacct answers. In a job, srun's first "task N: <signal>"
line says which task a signal ended (`first_killed_task`) and `make submit` hands the plan's figures to the
job as text (`figures_text`). The words need only the standard library: jobs/train.sbatch runs them with the
node's own Python (train/cli/killed.py).
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, fields

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


# srun's line for tasks that ended badly: "srun: error: n2: task 3: Killed", "... tasks 0-1: Segmentation fault"
SRUN_TASK_LINE = re.compile(r"^srun: error: (?P<node>[^:\s]+): tasks? (?P<task>\d+)[\d,-]*: (?P<words>.+)$")


def memory_words(n: int) -> str:
    """Bytes as the memory plan prints them: GiB, or MiB below one GiB (train/cli/plan.py uses it too)."""
    return f"{n / GIB:,.1f} GiB" if n >= GIB else f"{n / 2**20:,.1f} MiB"


def memory_sentence(figures: MemoryFigures, who: str = "this rank", node: str = "the node") -> str:
    """"the plan said this rank peaks at X GiB and the node has Y", with what is known of it."""
    peak = f"the plan said {who} peaks at {memory_words(figures.rank_peak)}" if figures.rank_peak is not None else \
        "the plan's figures are not known here (`python -m train plan` prints them)"
    has = f"{node} has {memory_words(figures.node_memory)}" if figures.node_memory is not None else \
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
                    f"graph ({memory_words(figures.shared_graph)}, data.share=node): see `df -h /dev/shm` on that "
                    "node, or use data.share=process")
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


def figures_text(figures: MemoryFigures) -> str:
    """The figures as one word per figure (NAME=BYTES; '-' where unknown), for the job's environment."""
    return " ".join(f"{f.name}={'-' if getattr(figures, f.name) is None else getattr(figures, f.name)}"
                    for f in fields(MemoryFigures) if f.name != "max_rss")


def parse_figures(text: str) -> MemoryFigures:
    """`figures_text`'s words back as figures; what is missing or not a number stays unknown."""
    known = {f.name for f in fields(MemoryFigures)} - {"max_rss"}
    given = dict(word.split("=", 1) for word in text.split() if "=" in word)
    return MemoryFigures(**{name: int(value) for name, value in given.items() if name in known and value.isdigit()})


def signal_of_words(words: str) -> int | None:
    """The signal whose description (as srun prints it, strsignal's) is `words`: Killed -> SIGKILL."""
    words = words[:-len(" (core dumped)")] if words.endswith(" (core dumped)") else words
    return next((int(sig) for sig in signal.Signals if signal.strsignal(sig) == words), None)


def first_killed_task(srun_lines: list[str]) -> tuple[str, int, int] | None:
    """(node, task, signal) when srun's first line about a task says a signal ended it, else None.

    Only the first: srun --kill-on-bad-exit then ends the others, whose lines say "Killed" too.
    """
    for line in srun_lines:
        found = SRUN_TASK_LINE.match(line.strip())
        if found:
            signum = signal_of_words(found["words"])
            return None if signum is None else (found["node"], int(found["task"]), signum)
    return None


def sacct_max_rss(text: str) -> str:
    """The training step's MaxRSS from `sacct -n -P -o JobID,MaxRSS,MaxRSSNode` ("" where it has none): the last
    numbered step's, as sacct writes it, with its node."""
    steps = [line.split("|") for line in text.splitlines() if re.match(r"^\d+(_\d+)?\.\d+\|", line)]
    if not steps or len(steps[-1]) < 3 or not steps[-1][1]:
        return ""
    _step, rss, node = steps[-1][:3]
    return f"{rss} (on {node})" if node else rss
