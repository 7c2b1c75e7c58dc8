"""The torch half of `python -m train plan` (train/cli/plan.py), once its arguments are known to be good: the
memory plan (train/plan/terms.py: the model built on the meta device) against what a node and a GPU have, the
refusals and the verdict."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from train.cluster.memory_limit import smallest
from train.config import Config
from train.errors import UserError
from train.graph.datasets.lookup import dataset_kind
from train.loop.killed_rank import figures_text, memory_words
from train.plan.advice import Assessed, Job, advice_words, advise, assess
from train.plan.gpu_models import partition_gpu_memory
from train.plan.largest import peak_lines
from train.plan.memory_figures import figures_of_plan
from train.plan.sharded import SHARDED, gpu_need, layout_lines, node_need
from train.plan.terms import GIB, GraphSize, Plan, make_plan, shared_graph_bytes
from train.sweep import point_of

__all__ = ["GraphSize", "Plan", "format_plan", "graph_size", "make_plan", "shared_graph_bytes"]


def graph_size(config: Config) -> GraphSize:
    """The graph's size without loading it, as its dataset kind knows it: published, computed (synthetic), or
    from file headers (train/graph/datasets/kinds.py)."""
    return dataset_kind(config.data).plan_size(config.data)


# ---- what the machines have ----------------------------------------------------------------------

def _ask(argv: list[str], timeout: float = 20) -> tuple[str | None, str]:
    """(stdout, "") of a command that answered, else (None, why not, in words)."""
    if shutil.which(argv[0]) is None:
        return None, f"{argv[0]} is not on PATH here"
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"{argv[0]} did not answer within {timeout:.0f} s"
    except OSError as exc:
        return None, f"{argv[0]} could not be started ({exc.strerror})"
    if done.returncode != 0:
        said = " ".join(done.stderr.split())[:200]
        return None, f"{argv[0]} failed (exit status {done.returncode}{': ' + said if said else ''})"
    return done.stdout, ""


def _run(argv: list[str]) -> str | None:
    return _ask(argv)[0]


def _sinfo_unknown(partition: str, out: str | None, why: str) -> str:
    """Why sinfo gave no node memory, naming the partition and what is therefore not checked."""
    asked = f"sinfo{' -p ' + partition if partition else ''}"
    if out is not None:
        listed = " ".join(out.split())[:80]
        why = f"{asked} printed {listed!r}, not a memory size" if listed else \
            f"{asked} lists no node{f' (is {partition!r} a partition of this cluster?)' if partition else ''}"
    where = f"partition {partition!r}" if partition else "the default partition"
    return (f"unknown: {why}; the node peak is not checked against the memory of a node of {where}: give "
            "--node-memory GiB, or run where sinfo answers")


def node_memory(partition: str, given_gib: float | None) -> tuple[int | None, str]:
    """Bytes of memory a node has: --node-memory, else the smallest node of the partition in sinfo.

    sinfo's figure is the RealMemory slurm.conf declares. It is not the node's where SLURM was never told
    (RealMemory's default, 1 MB) or where slurmd does not check the declaration against the machine
    (SlurmdParameters=config_overrides, "generally only useful for testing"): then the memory is unknown.
    """
    if given_gib is not None:
        return int(given_gib * GIB), "--node-memory"
    argv = ["sinfo", "--noheader", "--format=%m"] + ([f"--partition={partition}"] if partition else [])
    out, why = _ask(argv)
    sizes = [int(v.rstrip("+")) for v in (out or "").split() if v.rstrip("+").isdigit()]
    where = f"sinfo{' -p ' + partition if partition else ''}"
    if sizes and min(sizes) <= 1:
        return None, f"unknown ({where}: RealMemory is not configured; give --node-memory GiB)"
    if sizes and "config_overrides" in _slurmd_parameters():
        return None, (f"unknown ({where} says {min(sizes)} MB, but SlurmdParameters=config_overrides: slurmd does "
                      "not check it against the node; give --node-memory GiB)")
    if sizes:
        return min(sizes) * 2**20, f"{where}: smallest node"
    return None, _sinfo_unknown(partition, out, why)


def _slurmd_parameters() -> str:
    """The SlurmdParameters of `scontrol show config` ('' when it cannot be asked)."""
    for line in (_run(["scontrol", "show", "config"]) or "").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "SlurmdParameters":
            return value.strip()
    return ""


def gpu_memory(given_gib: float | None, partition: str = "") -> tuple[int | None, str]:
    """Bytes of one of the job's GPUs: --gpu-memory (make submit's GPU_MEMORY), else the GPU type the partition's
    nodes name in sinfo's GRES (train/plan/gpu_models.py), else unknown. Never this machine's GPU: `make submit`
    runs on a login node, whose GPU (a small visualisation card, or none) is not the job's."""
    if given_gib is not None:
        return int(given_gib * GIB), "--gpu-memory"
    asked = f"sinfo{' -p ' + partition if partition else ''}"
    out, why = _ask(["sinfo", "--noheader", "--format=%G"] + ([f"--partition={partition}"] if partition else []))
    if out is not None:
        size, why = partition_gpu_memory(out.splitlines())
        if size is not None:
            return size, f"{asked}: {why}"
        why = f"{asked}: {why}"
    return None, (f"unknown: {why}; the GPU total is not checked: give --gpu-memory GiB (make plan, make submit: "
                  "GPU_MEMORY=80G)")


