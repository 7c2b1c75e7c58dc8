"""Sampler and loader throughput: the project's sampler against pyg-lib (PyG's NeighborSampler and
NeighborLoader on its C++ sampler), measured side by side in one process.

pyg-lib is what NVIDIA's PyG container ships and what a user of the seed's example runs. It is
not on PyPI for this machine, so `make bench` builds it once into .venv-anchor (bench/anchor.sh)
and this benchmark re-runs itself in that venv's Python (same pinned torch and PyG, plus pyg-lib),
where both samplers load. Where the anchor cannot be built it says why and measures the project
alone.

For each graph (small: fits in cache; 1M nodes / 25M edges; Reddit-sized: 232,965 nodes / 114.6M
edges), fanouts [25, 10] and [15, 10, 5], and 1 and 2 torch threads:
  sampler  sampled edges/s and batches/s of `sample_from_nodes` on batches of 1024 training nodes
  loader   the same through the loaders with features and labels gathered: the project's
           `make_node_loader` (the loader `fit` uses) against `NeighborLoader(data, ...)` as the
           seed writes it
Each pair runs A B A B, so warm-up and drift hit both alike; the ratio is project / pyg-lib.
Both samplers must draw uniformly: a chi-square test over every k-subset of a node's neighbours
(the per-node Python loop, `random.sample`, is run through the same test as the check's own
correctness reference).
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import time
from collections import Counter

from bench.common import table, write_result

FANOUTS = ([25, 10], [15, 10, 5])
# name: (nodes, average degree, features)
GRAPHS = {"small": (20_000, 12.0, 64), "1m": (1_000_000, 25.0, 128), "reddit": (232_965, 114_615_892 / 232_965, 602)}
PROJECT, PYG_LIB = "project", "pyg-lib"
UNIFORM_P = 1e-3  # a sampler fails the uniformity check below this p-value


def reference_sample(colptr: list[int], row, seeds: list[int], fanouts: list[int], rng: random.Random) -> int:
    """Per-node Python loop (`random.sample` per node, a dict for relabelling): the correctness
    reference of the uniformity check. Returns the number of sampled edges."""
    local = {node: i for i, node in enumerate(seeds)}
    rows: list[int] = []
    frontier = seeds
    for fanout in fanouts:
        next_frontier = []
        for node in frontier:
            start, end = colptr[node], colptr[node + 1]
            degree = end - start
            picks = range(start, end) if degree <= fanout else [start + i for i in rng.sample(range(degree), fanout)]
            for position in picks:
                source = int(row[position])
                if source not in local:
                    local[source] = len(local)
                    next_frontier.append(source)
                rows.append(local[source])
        frontier = next_frontier
    return len(rows)


# ---- pure parts ---------------------------------------------------------------------------------

def rates(edges: int, batches: int, seconds: float) -> dict:
    return {"edges": edges, "batches": batches, "seconds": seconds,
            "edges_per_s": edges / seconds if seconds > 0 else None,
            "batches_per_s": batches / seconds if seconds > 0 else None}


def ratio(project: dict | None, anchor: dict | None, key: str) -> float | None:
    """project / anchor for `key` (None where either side was not measured)."""
    if not project or not anchor or not project.get(key) or not anchor.get(key):
        return None
    return project[key] / anchor[key]


def interleaved(runs: dict, rounds: int) -> dict:
    """Run each `name -> fn() -> (edges, batches, seconds)` once per round in turn (A B A B) and sum."""
    totals = {name: [0, 0, 0.0] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            edges, batches, seconds = fn()
            totals[name][0] += edges
            totals[name][1] += batches
            totals[name][2] += seconds
    return {name: rates(*t) for name, t in totals.items()}


def subset_counts_chisquare(counts: Counter, degree: int, fanout: int) -> float:
    """p-value of "every fanout-subset of `degree` neighbours is equally likely" (chi-square)."""
    from scipy.stats import chisquare

    subsets = list(itertools.combinations(range(degree), fanout))
    observed = [counts.get(s, 0) for s in subsets]
    unexpected = sum(counts.values()) - sum(observed)
    if unexpected:
        return 0.0  # a draw that is not a fanout-subset at all (repeats, wrong size)
    return float(chisquare(observed).pvalue)


def star_graph(stars: int, degree: int):
    """`stars` targets, each with its own `degree` in-neighbours: one call samples `stars` independent draws.
    Source j of star i is node i * degree + j; target i is node stars * degree + i."""
    import torch

    sources = torch.arange(stars * degree)
    targets = stars * degree + torch.arange(stars).repeat_interleave(degree)
    return torch.stack([sources, targets]), stars * degree + stars


def draws_to_subsets(node, row, col, stars: int, degree: int) -> Counter:
    """Each star's sampled neighbour positions (a sorted tuple) from one sampler output."""
    source, target = node[row].tolist(), node[col].tolist()
    picked: dict[int, list[int]] = {}
    for s, t in zip(source, target):
        star = t - stars * degree
        picked.setdefault(star, []).append(s - star * degree)
    return Counter(tuple(sorted(p)) for p in picked.values())


