"""Validation and test figures over all ranks, with memory that shrinks as ranks are added.

Every mode gives the logits of each rank's share of a split's nodes; the graph's targets
(train/loop/targets.py) turn them into the split's figures: accuracy, and ROC-AUC for multi-label nodes.

`eval.mode: full` (default) is layer-wise inference over full neighbourhoods, so a node's
prediction does not depend on batching or world size: the result equals a single-process
evaluation. Each rank keeps only ITS rows of every hidden layer (a contiguous shard of the
nodes, N / world_size rows); the rows of other ranks that a batch's neighbourhood needs are
fetched from their owners per batch with one all_to_all, never the whole layer. So the per-rank
memory is two shards of a layer plus one batch's neighbourhood, where an all-gather held all N
rows on every rank (114 GB per rank for ogbn-papers100M with 256 hidden).

Each layer reads its targets' in-edges straight from the CSC, in chunks of bounded memory
(train/graph/sampling/in_edges.py), on the device that holds the graph: with sampler.device=cuda and the
features on the GPU, the whole pass and the layers' rows stay there; no sampler, no host round trip.

The pass is `LayerWisePass`: the hidden layers' shards computed once, then the last layer's rows of any nodes a
rank asks for, chunk by chunk; the node task asks for its splits' nodes, the link task (train/loop/tasks/link.py)
for each chunk's endpoints, whose embeddings it scores with its head.

The full mode needs the model's per-layer API (train/models/layerwise.py: PyG's BasicGNN
models have one, and on a typed graph the relational ones, whose layers also read each chunk's edge types and,
in the first layer, its nodes' types and ids); a model without it is evaluated as in sampled mode, and the run
says so.

`eval.mode: sampled` runs the model on NeighborLoader mini-batches over each rank's share of the
split's nodes with `eval.fanouts` (default: sampler.num_neighbors), seeded, for graphs where the
full-neighbourhood pass costs too much: an estimate, no longer independent of the fanouts.
A feature-only model (PyG's MLP) is evaluated on each node's own features in either mode.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from functools import partial

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data

from train.cluster.distenv import DistEnv
from train.config import Config
from train.graph.edge_rows import EDGE_TYPE, EdgeRows
from train.graph.form import form_of
from train.graph.sampling.device_plan import SamplingPlan, gather_pinned
from train.graph.sampling.in_edges import ChunkCost, in_edge_batch, in_edge_chunks, in_edge_positions
from train.graph.seeds import derive_seed, rank_shard, shard_sizes
from train.graph.sharing.feature_store import GraphFeatures, features_of
from train.graph.sharing.row_exchange import exchange_rows
from train.graph.sharing.shared_graph import csc_targets, graph_csc
from train.loop.targets import SPLITS, Tally, Targets, targets_for
from train.models import LayerWise, ModelStep, edge_inputs, hop_counts, layerwise


@torch.no_grad()
def evaluate(model: ModelStep, data: Data, config: Config, env: DistEnv, device: torch.device,
             sampling: SamplingPlan) -> dict[str, float]:
    """{"val_acc": ..., "test_acc": ...} (and val_rocauc, test_rocauc for multi-label nodes), the same on every
    rank; collective over all ranks."""
    was_training = model.training
    model.eval()
    api, _why_not = layerwise(model)
    targets = targets_for(form_of(data), data)
    try:
        if not model.uses_graph:
            tallies = _feature_tallies(model, data, config, env, device, targets)
        elif config.eval.mode == "full" and api is not None:
            tallies = _full_tallies(api, data, config, env, device, sampling, targets)
        else:
            tallies = _sampled_tallies(model, data, config, env, device, sampling, targets)
    finally:
        model.train(was_training)
    return targets.figures(tallies, device)


def eval_fanouts(config: Config) -> list[int]:
    return list(config.eval.fanouts or config.sampler.num_neighbors)


# ---- sampled ---------------------------------------------------------------------------------------

def _feature_tallies(model, data, config, env, device, targets: Targets) -> dict[str, Tally]:
    """A feature-only model: each node's logits from its own features, exact in either mode."""
    tallies = {split: Tally() for split in SPLITS}
    form = form_of(data)
    for split in SPLITS:
        nodes = rank_shard(form.split_nodes(data, split), env.rank, env.world_size)
        with features_of(data).session():  # ranks' shares differ: sharded rows are fetched until all are done
            for chunk in nodes.split(config.sampler.eval_batch_size):
                logits = model(form.features(data, chunk).to(device))
                targets.add(tallies[split], logits, form.labels(data, chunk))
    return tallies


