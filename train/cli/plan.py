"""`python -m train plan --config X --nodes N --gpus G`: the memory a run will hold, before the job.

Per node (the graph shared once in /dev/shm or on node-local disk, and the peak while local
rank 0 loads it), per rank (host memory) and per GPU, from the dataset's published sizes (or
the shapes in the headers of your own files), never by loading it. Compared with what a node
and a GPU have, where that can be known (--node-memory / --gpu-memory, else `sinfo` for the
partition, else nvidia-smi here); a plan that cannot fit is refused (exit 2) naming the numbers.
The figures are estimates: the graph's bytes are exact (the sizes `data.share=node` writes), the
per-rank and per-GPU working sets are upper bounds from the batch sizes and fanouts.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from dataclasses import dataclass, field

from train.config import Config, load_config
from train.errors import UserError

GIB = 2**30
FLOAT = 4  # bytes of a float32 feature / activation
INDEX = 8  # bytes of an int64 node id
RANK_RUNTIME_BYTES = 3 * GIB  # one rank's Python, torch, PyG and CUDA runtime in host memory (order of magnitude)
RANK_RUNTIME_CPU_BYTES = 1 * GIB  # the same without CUDA
GPU_RUNTIME_BYTES = 1 * GIB  # CUDA context, cuBLAS/cuDNN workspaces, allocator slack
ACTIVATION_COPIES = 3  # forward activations, their gradients, and the optimizer's temporaries


@dataclass(frozen=True)
class GraphSize:
    nodes: int
    edges: int  # directed edges as training sees them (both directions of an undirected edge)
    features: int
    classes: int
    split: tuple[int, int, int]  # train, val, test nodes


# Published sizes (PyG's docs, OGB's paper and leaderboards), as this project stores each graph.
KNOWN: dict[str, GraphSize] = {
    "Cora": GraphSize(2_708, 10_556, 1_433, 7, (140, 500, 1_000)),
    "CiteSeer": GraphSize(3_327, 9_104, 3_703, 6, (120, 500, 1_000)),
    "PubMed": GraphSize(19_717, 88_648, 500, 3, (60, 500, 1_000)),
    "Flickr": GraphSize(89_250, 899_756, 500, 7, (44_625, 22_312, 22_313)),
    "Reddit": GraphSize(232_965, 114_615_892, 602, 41, (153_431, 23_831, 55_703)),
    "Reddit2": GraphSize(232_965, 23_213_838, 602, 41, (153_932, 23_699, 55_334)),
    "ogbn-arxiv": GraphSize(169_343, 1_166_243, 128, 40, (90_941, 29_799, 48_603)),
    "ogbn-products": GraphSize(2_449_029, 123_718_280, 100, 47, (196_615, 39_323, 2_213_091)),
    "ogbn-papers100M": GraphSize(111_059_956, 1_615_685_872, 128, 172, (1_207_179, 125_265, 214_338)),
}


def graph_size(config: Config) -> GraphSize:
    """The graph's size without loading it: published, computed (synthetic), or from file headers."""
    from train.graph.data import check_dataset_name

    data = config.data
    check_dataset_name(data.name)
    if data.name == "synthetic":
        train = int(data.num_nodes * data.train_fraction)
        val = int(data.num_nodes * data.val_fraction)
        edges = 2 * int(data.num_nodes * data.avg_degree / 2)  # an upper bound: self-loops and repeats are dropped
        return GraphSize(data.num_nodes, edges, data.num_features, data.num_classes,
                         (train, val, data.num_nodes - train - val))
    if data.name == "files":
        return _files_size(data.path)
    if data.name not in KNOWN:
        raise UserError(f"plan does not know the size of data.name={data.name!r}; it knows synthetic, files and "
                        f"{', '.join(KNOWN)}.")
    return KNOWN[data.name]