def uniformity(samplers: dict, stars: int = 400, degree: int = 8, fanout: int = 3, calls: int = 14) -> dict:
    """Chi-square over the C(degree, fanout) subsets for each `name -> sample(seeds) -> (node, row, col)`."""
    import torch

    seeds = stars * degree + torch.arange(stars)
    out = {}
    for name, sample in samplers.items():
        counts: Counter = Counter()
        for _ in range(calls):
            counts += draws_to_subsets(*sample(seeds), stars, degree)
        p = subset_counts_chisquare(counts, degree, fanout)
        out[name] = {"draws": sum(counts.values()), "subsets": math.comb(degree, fanout), "p_value": p,
                     "uniform": p >= UNIFORM_P}
    return out


# ---- measuring ----------------------------------------------------------------------------------

def _uniformity_samplers(with_pyg_lib: bool, degree: int = 8, fanout: int = 3, stars: int = 400) -> dict:
    import torch
    from torch_geometric.data import Data
    from torch_geometric.sampler import NodeSamplerInput

    from train.graph.sampling.samplers import TorchNeighborSampler
    from train.graph.typed_csc import build_csc

    edge_index, num_nodes = star_graph(stars, degree)
    csc = build_csc(edge_index, num_nodes)
    project = TorchNeighborSampler(Data(num_nodes=num_nodes), [fanout], csc=csc)  # seed=None: the global RNG

    def run_project(seeds):
        out = project.sample_from_nodes(NodeSamplerInput(input_id=None, node=seeds))
        return out.node, out.row, out.col

    rng = random.Random()
    colptr, row = csc[0].tolist(), csc[1]

    def run_reference(seeds):
        nodes, rows, cols = list(seeds.tolist()), [], []
        for target_local, target in enumerate(seeds.tolist()):
            start, end = colptr[target], colptr[target + 1]
            for position in rng.sample(range(start, end), min(fanout, end - start)):
                nodes.append(int(row[position]))
                rows.append(len(nodes) - 1)
                cols.append(target_local)
        return torch.tensor(nodes), torch.tensor(rows), torch.tensor(cols)

    samplers = {PROJECT: run_project, "reference (random.sample per node)": run_reference}
    if with_pyg_lib:
        from torch_geometric.sampler import NeighborSampler

        native = NeighborSampler(Data(edge_index=edge_index, num_nodes=num_nodes), [fanout])

        def run_pyg_lib(seeds):
            out = native.sample_from_nodes(NodeSamplerInput(input_id=None, node=seeds))
            return out.node, out.row, out.col

        samplers[PYG_LIB] = run_pyg_lib
    return samplers


def _timed(iterator_factory, count_edges, warmup: int, batches: int):
    """A function timing `batches` items of a fresh iterator after `warmup` untimed ones."""
    def run():
        it = iterator_factory()
        for _ in range(warmup):
            next(it)
        edges, started = 0, time.perf_counter()
        for _ in range(batches):
            edges += count_edges(next(it))
        return edges, batches, time.perf_counter() - started
    return run