def _sampled_tallies(model, data, config, env, device, sampling, targets: Targets) -> dict[str, Tally]:
    tallies = {split: Tally() for split in SPLITS}
    batch_size = config.sampler.eval_batch_size
    for number, split in enumerate(SPLITS):
        nodes = rank_shard(form_of(data).split_nodes(data, split), env.rank, env.world_size)
        loader = sampling.loader(nodes, eval_fanouts(config), batch_size,
                                 seed=derive_seed(config.trainer.seed, 2, number))  # the training sampler
        with sampling.fetch_session():  # ranks' shares differ: sharded rows are fetched until all are done
            for batch in loader:
                batch = sampling.complete(batch, device).to(device, non_blocking=True)
                logits = model(batch.x, batch.edge_index, *hop_counts(batch, config.model),
                               **edge_inputs(batch))[: batch.batch_size]
                targets.add(tallies[split], logits, batch.y[: batch.batch_size])
    return tallies


# ---- full neighbourhoods, each layer sharded ------------------------------------------------------

class RowOwners:
    """Which rank owns which rows of a layer: contiguous shards of 0..N-1, as `rank_shard` cuts them."""

    def __init__(self, num_nodes: int, world_size: int):
        sizes = torch.tensor(shard_sizes(num_nodes, world_size), dtype=torch.long)
        self.starts = torch.cumsum(sizes, 0) - sizes
        self.ends = self.starts + sizes
        self.world_size = world_size

    def owner(self, nodes: Tensor) -> Tensor:
        return torch.bucketize(nodes, self.ends, right=True)

    def rows(self, rank: int) -> Tensor:
        return torch.arange(int(self.starts[rank]), int(self.ends[rank]))


def fetch_rows(ids: Tensor, mine: Tensor, my_start: int, owners: RowOwners, device: torch.device) -> Tensor:
    """Rows `ids` of a layer sharded over the ranks (this rank holds `mine`, from row `my_start`).

    Collective: every rank calls it the same number of times, with its own (maybe empty) `ids`: one round of
    train/graph/sharing/row_exchange.py (the ids each owner must send, then the rows), on the default group.
    """
    ids = ids.cpu()  # the owners' bounds are on the host
    rows, _ = exchange_rows(owners.owner(ids), ids, lambda wanted: mine[(wanted - my_start).to(mine.device)],
                            tuple(mine.shape[1:]), mine.dtype, owners.world_size, device)
    return rows


def _edge_chunks(csc, edge_index: Tensor | None, chunk: int):
    """(edges, sources, targets) of the graph's edges, `chunk` edges at a time (`edges`: their slice): from the
    CSC where there is one (the node-shared graph has no edge_index), else from edge_index."""
    if csc is None:
        for start in range(0, edge_index.size(1), chunk):
            part = edge_index[:, start : start + chunk]
            yield slice(start, start + part.size(1)), part[0], part[1]
        return
    colptr, row = csc[0], csc[1]
    for start in range(0, row.numel(), chunk):
        stop = min(start + chunk, row.numel())
        yield slice(start, stop), row[start:stop].long(), csc_targets(colptr, start, stop)  # int64, as edge_index


