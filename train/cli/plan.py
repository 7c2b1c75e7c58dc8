"""`python -m train plan --config X --nodes N --gpus G`: the memory a run will hold, before the job.

Per node (the graph shared once in /dev/shm or on node-local disk, and the peak while it is loaded),
per rank (host memory) and per GPU, from the dataset's published sizes (or the shapes in the headers of
your own files), never by loading it; the terms are in train/plan/terms.py, each calibrated against
real ranks (`make bench BENCH=plan`). Compared with what a node and a GPU have, where that can be known
(--node-memory / --gpu-memory, else `sinfo` for the partition: its nodes' memory and GPU type); a plan that cannot
fit is refused (exit 2) naming the numbers, and so is sampler.device=cuda where the run would fall back
to sampling on the CPU (train/graph/sampling/device_plan.py decides, for the run and for the plan). "fits" only
when node and GPU memory are known; else "fits what is known" and what is not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from train.config import Config
from train.errors import UserError
from train.loop.killed_rank import NODE_MEMORY_REMEDIES, figures_of_plan, figures_text, memory_words
from train.plan.terms import GIB, GraphSize, Plan, make_plan, shared_graph_bytes

__all__ = ["GraphSize", "Plan", "format_plan", "graph_size", "make_plan", "refusals", "shared_graph_bytes"]

def graph_size(config: Config) -> GraphSize:
    """The graph's size without loading it, as its dataset kind knows it: published, computed (synthetic), or
    from file headers (train/graph/datasets/kinds.py)."""
    from train.graph.datasets.loading import dataset_kind

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
    from train.plan.gpu_models import partition_gpu_memory

    if given_gib is not None:
        return int(given_gib * GIB), "--gpu-memory"
    asked = f"sinfo{' -p ' + partition if partition else ''}"
    out, why = _ask(["sinfo", "--noheader", "--format=%G"] + ([f"--partition={partition}"] if partition else []))
    if out is not None:
        size, why = partition_gpu_memory(out.splitlines())
        if size is not None:
            return size, f"{asked}: {why}"
        why = f"{asked}: {why}"
    return None, f"unknown: {why}; the GPU total is not checked: give --gpu-memory GiB (make submit: GPU_MEMORY=GiB)"


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
        if not items:
            continue
        for i, (item, value) in enumerate(items.items()):
            lines.append(f"{('per ' + scope) if i == 0 else '':<9} {item:<56} {memory_words(value):>11}")
        if scope in capacity:
            cap, source = capacity[scope]
            lines.append(f"{'':<9} {'a ' + scope + ' has':<56} {memory_words(cap) if cap else '?':>11}  ({source})")
    lines += plan.notes
    return "\n".join(lines)


def refusals(plan: Plan) -> list[str]:
    found = []
    cap, source = plan.node_capacity
    if cap is not None and plan.node_peak > cap:
        found.append(f"a node needs {memory_words(plan.node_peak)} at its peak but has {memory_words(cap)} ({source}): "
                     f"{NODE_MEMORY_REMEDIES}")
    if plan.fallback:
        found.append(plan.fallback + " Ask for what the run would do (sampler.device=cpu), or use GPUs with more "
                     "memory")
    cap, source = plan.gpu_capacity
    if cap is not None and plan.rows["GPU"] and plan.gpu_total > cap:
        found.append(f"a GPU needs {memory_words(plan.gpu_total)} but has {memory_words(cap)} ({source}): lower "
                     "sampler.batch_size, the fanouts or model.hidden, or keep the graph on the host "
                     "(sampler.device=cpu)")
    return found


def add_arguments(parser) -> None:
    from train.cli.fit import add_config_arguments

    add_config_arguments(parser)
    parser.add_argument("--nodes", type=int, default=int(os.environ.get("NODES", 1)),
                        help="nodes (default $NODES or 1)")
    parser.add_argument("--gpus", type=int, default=None,
                        help="ranks in all, one per GPU, spread evenly over the nodes (as make submit's GPUS)")
    parser.add_argument("--cpu", action="store_true", help="no GPUs: ranks without a per-GPU part (GPUS_PER_TASK=0)")
    parser.add_argument("--partition", default=os.environ.get("PARTITION", ""),
                        help="asked of sinfo for node memory and GPU type")
    parser.add_argument("--node-memory", type=float, default=None, metavar="GIB", help="memory of one node, GiB")
    parser.add_argument("--gpu-memory", type=float, default=None, metavar="GIB",
                        help="memory of one GPU, GiB (default: from the partition's GPU type)")
    parser.add_argument("--node-memory-unknown", default="", metavar="WHY",
                        help="sinfo is not asked (for node memory nor GPU type): the caller knows it cannot "
                             "answer (make submit: no controller)")
    parser.add_argument("--figures-file", default="", metavar="PATH",
                        help="also write a rank's peak, a node's memory and the shared graph there, one line "
                             "(make submit gives it to the job, which names them if a rank is killed)")


def main(args) -> int:
    from train.cli.fit import config_of

    config = config_of(args)
    ranks = args.gpus if args.gpus is not None else args.nodes
    if args.nodes < 1 or ranks < 1:
        raise UserError(f"--nodes={args.nodes} and --gpus={ranks} must be positive integers.")
    if ranks % args.nodes:
        raise UserError(f"--gpus={ranks} is not a multiple of --nodes={args.nodes}; ranks are spread evenly.")
    for flag, value in (("--node-memory", args.node_memory), ("--gpu-memory", args.gpu_memory)):
        if value is not None and value <= 0:
            raise UserError(f"{flag}={value} must be a positive number of GiB.")
    if args.cpu:
        gpu_capacity = (None, "no GPUs")
    elif args.node_memory_unknown and args.gpu_memory is None:  # sinfo cannot answer: not asked again
        gpu_capacity = (None, f"unknown: {args.node_memory_unknown}; give --gpu-memory GiB (make submit: GPU_MEMORY)")
    else:
        gpu_capacity = gpu_memory(args.gpu_memory, args.partition)
    plan = make_plan(config, graph_size(config), args.nodes, ranks, gpus=not args.cpu, gpu_bytes=gpu_capacity[0])
    plan.node_capacity = (None, f"unknown: {args.node_memory_unknown}; give --node-memory GiB") \
        if args.node_memory_unknown else node_memory(args.partition, args.node_memory)
    plan.gpu_capacity = gpu_capacity
    print(format_plan(plan, config), flush=True)
    found = refusals(plan)
    if found:
        raise UserError("this plan does not fit: " + "; ".join(found) + ".")
    print(verdict(plan, gpus=not args.cpu), flush=True)
    if args.figures_file:
        Path(args.figures_file).write_text(figures_text(figures_of_plan(plan, plan.node_capacity[0])) + "\n")
    return 0


def verdict(plan: Plan, gpus: bool) -> str:
    """"fits" only when everything the run depends on is known; else what is not."""
    unknown = [] if plan.node_capacity[0] else ["node memory unknown"]
    if gpus and plan.gpu_capacity[0] is None:
        unknown.append("GPU memory unknown")
    return "fits" if not unknown else f"fits what is known ({', '.join(unknown)})"