def _files_size(path: str) -> GraphSize:
    """Shapes from the memory-mapped arrays (headers): no feature is read. `fit` checks the values."""
    from pathlib import Path

    from train.graph.graphfiles import ARRAYS, load_files, read_data_file, read_folder

    where = Path(path)
    if not where.exists() or not path:
        load_files(path)  # raises the loader's own message
    arrays = read_folder(where) if where.is_dir() else read_data_file(where)
    missing = [name for name in ARRAYS if name not in arrays]
    if missing:
        raise UserError(f"data.path={path}: {', '.join(missing)} missing; plan needs x, y and edge_index.")
    x, edges = arrays["x"], arrays["edge_index"]
    split = []
    for name in ("train", "val", "test"):
        idx, mask = arrays.get(f"{name}_idx"), arrays.get(f"{name}_mask")
        split.append(idx.numel() if idx is not None else int(mask.sum()) if mask is not None else 0)
    return GraphSize(x.size(0), edges.size(-1), x.size(-1), int(arrays["y"].max()) + 1, tuple(split))


def shared_graph_bytes(size: GraphSize) -> int:
    """What data.share=node writes once per node (train/graph/shared_graph.py's graph_tensors), from meta tensors."""
    import torch  # here: `python -m train` imports this module to build its parser
    from torch_geometric.data import Data

    from train.graph.shared_graph import graph_tensors

    meta = Data(x=torch.empty(size.nodes, size.features, device="meta"),
                y=torch.empty(size.nodes, dtype=torch.long, device="meta"),
                edge_index=torch.empty(2, size.edges, dtype=torch.long, device="meta"),
                **{f"{s}_idx": torch.empty(n, dtype=torch.long, device="meta")
                   for s, n in zip(("train", "val", "test"), size.split)})
    return graph_tensors(meta)[1]


def batch_nodes(seeds: int, fanouts: list[int], num_nodes: int) -> int:
    """An upper bound on the nodes of one sampled batch: seeds times the fanouts' products, at most N."""
    total, frontier = seeds, seeds
    for fanout in fanouts:
        frontier = num_nodes if fanout < 0 else frontier * fanout
        total += frontier
    return min(total, num_nodes)


def model_parameters(config: Config, size: GraphSize) -> int:
    """The model's real parameter count: model.name built for the graph's features and classes (on the meta
    device: no memory, no initialisation), so GAT's heads, GIN's MLPs or a user's model count as they are."""
    from train.loop.model import parameter_count

    return parameter_count(config.model, size.features, size.classes)


def model_state_bytes(params: int) -> int:
    """What training keeps per parameter: the weight, its gradient and Adam's two moments (float32)."""
    return 4 * params * FLOAT


@dataclass
class Plan:
    size: GraphSize
    nodes: int
    ranks_per_node: int
    share: str
    rows: dict[str, dict[str, int]] = field(default_factory=dict)  # scope -> item -> bytes
    node_capacity: tuple[int | None, str] = (None, "unknown")
    gpu_capacity: tuple[int | None, str] = (None, "unknown")

    @property
    def node_peak(self) -> int:
        return self.rows["node"]["peak"]

    @property
    def gpu_total(self) -> int:
        return sum(self.rows["GPU"].values())