def _weighted_in_degree(csc, edge_weight: Tensor, self_loops: bool, chunk: int) -> Tensor:
    """`in_degree` of a GCN given edge weights (`edge_weight`, in the CSC's order): each node's sum of its
    in-edges' weights; without self-loops, a self-loop counts its weight beyond the 1 of GCNConv's own
    (GCNConv keeps a node's self-loop weight for the loop it adds: trim.degree_beyond counts alike)."""
    colptr = csc[0]
    degree = torch.zeros(colptr.numel() - 1, dtype=torch.float32, device=colptr.device)
    for edges, sources, targets in _edge_chunks(csc, None, chunk):
        weight = edge_weight[edges].to(colptr.device, torch.float32)
        if not self_loops:
            weight = weight - (sources == targets).to(weight.dtype)
        degree.index_add_(0, targets, weight)
    return degree


def in_degree(data: Data, self_loops: bool = False, chunk: int = 1 << 24, csc=None,
              edge_weight: Tensor | None = None) -> Tensor:
    """Each node's in-edges in the whole graph, self-loops counted or not (GCNConv replaces them with its own
    unless add_self_loops=False): the degree a GCN layer normalises a source by; weighted by `edge_weight` (in
    the CSC's order) when given. From the CSC when there is one (`csc`, else the graph's; on its device); in
    chunks, so a billion-edge graph needs no temporary of its size."""
    csc = graph_csc(data) if csc is None else csc
    if edge_weight is not None:
        return _weighted_in_degree(csc, edge_weight, self_loops, chunk)
    if csc is not None:
        degree = csc[0].diff().long()
    else:
        degree = torch.zeros(data.num_nodes, dtype=torch.long)
        for _edges, _sources, targets in _edge_chunks(None, data.edge_index, chunk):
            degree += torch.bincount(targets, minlength=data.num_nodes)
    if not self_loops:
        for _edges, sources, targets in _edge_chunks(csc, data.edge_index, chunk):
            loops = targets[sources == targets]
            if loops.numel():
                degree -= torch.bincount(loops, minlength=data.num_nodes)
    return degree


@dataclass(frozen=True)
class GraphAt:
    """Where the exact evaluation runs: on the device that holds the sampler's CSC, and the layers' rows
    there too when the features are there (sampler.device=cuda with the graph on the GPU), else on the host."""

    csc: tuple
    x: Tensor | None  # the features the first layer reads, where they are (None: sharded, fetched by `features`)
    rows: torch.device  # where each layer's rows are kept
    edges: EdgeRows | None = None  # the edges' features and weights by CSC position (None: the graph has none)
    node_type: Tensor | None = None  # a typed graph's node types, where the features are: a relational model's input
    features: GraphFeatures | None = None  # the graph's store, through which sharded rows are fetched

    @classmethod
    def of(cls, data: Data, sampling: SamplingPlan) -> "GraphAt":
        store = features_of(data)
        if sampling.fetched is not None:  # sharded: the node types and labels are placed as the features would be
            source = sampling.data if sampling.host_features is None else data
            return cls(sampling.csc, None, source.y.device if source.y is not None else sampling.device,
                       sampling.edges, getattr(source, "node_type", None), store)
        features_on_device = sampling.host_features is None and sampling.data.x is not None
        source = sampling.data if features_on_device else data  # the node types are placed with the features
        return cls(sampling.csc, source.x, source.x.device, sampling.edges, getattr(source, "node_type", None), store)

    @property
    def width(self) -> int:
        return self.x.size(1) if self.x is not None else self.features.width

    def first_rows(self, n_id: Tensor, device: torch.device) -> Tensor:
        """The features of `n_id`: gathered where every row is here, else fetched (collective, in a session)."""
        if self.x is None:
            return self.features.rows(n_id, device)
        return _gather(self.x, n_id, device)  # every rank holds the whole feature matrix (shared per node)

    def read(self, api: LayerWise) -> list[str]:
        """The edge values the model reads that the graph has (and a relational model's `edge_type`)."""
        typed = [EDGE_TYPE] if api.typed else []
        return typed + [name for name in api.edge_arguments if self.edges is not None and name in self.edges.values]

    def chunk_nodes(self, api: LayerWise, index: int, n_id: Tensor, device: torch.device) -> dict[str, Tensor]:
        """What a relational model's first layer reads of a chunk's nodes besides their features: their types and
        ids (`TypeInputs`: a featureless type's embedding by id); nothing for any other layer or model."""
        if not api.typed or index > 0:
            return {}
        return {"node_type": self.node_type.index_select(0, n_id.to(self.node_type.device)).to(device),
                "n_id": n_id.to(device)}

    def csc_weight(self, api: LayerWise) -> Tensor | None:
        """Every CSC position's edge weight when the model reads them (a GCN's weighted in-degree), else None."""
        return self.edges.in_csc_order("edge_weight") if "edge_weight" in self.read(api) else None

    def chunk_edges(self, api: LayerWise, targets: Tensor, device: torch.device) -> dict[str, Tensor]:
        """The edge tensors the model reads for the in-edges of `targets`, in `in_edge_batch`'s edge order."""
        wanted = self.read(api)
        if not wanted:
            return {}
        position, _ = in_edge_positions(self.csc[0], targets)
        rows = self.edges.at(position)  # where the positions are (pinned and copied when the values are the host's)
        return {name: rows[name].to(device, non_blocking=True) for name in wanted}