def measure_graph(name: str, args, with_pyg_lib: bool) -> dict:
    import torch
    from torch_geometric.data import Data
    from torch_geometric.sampler import NodeSamplerInput

    from train.config import DataConfig
    from train.graph.datasets.loading import synthetic_graph
    from train.graph.sampling.samplers import TorchNeighborSampler, make_node_loader
    from train.graph.typed_csc import build_csc

    nodes, degree, features = GRAPHS[name]
    nodes = max(int(nodes * args.scale), 1000)
    started = time.perf_counter()
    print(f"sampler: graph {name}: {nodes:,} nodes, average degree {degree:.1f}, {features} features ...", flush=True)
    data = synthetic_graph(DataConfig(num_nodes=nodes, avg_degree=degree, num_features=features, num_classes=16))
    train_idx = data.train_idx
    data = Data(x=data.x, y=data.y, edge_index=data.edge_index)  # what a batch gathers from
    csc = build_csc(data.edge_index, data.num_nodes)
    gen = torch.Generator().manual_seed(0)
    train = train_idx[torch.randperm(train_idx.numel(), generator=gen)]
    per_run = args.warmup + max(args.batches, args.loader_batches)
    if train.numel() < per_run * args.batch_size:
        train = train.repeat(math.ceil(per_run * args.batch_size / train.numel()))
    seeds = train[: per_run * args.batch_size]
    batch_list = list(seeds.split(args.batch_size))
    result = {"nodes": data.num_nodes, "edges": data.edge_index.size(1), "features": features,
              "build_seconds": time.perf_counter() - started, "fanouts": {}}
    structure = Data(num_nodes=data.num_nodes)
    for fanouts in FANOUTS:
        key = "x".join(map(str, fanouts))
        project = TorchNeighborSampler(structure, fanouts, seed=1, csc=csc)
        samplers = {PROJECT: lambda b, s=project: s.sample_from_nodes(NodeSamplerInput(input_id=None, node=b))}
        loaders = {PROJECT: lambda f=fanouts: iter(make_node_loader(data, seeds, f, args.batch_size, seed=1, csc=csc,
                                                                    force_torch_sampler=True))}
        if with_pyg_lib:
            from torch_geometric.loader import NeighborLoader
            from torch_geometric.sampler import NeighborSampler

            native = NeighborSampler(data, fanouts)  # builds its CSC once, as NeighborLoader does
            samplers[PYG_LIB] = lambda b, s=native: s.sample_from_nodes(NodeSamplerInput(input_id=None, node=b))
            seed_loader = NeighborLoader(data, num_neighbors=fanouts, batch_size=args.batch_size, input_nodes=seeds,
                                         shuffle=False, neighbor_sampler=native)
            loaders[PYG_LIB] = lambda loader=seed_loader: iter(loader)
        per_threads = {}
        for threads in args.threads:
            torch.set_num_threads(threads)
            sampler_runs = {n: _timed(lambda fn=fn: map(fn, batch_list), lambda out: int(sum(out.num_sampled_edges)),
                                      args.warmup, args.batches) for n, fn in samplers.items()}
            loader_runs = {n: _timed(make, lambda batch: int(batch.edge_index.size(1)), args.warmup,
                                     args.loader_batches) for n, make in loaders.items()}
            measured = {"sampler": interleaved(sampler_runs, args.rounds),
                        "loader": interleaved(loader_runs, args.rounds)}
            for level in measured.values():
                level["project_over_pyg_lib"] = {k: ratio(level.get(PROJECT), level.get(PYG_LIB), k)
                                                 for k in ("edges_per_s", "batches_per_s")}
            per_threads[str(threads)] = measured
        result["fanouts"][key] = per_threads
        samplers.clear()  # drop this fanout's samplers (pyg-lib's own CSC) before the next is built
        loaders.clear()
        native = seed_loader = None  # noqa: F841
    return result