# ---- printing and the verdict --------------------------------------------------------------------

def format_plan(plan: Plan, config: Config) -> str:
    size = plan.size
    values = [f"{size.edge_features} features" if size.edge_features else "", "a weight" if size.edge_weight else ""]
    edges = f"{size.edges:,} edges" + (f" ({' and '.join(v for v in values if v)} each)" if size.edge_floats else "")
    lines = [f"memory plan: {config.data.name} ({size.nodes:,} nodes, {edges}, {size.features} features), "
             f"{plan.nodes} node(s) x {plan.ranks_per_node} rank(s), data.share={plan.share}, "
             f"eval.mode={config.eval.mode}"]
    capacity = {"node": plan.node_capacity, "GPU": plan.gpu_capacity}
    for scope, items in plan.rows.items():
        if not items or scope == SHARDED:  # printed beside the layout (layout_lines)
            continue
        for i, (item, value) in enumerate(items.items()):
            bound = "  (bound)" if item in plan.bounds else ""
            lines.append(f"{('per ' + scope) if i == 0 else '':<9} {item:<56} {memory_words(value):>11}{bound}")
        if scope in capacity:
            cap, source = capacity[scope]
            lines.append(f"{'':<9} {'a ' + scope + ' has':<56} {memory_words(cap) if cap else '?':>11}  ({source})")
    lines += plan.notes
    return "\n".join(lines)


def verdict(plan: Plan, gpus: bool) -> str:
    """"fits" only when everything the run depends on is known; else what is not."""
    unknown = [] if plan.node_capacity[0] else ["node memory unknown"]
    if gpus and plan.gpu_capacity[0] is None:
        unknown.append("GPU memory unknown")
    return "fits" if not unknown else f"fits what is known ({', '.join(unknown)})"


def capacities(args) -> tuple[tuple[int | None, str], tuple[int | None, str]]:
    """(a node's, a GPU's) memory in bytes and where it was learned, asked once (sinfo) for every plan made."""
    if args.cpu:
        gpu_capacity = (None, "no GPUs")
    elif args.node_memory_unknown and args.gpu_memory is None:  # sinfo cannot answer: not asked again
        gpu_capacity = (None, f"unknown: {args.node_memory_unknown}; give --gpu-memory GiB (make submit: GPU_MEMORY)")
    else:
        gpu_capacity = gpu_memory(args.gpu_memory, args.partition)
    node = (None, f"unknown: {args.node_memory_unknown}; give --node-memory GiB") \
        if args.node_memory_unknown else node_memory(args.partition, args.node_memory)
    node_capacity = smallest([node, (args.mem_mb * 2**20 if args.mem_mb else None, "MEM: the job's --mem")], node[1])
    return node_capacity, gpu_capacity