def _gather(rows: Tensor, ids: Tensor, device: torch.device) -> Tensor:
    """`rows[ids]` where `rows` are; from the host into pinned memory when the layer runs on a GPU (then copied
    without blocking)."""
    ids = ids.to(rows.device)
    if rows.device.type == "cpu" and device.type == "cuda":
        return gather_pinned(rows, ids)
    return rows[ids]


def _layer_rows(api: LayerWise, index: int, graph: GraphAt, nodes: Tensor, batch_size: int,
                device: torch.device, inputs, degree: Tensor | None) -> Tensor:
    """Layer `index` for `nodes`; `inputs(n_id)` gives the previous layer's rows. Collective when
    `inputs` fetches: the number of chunks is agreed so that every rank serves every round.
    `degree`: every node's in-degree in the whole graph, for a layer that reads its sources' degrees."""
    colptr, row = graph.csc[0], graph.csc[1]
    nodes = nodes.to(colptr.device)  # once, not per chunk
    in_width = graph.width if index == 0 else api.widths[index - 1]
    cost = ChunkCost.for_layer(in_width, api.widths[index])
    bounds = in_edge_chunks(colptr, nodes, batch_size, cost)
    rounds = torch.tensor([len(bounds) - 1], device=device)
    dist.all_reduce(rounds, op=dist.ReduceOp.MAX)
    out = torch.empty(nodes.numel(), api.widths[index], device=graph.rows)  # filled in place
    for number in range(int(rounds)):
        if number + 1 >= len(bounds):  # out of nodes: still answer the other ranks' requests
            inputs(torch.empty(0, dtype=torch.long, device=colptr.device))
            continue
        start, stop = bounds[number], bounds[number + 1]
        n_id, edge_index, seeds = in_edge_batch(colptr, row, nodes[start:stop])
        edges = {**graph.chunk_edges(api, nodes[start:stop], device), **graph.chunk_nodes(api, index, n_id, device)}
        h = inputs(n_id).to(device, non_blocking=True)
        # One hop: every edge points at a target (the first `seeds` of n_id), so the layer is
        # computed for the targets alone. The other nodes' in-edges are not in the batch: a layer
        # that reads them gets their count in the whole graph.
        sources = None
        if degree is not None:
            sources = (torch.arange(seeds, n_id.numel(), device=device), degree[n_id[seeds:]].to(device))
        rows = api.rows(index, h, edge_index.to(device), seeds, sources, **edges)
        out[start:stop] = rows.to(graph.rows)
    return out