def make_plan(config: Config, size: GraphSize, nodes: int, ranks: int, gpus: bool) -> Plan:
    """Bytes per node, per rank and per GPU for `ranks` processes over `nodes` nodes."""
    per_node = ranks // nodes
    graph = shared_graph_bytes(size)
    # Local rank 0 holds the dataset privately while it builds the CSC and writes the shared copy:
    # the graph itself, plus the sort's permutation and the CSC row (2 x E ids).
    loading = graph + 2 * size.edges * INDEX
    runtime = RANK_RUNTIME_BYTES if gpus else RANK_RUNTIME_CPU_BYTES
    hidden, layers = config.model.hidden, config.model.num_layers
    widest = max(size.features, hidden)
    s = config.sampler
    train_batch = batch_nodes(s.batch_size, s.num_neighbors, size.nodes)
    if config.eval.mode == "sampled":
        fanouts = list(config.eval.fanouts or s.num_neighbors)
        eval_batch = batch_nodes(s.eval_batch_size, fanouts, size.nodes)
        eval_rows = eval_batch * widest * FLOAT
        eval_label = "evaluation: one sampled batch"
    else:
        shard = math.ceil(size.nodes / ranks)
        neighbourhood = min(size.nodes, int(s.eval_batch_size * (1 + size.edges / max(size.nodes, 1))))
        eval_rows = 2 * shard * hidden * FLOAT + neighbourhood * widest * FLOAT
        eval_label = f"evaluation: 2 shards of {shard:,} layer rows, 1 batch"
    private = graph if config.data.share == "process" else 0
    rank = {
        "runtime (python, torch, PyG" + (", CUDA)" if gpus else ")"): runtime,
        "graph (data.share=process: one copy per rank)": private,
        "training batch (features, edges)": train_batch * (size.features * FLOAT + 2 * INDEX * 8),
        eval_label: eval_rows,
    }
    rank = {k: v for k, v in rank.items() if v}
    rank_total = sum(rank.values())
    shared = graph if config.data.share == "node" else 0
    loader = per_node * runtime + loading  # the ranks wait while local rank 0 loads
    node = {
        "graph, shared once (/dev/shm or node-local disk)": shared,
        "while loading: local rank 0's private copy and CSC build": loading,
        f"while training: {per_node} ranks x {rank_total / GIB:.1f} GiB": per_node * rank_total,
    }
    node = {k: v for k, v in node.items() if v}
    node["peak"] = shared + max(loader, per_node * rank_total)
    params = model_parameters(config, size)
    gpu = {}
    if gpus:
        gpu = {
            "CUDA context and workspaces": GPU_RUNTIME_BYTES,
            "model, gradients, Adam state": model_state_bytes(params),
            "training batch activations": ACTIVATION_COPIES * train_batch * (size.features + hidden * layers) * FLOAT,
        }
        if s.device == "cuda":
            gpu["graph structure on the GPU (sampler.device=cuda)"] = (size.nodes + 1 + size.edges) * INDEX
    plan = Plan(size, nodes, per_node, config.data.share)
    plan.rows = {"node": node, "rank": rank, "GPU": gpu}
    return plan


# ---- what the machines have ----------------------------------------------------------------------