def plan_text(plan: Plan, config: Config, choice) -> str:
    """The plan's table, the layout it takes (`choice`) and what makes its peak: what a plan prints."""
    return "\n".join([format_plan(plan, config), *layout_lines(plan, choice), *peak_lines(plan, choice)])


def job_of(config: Config, args, ranks: int, node_capacity, gpu_capacity) -> Job:
    """The job `args` describes for `config`, against the capacities given."""
    return Job(config, graph_size(config), args.nodes, ranks, not args.cpu, node_capacity, gpu_capacity)


def print_plan(config: Config, args, ranks: int) -> int:
    """Print the plan of `config` on `args.nodes` nodes of `ranks` ranks in all and its verdict; `UserError` where it
    does not fit, with the changes that would make it fit. Returns the exit status."""
    job = job_of(config, args, ranks, *capacities(args))
    now = assess(job)  # the layout taken is the run's own decision (run_layout)
    plan = now.plan
    print(plan_text(plan, config, now.choice), flush=True)
    if now.problems:
        raise UserError(f"this plan does not fit: {'; '.join(now.problems.values())}. "
                        f"{advice_words(job, advise(job, now))}.")
    return fitted(plan, args)


def fitted(plan: Plan, args) -> int:
    """The verdict of a plan that fits, and its figures for the job (--figures-file)."""
    print(verdict(plan, gpus=not args.cpu), flush=True)
    if args.figures_file:
        Path(args.figures_file).write_text(figures_text(figures_of_plan(plan, plan.node_capacity[0])) + "\n")
    return 0


def weight(assessed: Assessed) -> tuple[int, int, int]:
    """How large a plan is, largest first: a node's need, then a GPU's, then a rank's."""
    plan, choice = assessed.plan, assessed.choice
    return node_need(plan, choice), gpu_need(plan, choice), plan.rank_peak


def print_sweep_plan(load, elements: list[tuple[str, ...]], args, ranks: int) -> int:
    """A sweep's plans (make sweep): each element's line (its point's plan: the seed changes no memory), then the
    largest plan's table, which decides whether the sweep fits; every point that does not fit is named. `load`:
    overrides -> the element's Config."""
    node_capacity, gpu_capacity = capacities(args)
    by_point: dict[tuple[str, ...], tuple[Config, Assessed]] = {}
    for overrides in elements:
        point = point_of(overrides)
        if point not in by_point:
            config = load(point)
            by_point[point] = (config, assess(job_of(config, args, ranks, node_capacity, gpu_capacity)))
    for index, overrides in enumerate(elements):
        assessed = by_point[point_of(overrides)][1]
        plan, choice = assessed.plan, assessed.choice
        gpu = f", a GPU {memory_words(gpu_need(plan, choice))}" if plan.rows["GPU"] else ""
        print(f"element {index:<3} {' '.join(overrides)}: a rank {memory_words(plan.rank_peak)}, a node "
              f"{memory_words(node_need(plan, choice))}{gpu}", flush=True)
    largest = max(by_point, key=lambda point: weight(by_point[point][1]))
    config, assessed = by_point[largest]
    plan = assessed.plan
    print(f"the largest plan, {' '.join(largest) or 'every point'}:", flush=True)
    print(plan_text(plan, config, assessed.choice), flush=True)
    refused = {point: list(entry[1].problems.values())
               for point, entry in sorted(by_point.items(), key=lambda item: weight(item[1][1]), reverse=True)
               if entry[1].problems}
    if refused:
        first, reasons = next(iter(refused.items()))
        named = ", ".join(f"({' '.join(point)})" for point in refused)
        raise UserError(f"this sweep does not fit: {len(refused)} of its {len(by_point)} points do not, {named}; the "
                        f"largest of them, {' '.join(first) or 'every point'}: " + "; ".join(reasons) + ".")
    return fitted(plan, args)