class LayerWisePass:
    """The exact pass, reusable by any task: the hidden layers computed once over full in-neighbourhoods, each
    rank its shard (RowOwners), then the last layer's rows (logits, or a link task's embeddings) for any nodes a
    rank asks for, as often as it asks. The rows a chunk reads of other ranks' shards come from their owners, so
    `last_rows` is collective: every rank calls it as often as the others, with its own (maybe empty) nodes.
    `keep_layer`: a hidden layer whose shard of rows (this rank's, RowOwners) is kept, where each is otherwise
    dropped once the next is computed, for `kept_rows` (predict's embeddings)."""

    def __init__(self, api: LayerWise, data: Data, config: Config, env: DistEnv, device: torch.device,
                 sampling: SamplingPlan, keep_layer: int | None = None):
        self.api, self.data, self.device = api, data, device
        self.graph = GraphAt.of(data, sampling)
        self.batch_size = config.sampler.eval_batch_size
        self.degrees: dict[str, Tensor] = {}  # by which in-edges count, computed once per pass
        self.world_size = env.world_size
        self.owners = RowOwners(form_of(data).num_nodes(data), env.world_size)
        self.my_start = int(self.owners.starts[env.rank])

        inputs = partial(self.graph.first_rows, device=device)
        self.kept: Tensor | None = None
        for index in range(api.num_layers - 1):
            mine = self._rows(index, self.owners.rows(env.rank), inputs)
            if index == keep_layer:
                self.kept = mine
            inputs = partial(self.shard_rows, mine)
        self.inputs = inputs  # the last hidden layer's rows (or the features), wherever they are

    def shard_rows(self, shard: Tensor, n_id: Tensor) -> Tensor:
        """Rows `n_id` of a layer whose rows each rank holds its shard of (this rank's: `shard`); collective where
        there are several ranks (their owners send them)."""
        if self.world_size == 1:  # every row is this rank's
            return _gather(shard, n_id, self.device)
        return fetch_rows(n_id, shard, self.my_start, self.owners, self.device)

    def degree_for(self, index: int) -> Tensor | None:
        """Every node's in-degree in the whole graph where layer `index` reads its sources' (GCN), once per kind."""
        kind = self.api.source_degree_kind(index)
        if kind is not None and kind not in self.degrees:
            weight = self.graph.csc_weight(self.api)
            self.degrees[kind] = in_degree(self.data, self_loops=kind == "with self-loops", csc=self.graph.csc,
                                           edge_weight=weight)
        return self.degrees.get(kind)

    def _rows(self, index: int, nodes: Tensor, inputs) -> Tensor:
        # The first layer reads the features: sharded, they are fetched in rounds every rank makes (agreed by
        # _layer_rows), ended together by the session
        session = self.graph.features.session() if index == 0 else contextlib.nullcontext()
        with session:
            return _layer_rows(self.api, index, self.graph, nodes, self.batch_size, self.device, inputs,
                               self.degree_for(index))

    def kept_rows(self, nodes: Tensor) -> Tensor:
        """The kept hidden layer's rows of `nodes` (any of the graph's); collective, as `last_rows`."""
        return self.shard_rows(self.kept, nodes)

    def last_rows(self, nodes: Tensor) -> Tensor:
        """The last layer's rows of `nodes` (any of the graph's, in their order), where the layers' rows are kept."""
        return self._rows(self.api.num_layers - 1, nodes, self.inputs)


def _full_tallies(api: LayerWise, data, config, env, device, sampling, targets: Targets) -> dict[str, Tally]:
    layers = LayerWisePass(api, data, config, env, device, sampling)
    form = form_of(data)
    tallies = {split: Tally() for split in SPLITS}
    for split in SPLITS:
        nodes = rank_shard(form.split_nodes(data, split), env.rank, env.world_size)
        targets.add(tallies[split], layers.last_rows(nodes), form.labels(data, nodes))
    return tallies
