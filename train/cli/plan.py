"""`python -m train plan --config X --nodes N --gpus G`: the memory a run will hold, before the job.

Per node (the graph shared once in /dev/shm or on node-local disk, and the peak while it is loaded),
per rank (host memory) and per GPU, from the dataset's published sizes (or the shapes in the headers of
your own files), never by loading it; the terms are in train/plan/terms.py, each calibrated against
real ranks (`make bench BENCH=plan`). Compared with what a node and a GPU have, where that can be known
(--node-memory / --gpu-memory, else `sinfo` for the partition: its nodes' memory and GPU type); a plan that cannot
fit is refused (exit 2) naming the numbers, and so is sampler.device=cuda where the run would fall back
to sampling on the CPU (train/graph/sampling/device_plan.py decides, for the run and for the plan). "fits" only
when node and GPU memory are known; else "fits what is known" and what is not.

This module reads the arguments without torch (`python -m train --help` imports it); the plan itself, with torch
(the model is built on the meta device): train/cli/plan_run.py.
"""

from __future__ import annotations

import os
from pathlib import Path

from train.cli.fit import add_config_arguments, config_of
from train.config import load_config
from train.errors import UserError
from train.sweep import read_list


def add_arguments(parser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--nodes", type=int, default=int(os.environ.get("NODES", 1)),
                        help="nodes (default $NODES or 1)")
    parser.add_argument("--gpus", type=int, default=None,
                        help="ranks in all, one per GPU, over the nodes (as make submit's GPUS); the busiest node's "
                             "are planned")
    parser.add_argument("--cpu", action="store_true", help="no GPUs: ranks without a per-GPU part (GPUS_PER_TASK=0)")
    parser.add_argument("--partition", default=os.environ.get("PARTITION", ""),
                        help="asked of sinfo for node memory and GPU type")
    parser.add_argument("--node-memory", type=float, default=None, metavar="GIB", help="memory of one node, GiB")
    parser.add_argument("--gpu-memory", type=float, default=None, metavar="GIB",
                        help="memory of one GPU, GiB (default: from the partition's GPU type)")
    parser.add_argument("--mem-mb", type=int, default=None, metavar="MB",
                        help="the job's --mem per node in MB (make submit's MEM; 0: the whole node): the run may hold "
                             "no more, and data.features=auto weighs it as the run does")
    parser.add_argument("--node-memory-unknown", default="", metavar="WHY",
                        help="sinfo is not asked (for node memory nor GPU type): the caller knows it cannot "
                             "answer (make submit: no controller)")
    parser.add_argument("--figures-file", default="", metavar="PATH",
                        help="also write a rank's peak, a node's memory and the shared graph there, one line "
                             "(make submit gives it to the job, which names them if a rank is killed)")
    parser.add_argument("--sweep-file", default="", metavar="PATH",
                        help="a sweep's list file (make sweep; train/sweep.py): each line an element's overrides, "
                             "after the command line's; each element's plan, and the largest's table decides")


def main(args) -> int:
    config = config_of(args)
    ranks = args.gpus if args.gpus is not None else args.nodes
    if args.nodes < 1 or ranks < 1:
        raise UserError(f"--nodes={args.nodes} and --gpus={ranks} must be positive integers.")
    # GPUS a multiple of NODES is make submit's rule, checked in its one home (jobs/submit.sh, which chooses the
    # job's layout); the plan plans any layout it is given at its busiest node (train/plan/terms.py make_plan).
    for flag, value in (("--node-memory", args.node_memory), ("--gpu-memory", args.gpu_memory)):
        if value is not None and value <= 0:
            raise UserError(f"{flag}={value} must be a positive number of GiB.")
    if args.mem_mb is not None and args.mem_mb < 0:
        raise UserError(f"--mem-mb={args.mem_mb} must be a number of MB, or 0 for the whole node.")
    from train.cli.plan_run import print_plan, print_sweep_plan  # torch and PyG: the model on the meta device

    if args.sweep_file:
        elements = read_list(Path(args.sweep_file))
        return print_sweep_plan(lambda point: load_config(args.config, [*args.overrides, *point], args.config_knob),
                                elements, args, ranks)
    return print_plan(config, args, ranks)