def _rows(graphs: dict) -> list[list]:
    rows = []
    for gname, g in graphs.items():
        for key, per_threads in g["fanouts"].items():
            for threads, levels in per_threads.items():
                for level, m in levels.items():
                    p, a, r = m.get(PROJECT), m.get(PYG_LIB), m["project_over_pyg_lib"]
                    rows.append([gname, key, int(threads), level, round(p["edges_per_s"]), round(p["batches_per_s"], 1),
                                 round(a["edges_per_s"]) if a else "-", round(a["batches_per_s"], 1) if a else "-",
                                 round(r["edges_per_s"], 2) if r["edges_per_s"] else "-"])
    return rows


def run(args) -> dict:
    import torch

    from bench.anchor import have_pyg_lib

    with_pyg_lib = have_pyg_lib()
    reason = getattr(args, "anchor_reason", "")
    sizes = args.sizes.split(",")
    graphs = {}
    for name in sizes:
        graphs[name] = measure_graph(name, args, with_pyg_lib)
        for row in _rows({name: graphs[name]}):  # as it goes: a later, larger graph may not fit in memory
            print("  " + "  ".join(map(str, row)), flush=True)
    torch.set_num_threads(1)
    checks = uniformity(_uniformity_samplers(with_pyg_lib))

    print()
    print(f"Sampler and loader throughput, project against pyg-lib (PyG NeighborSampler / NeighborLoader), "
          f"batch {args.batch_size}, {args.rounds} rounds A B A B, CPU")
    print(table(["graph", "fanouts", "threads", "level", "project edges/s", "project batches/s",
                 "pyg-lib edges/s", "pyg-lib batches/s", "project/pyg-lib"], _rows(graphs)))
    for gname, g in graphs.items():
        print(f"  {gname}: {g['nodes']:,} nodes, {g['edges']:,} edges, {g['features']} features")
    if not with_pyg_lib:
        print(f"pyg-lib anchor not available ({reason or 'not installed in this Python'}): project figures only.")
    print("\nUniformity (chi-square over all 3-subsets of 8 neighbours; uniform when p >= "
          f"{UNIFORM_P:g}):")
    print(table(["sampler", "draws", "p-value", "uniform"],
                [[n, c["draws"], round(c["p_value"], 4), "yes" if c["uniform"] else "NO"] for n, c in checks.items()]))
    path = write_result("sampler", {
        "params": {"sizes": sizes, "scale": args.scale, "batch_size": args.batch_size, "batches": args.batches,
                   "loader_batches": args.loader_batches, "warmup": args.warmup, "rounds": args.rounds,
                   "threads": args.threads, "fanouts": [list(f) for f in FANOUTS]},
        "anchor": {"pyg_lib": with_pyg_lib, "reason": "" if with_pyg_lib else (reason or "pyg-lib not installed")},
        "graphs": graphs, "uniformity": checks})
    print(f"wrote {path}")
    return {"graphs": graphs, "uniformity": checks, "path": str(path)}


def _threads(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--threads {text!r}: expected a comma-separated list of integers, e.g. 1,2")
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"--threads {text!r}: every count must be >= 1")
    return values


def _sizes(text: str) -> str:
    unknown = [s for s in text.split(",") if s not in GRAPHS]
    if unknown:
        raise argparse.ArgumentTypeError(f"--sizes {text!r}: unknown {', '.join(unknown)}; expected some of "
                                         f"{', '.join(GRAPHS)}")
    return text


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
        return value
    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", type=_sizes, default=",".join(GRAPHS), help=f"graphs, some of {', '.join(GRAPHS)}")
    parser.add_argument("--scale", type=_positive(float), default=1.0,
                        help="multiply every graph's node count (same degree), e.g. 0.1 for a quick run")
    parser.add_argument("--threads", type=_threads, default=[1, 2], help="torch thread counts, e.g. 1,2")
    parser.add_argument("--batch-size", type=_positive(int), default=1024)
    parser.add_argument("--batches", type=_positive(int), default=20, help="timed sampler batches per round")
    parser.add_argument("--loader-batches", type=_positive(int), default=6, help="timed loader batches per round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=_positive(int), default=2, help="A B rounds")


def main(argv=None) -> int:
    from bench.anchor import anchored_main

    return anchored_main("bench.sampler", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