def _run(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def node_memory(partition: str, given_gib: float | None) -> tuple[int | None, str]:
    """Bytes of memory a node has: --node-memory, else the smallest node of the partition in sinfo.

    sinfo's figure is the RealMemory slurm.conf declares. It is not the node's where SLURM was never told
    (RealMemory's default, 1 MB) or where slurmd does not check the declaration against the machine
    (SlurmdParameters=config_overrides, "generally only useful for testing"): then the memory is unknown.
    """
    if given_gib is not None:
        return int(given_gib * GIB), "--node-memory"
    argv = ["sinfo", "--noheader", "--format=%m"] + ([f"--partition={partition}"] if partition else [])
    out = _run(argv)
    sizes = [int(v.rstrip("+")) for v in (out or "").split() if v.rstrip("+").isdigit()]
    where = f"sinfo{' -p ' + partition if partition else ''}"
    if sizes and min(sizes) <= 1:
        return None, f"unknown ({where}: RealMemory is not configured; give --node-memory GiB)"
    if sizes and "config_overrides" in _slurmd_parameters():
        return None, (f"unknown ({where} says {min(sizes)} MB, but SlurmdParameters=config_overrides: slurmd does "
                      "not check it against the node; give --node-memory GiB)")
    if sizes:
        return min(sizes) * 2**20, f"{where}: smallest node"
    return None, "unknown (give --node-memory GiB, or run where sinfo answers)"


def _slurmd_parameters() -> str:
    """The SlurmdParameters of `scontrol show config` ('' when it cannot be asked)."""
    for line in (_run(["scontrol", "show", "config"]) or "").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "SlurmdParameters":
            return value.strip()
    return ""


def gpu_memory(given_gib: float | None) -> tuple[int | None, str]:
    """Bytes of one GPU: --gpu-memory, else nvidia-smi on this machine."""
    if given_gib is not None:
        return int(given_gib * GIB), "--gpu-memory"
    out = _run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"])
    sizes = [int(v) for v in (out or "").split() if v.isdigit()]
    if sizes:
        return min(sizes) * 2**20, "nvidia-smi here"
    return None, "unknown (give --gpu-memory GiB)"


# ---- printing and the verdict --------------------------------------------------------------------

def _gib(n: int) -> str:
    return f"{n / GIB:,.1f} GiB" if n >= GIB else f"{n / 2**20:,.1f} MiB"


def format_plan(plan: Plan, config: Config) -> str:
    size = plan.size
    lines = [f"memory plan: {config.data.name} ({size.nodes:,} nodes, {size.edges:,} edges, {size.features} features), "
             f"{plan.nodes} node(s) x {plan.ranks_per_node} rank(s), data.share={plan.share}, "
             f"eval.mode={config.eval.mode}"]
    capacity = {"node": plan.node_capacity, "GPU": plan.gpu_capacity}
    for scope, items in plan.rows.items():
        if not items:
            continue
        if scope == "GPU":
            items = {**items, "in all": plan.gpu_total}
        for i, (item, value) in enumerate(items.items()):
            lines.append(f"{('per ' + scope) if i == 0 else '':<9} {item:<56} {_gib(value):>11}")
        if scope in capacity:
            cap, source = capacity[scope]
            lines.append(f"{'':<9} {'a ' + scope + ' has':<56} {_gib(cap) if cap else '?':>11}  ({source})")
    return "\n".join(lines)


def refusals(plan: Plan) -> list[str]:
    found = []
    cap, source = plan.node_capacity
    if cap is not None and plan.node_peak > cap:
        found.append(f"a node needs {_gib(plan.node_peak)} at its peak but has "
                     f"{_gib(cap)} ({source}): use nodes with more memory, fewer ranks per node, data.share=node "
                     "(one copy of the graph per node), or eval.mode=sampled")
    cap, source = plan.gpu_capacity
    if cap is not None and plan.rows["GPU"] and plan.gpu_total > cap:
        found.append(f"a GPU needs {_gib(plan.gpu_total)} but has {_gib(cap)} ({source}): lower sampler.batch_size, "
                     "the fanouts or model.hidden, or keep the graph on the host (sampler.device=cpu)")
    return found


def add_arguments(parser) -> None:
    from train.cli.fit import add_config_arguments

    add_config_arguments(parser)
    parser.add_argument("--nodes", type=int, default=int(os.environ.get("NODES", 1)),
                        help="nodes (default $NODES or 1)")
    parser.add_argument("--gpus", type=int, default=None,
                        help="ranks in all, one per GPU, spread evenly over the nodes (as make submit's GPUS)")
    parser.add_argument("--cpu", action="store_true", help="no GPUs: ranks without a per-GPU part (GPUS_PER_TASK=0)")
    parser.add_argument("--partition", default=os.environ.get("PARTITION", ""), help="asked of sinfo for node memory")
    parser.add_argument("--node-memory", type=float, default=None, metavar="GIB", help="memory of one node, GiB")
    parser.add_argument("--gpu-memory", type=float, default=None, metavar="GIB", help="memory of one GPU, GiB")


def main(args) -> int:
    config = load_config(args.config, args.overrides)
    ranks = args.gpus if args.gpus is not None else args.nodes
    if args.nodes < 1 or ranks < 1:
        raise UserError(f"--nodes={args.nodes} and --gpus={ranks} must be positive integers.")
    if ranks % args.nodes:
        raise UserError(f"--gpus={ranks} is not a multiple of --nodes={args.nodes}; ranks are spread evenly.")
    for flag, value in (("--node-memory", args.node_memory), ("--gpu-memory", args.gpu_memory)):
        if value is not None and value <= 0:
            raise UserError(f"{flag}={value} must be a positive number of GiB.")
    plan = make_plan(config, graph_size(config), args.nodes, ranks, gpus=not args.cpu)
    plan.node_capacity = node_memory(args.partition, args.node_memory)
    plan.gpu_capacity = gpu_memory(args.gpu_memory) if not args.cpu else (None, "no GPUs")
    print(format_plan(plan, config), flush=True)
    found = refusals(plan)
    if found:
        raise UserError("this plan does not fit: " + "; ".join(found) + ".")
    print("fits" if plan.node_capacity[0] else "fits what is known (node memory unknown)", flush=True)
    return 0
