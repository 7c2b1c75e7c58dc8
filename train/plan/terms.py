"""The terms of the memory plan: bytes per node, rank and GPU from the graph's size and the config, never by
loading the graph (`python -m train plan` prints them; train/cli/plan.py).

Each term follows what the run allocates (named beside it) and is calibrated against real ranks:
`make bench BENCH=plan` runs configs through `fit` and prints every term measured, planned and their ratio;
tests/test_plan_measured.py holds the plan to at least the measured peak and at most 1.5 times it. What
cannot be measured without a GPU is taken from published figures, named where the constant is defined.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from train.builtin_models import BUILTINS
from train.builtin_tasks import task_row
from train.config import Config
from train.graph.form import form_of, graph_meta
from train.graph.link_fields import split_ids
from train.graph.sampling.device_plan import (
    feature_copy_bytes,
    gpu_feature_bytes,
    gpu_placement,
    gpu_structure_bytes,
    nccl_buffer_bytes,
    samples_on_gpu,
)
from train.graph.sampling.in_edges import CHUNK_BYTES, ChunkCost
from train.graph.sharing.segments import shares_graph
from train.graph.sharing.shared_graph import num_edges
from train.graph.sizes import FLOAT, INDEX, GraphSize
from train.models import evaluates_exactly, resolve
from train.models import parameter_count as built_count
from train.plan.held import (
    csc_index_bytes,
    held_size,
    loader_kind,
    loading_bytes,
    private_graph_bytes,
    shared_graph_bytes,
)
from train.plan.hops import Hops, batch_seeds, full_neighbourhood, sampled_hops
from train.plan.model_terms import (
    counts_own_intermediates,
    edge_floats,
    edge_projection_width,
    ends_in_head,
    one_input,
    relations,
    rows_of_last_hop,
    source_floats,
    typed_edge_ids,
)

GIB = 2**30
MIB = 2**20

# One rank's interpreter, torch, PyG and gloo before the graph: measured 0.34-0.36 GiB RSS per rank here
# (0.25 GiB private: Python objects of the imports and torch's static state; 0.09 GiB shared libraries).
RUNTIME_CPU_BYTES = 400 * MIB
# What CUDA adds to a rank's host memory (driver, runtime, cuBLAS/cuDNN/NCCL kernel images): not measurable
# without a GPU, so from published figures for torch with lazy module loading (CUDA >= 11.7): +0.11 GiB for
# one CUDA tensor, +1.65 GiB after a device query and a CUDA tensor (pytorch/pytorch#113326), +1.18 GiB at the
# first CUDA use in a process group (pytorch/pytorch#106511). The plan takes 1.5 GiB.
CUDA_HOST_BYTES = 1536 * MIB
# A GPU's own share: the CUDA context (0.29 GiB with lazy loading, pytorch/pytorch#86509; ~0.4 GiB,
# pytorch/pytorch#109888), NCCL's buffers and cuBLAS workspaces, at world size 1; NCCL's buffers for more ranks are
# device_plan.nccl_buffer_bytes, by world size and topology.
GPU_RUNTIME_BYTES = 1 * GIB
# Per sampled edge, int64 ids alive in a batch: the sampler's picks, rows, columns and edge ids, the
# batch's edge_index, and the slot arithmetic (train/graph/sampling/samplers.py _sample_hop).
EDGE_IDS = 6
# Float rows per target and layer: lin_l and lin_r outputs, their sum, ReLU and dropout (forward), and
# their gradients (backward). Calibrated: training peaks of bench/plan.py's cases. Without autograd
# (evaluation) a layer's intermediates go as the next is made: about two rows per target.
LAYER_ROWS = 8
NO_GRAD_ROWS = 2
# A training step's fixed part beside its tensors (autograd's graph, DDP's reducer, Adam's first-step state,
# the step's Python objects): the residual of the training peak at 20k nodes, where the tensors are small.
STEP_FIXED_BYTES = 16 * MIB
# Of a training step's working set on the host, what the C heap still holds when evaluation starts. With the
# heap `python -m train` sets up (train/heap.py) a step's large tensors go back to the system; with glibc's
# default (a node without huge pages, or the user's own setting) it keeps them and evaluation reuses them.
# One figure for both: the rank and node peaks of bench/plan.py's cases lie at or below the plan with
# glibc's default and within 1.5 x of it with the tuned heap (2026-12-04).
TRAINING_KEPT = 0.45
# Over an epoch's steps on the CPU, the heap's holes and the largest batch add to one step's tensors:
# measured 1.26 x the planned step after two epochs of 88 steps (300k nodes), 1.0-1.1 after 3-4 steps.
CPU_STEPS_GROWTH = 1.3
# PyTorch's caching allocators keep what they hand out in blocks: pinned host blocks are rounded up to a
# power of two (CachingHostAllocator), so a pinned batch may take up to twice its bytes; GPU blocks are
# rounded and split less wastefully (fragmentation, not measured here: a quarter more is assumed).
PINNED_ROUNDING = 2.0
CUDA_CACHE_SLACK = 1.25
# The rows sized by a sampled batch (train/plan/hops.py): upper bounds, not estimates, as Hops counts each hop's
# nodes at the whole fanout per relation with none deduplicated (Plan.bounds; the table labels them).
TRAINING_BATCH = "training batch"
SAMPLED_EVALUATION = "evaluation: one sampled batch"
EVALUATION_WORK = "evaluation working set"


def graph_size_of(data) -> GraphSize:
    """The size of a loaded graph (a run's own figures for the terms it shares with the plan)."""
    form = form_of(data)
    split = tuple(int(form.split_nodes(data, name).numel()) for name in ("train", "val", "test"))
    values = edges.values if (edges := form.edge_rows(data)) is not None else {}
    return GraphSize(form.num_nodes(data), num_edges(data), form.feature_width(data), form.num_classes(data), split,
                     form=form.name, edge_features=values["edge_attr"].size(1) if "edge_attr" in values else 0,
                     edge_weight="edge_weight" in values, meta=graph_meta(data), multilabel=form.multilabel(data),
                     link_ids=split_ids(data))


def layer_widths(config: Config, size: GraphSize) -> list[tuple[int, int]]:
    """(input, output) width of each layer, as the built-in models stack them (hidden between the ends; a model
    that ends in a Linear head: hidden to the last conv's output). Attention heads that widen a layer's
    per-edge rows are counted where the edges are (train/plan/model_terms.py)."""
    hidden, layers = config.model.hidden, config.model.num_layers
    sizes = [size.features] + [hidden] * (layers - 1) + [hidden if ends_in_head(config) else size.classes]
    return list(zip(sizes[:-1], sizes[1:]))


def parameter_count(config: Config, size: GraphSize) -> int:
    """The model's real parameter count: model.name (a built-in or the user's) built on the meta device for the
    graph's features and classes (train/models/spec.py), so GAT's heads or GIN's MLPs count as they are."""
    return built_count(config.model, size.features, size.classes, meta=size.meta)  # a typed graph: its types


def evaluation_sampled(config: Config, size: GraphSize) -> bool:
    """Whether an evaluation samples its batches, else it is the exact layer-wise pass, of nodes or of a link task's
    endpoints (train/loop/evaluate.py's LayerWisePass): eval.mode=sampled, or a node task's model without the pass's
    per-layer API (a dict model on a typed graph, jk=cat: train/models/layerwise.py decides, for the run and the
    plan). A link task's encoder is planned at the mode's word."""
    if config.eval.mode == "sampled":
        return True
    if task_row(config.task.name).seeds == "edges":
        return False

    return not evaluates_exactly(config.model, size.features, size.classes, meta=size.meta)


def reads_graph(config: Config) -> bool:
    """Whether model.name reads the graph, as the run decides it (train/models/step.py's reads_graph)."""
    return resolve(config.model).reads_graph


def model_bytes(config: Config, size: GraphSize) -> int:
    """Weights, gradients (DDP's buckets hold a copy of them) and Adam's two moments: 4 float copies."""
    return 4 * parameter_count(config, size) * FLOAT


def model_trims(config: Config, size: GraphSize) -> bool:
    """Whether each layer computes only the rows later layers read (model.trim, train/models/trim.py). On a
    typed graph only the heterogeneous built-ins trim (R-GCN, R-GAT, HeteroConv's); a built-in through PyG's
    to_hetero computes every row, and a user's dict model is taken to (train/models/hetero.py)."""
    if size.meta is None:
        return config.model.trim
    builtin = BUILTINS.get(config.model.name)
    return config.model.trim and builtin is not None and builtin.hetero_only


def forward_bytes(config: Config, size: GraphSize, hops: Hops, backward: bool) -> int:
    """The model's working set for one batch: the features it reads, the edge ids, each layer's rows
    (with model.trim each layer computes only the targets later layers read), the model's own intermediates per
    edge that autograd keeps for the backward pass (every layer's: train/plan/model_terms.py) and the largest
    layer's messages (SAGEConv gathers one row per edge; their gradient too where the input needs one); without
    the backward pass, one layer's at a time. A feature-only model's batch is its seeds alone."""
    widths = layer_widths(config, size)
    last = len(widths) - 1
    graph = reads_graph(config)
    if not graph:
        hops = Hops(hops.nodes[:1], ())  # train/loop/tasks/node.py: the seeds' features, no neighbours
    total = hops.total_nodes * (size.features * FLOAT + size.type_bytes) + hops.total_edges * (
        EDGE_IDS * INDEX + size.edge_floats * FLOAT + size.type_bytes)  # a typed batch's node_type and edge_type
    if size.meta is not None and graph:  # each type's input (train/models/hetero.py TypeInputs), and its gradient
        total += hops.total_nodes * widths[0][0] * FLOAT * (2 if backward and one_input(config, size) else 1)
        total += hops.total_edges * typed_edge_ids(config, size) * INDEX
    messages = 0
    rows_factor = LAYER_ROWS if backward else NO_GRAD_ROWS
    for index, (width_in, width_out) in enumerate(widths):
        reach = last - index + 1  # the hops whose nodes are this layer's targets
        trimmed = model_trims(config, size) and graph
        targets = sum(hops.nodes[:reach + rows_of_last_hop(config, size)]) if trimmed else hops.total_nodes
        edges = sum(hops.edges[:reach]) if trimmed else hops.total_edges
        per_edge = edge_floats(config, size, width_in, width_out, index == last)
        sources = sum(hops.nodes[:reach + 1]) if trimmed else hops.total_nodes  # the rows it reads
        split = relations(config, size, hops.nodes[0], targets, sources, hops.edges[0] if trimmed else 0, edges)
        aggregated = 0 if graph and per_edge.transforms_first else split.aggregated * width_in  # input-wide sums
        total += (aggregated + targets * rows_factor * width_out) * FLOAT
        if graph:
            per_source = source_floats(config, size, width_in, width_out, index == last)
            transformed = split.transformed if backward else split.transformed_at_once
            own = (split.edges * per_edge.kept + sources * per_source + transformed * width_out
                   ) * FLOAT + split.index_bytes  # kept until the backward pass; without one, alive while it runs
            total += own if backward else 0
            twice = backward and (index or per_edge.weighted)  # and the passing rows' gradient
            alive = split.passing * per_edge.passing * (2 if twice else 1) + split.summed * width_in
            messages = max(messages, (alive + split.grouped * width_out) * FLOAT + (0 if backward else own))
    return int(total + messages + (STEP_FIXED_BYTES if backward else 0))


def host_batch_bytes(size: GraphSize, hops: Hops, pinned: bool) -> int:
    """A batch sampled on the host for a GPU: its features, edge values and ids, pinned (rounded up by the host
    allocator)."""
    raw = hops.total_nodes * (size.features * FLOAT + INDEX + size.type_bytes) + hops.total_edges * (
        EDGE_IDS * INDEX + size.edge_floats * FLOAT + size.type_bytes)
    return int(raw * (PINNED_ROUNDING if pinned else 1))


def full_eval_bytes(config: Config, size: GraphSize, ranks: int) -> tuple[int, int, int]:
    """(kept, gathered, working set) of eval.mode=full (train/loop/evaluate.py). Kept on the host: this rank's
    rows of the hidden layer it reads and of the one it fills (one of them with 2 layers), and the last
    layer's logits. Per batch, the seeds' whole neighbourhood: its input rows gathered on the host (features,
    or the rows this rank serves), then the rows received and put in order, one message per edge, the seeds'
    outputs; and where the graph has edge values, each in-edge's (and GINE's projection of them)."""
    hidden, layers = config.model.hidden, config.model.num_layers
    shard = math.ceil(size.nodes / ranks)
    kept = min(2, layers - 1) * shard * hidden * FLOAT + shard * size.classes * FLOAT
    widths = layer_widths(config, size)
    first = full_neighbourhood(eval_chunk_targets(config, size, *widths[0]), size)
    later = full_neighbourhood(eval_chunk_targets(config, size, hidden, hidden), size) if layers > 1 else None
    gathered = max(first.total_nodes * size.features, later.total_nodes * hidden if later else 0) * FLOAT
    work = first.total_edges * size.features * FLOAT + _chunk_fixed(config, size, first, size.features)
    if later:  # fetched, sent, in order; messages
        work = max(work, (3 * later.total_nodes + later.total_edges) * hidden * FLOAT
                   + _chunk_fixed(config, size, later, hidden))
    return kept, gathered, work


def _chunk_fixed(config: Config, size: GraphSize, hops: Hops, width_in: int) -> int:
    """An evaluation chunk's ids per edge, its targets' output rows, and its in-edges' values (train/loop/evaluate.py
    GraphAt.chunk_edges: e_id and every value the graph keeps, gathered where the model reads any; counted wherever
    the graph has them) with GINE's projection of them to the layer's input width."""
    hidden = config.model.hidden
    values = INDEX + size.edge_floats * FLOAT + size.type_bytes if size.edge_floats else 0
    projected = edge_projection_width(config, size, width_in) * FLOAT
    return hops.total_edges * (EDGE_IDS * INDEX + values + projected) + hops.nodes[0] * LAYER_ROWS * hidden * FLOAT


def eval_chunk_targets(config: Config, size: GraphSize, in_width: int, out_width: int) -> int:
    """Targets of one chunk of the exact evaluation in a layer of these widths: sampler.eval_batch_size, or
    fewer where the chunk's byte bound stops it first (train/graph/sampling/in_edges.py: CHUNK_BYTES by ChunkCost,
    at the
    graph's mean in-degree), as the evaluation cuts its chunks."""
    cost = ChunkCost.for_layer(in_width, out_width)
    per_target = cost.per_target + size.degree * cost.per_edge
    return max(1, min(config.sampler.eval_batch_size, int(CHUNK_BYTES // per_target)))


@dataclass
class Plan:
    size: GraphSize
    nodes: int
    ranks_per_node: int
    share: str
    rows: dict[str, dict[str, int]] = field(default_factory=dict)  # scope -> item -> bytes
    notes: list[str] = field(default_factory=list)
    node_capacity: tuple[int | None, str] = (None, "unknown")
    gpu_capacity: tuple[int | None, str] = (None, "unknown")
    sampling: str = "cpu"  # where batches are sampled: cpu or cuda (the graph structure on the GPU)
    placement: object = None  # sampler.device auto or cuda on a GPU of known memory: the run's Placement
    fallback: str = ""  # why sampler.device=cuda would sample on the CPU ("" when it would not)
    bounds: set[str] = field(default_factory=set)  # the rows (any scope) that are upper bounds: a sampled batch's

    @property
    def node_peak(self) -> int:
        return self.rows["node"]["peak"]

    @property
    def rank_peak(self) -> int:
        return self.rows["rank"]["peak"]

    @property
    def gpu_total(self) -> int:
        return self.rows["GPU"].get("in all", 0)


# ---- the plan: rows per rank, node and GPU --------------------------------------------------------

def _term(rows: dict[str, int], prefix: str) -> int:
    return sum(v for k, v in rows.items() if k.startswith(prefix))


def gpu_working_bytes(config: Config, size: GraphSize, ranks: int = 1, rows_on_gpu: bool = False) -> int:
    """The larger of a training step's and an evaluation's working set on the GPU, with the allocator's blocks:
    what the graph placed on the GPU must leave free (the run and the plan place it alike). `rows_on_gpu`: the
    features are on the GPU, so the exact evaluation keeps its layer rows there too (exact_eval_gpu_rows, over
    `ranks` ranks)."""
    train = forward_bytes(config, size, sampled_hops(batch_seeds(config), config.sampler.num_neighbors, size),
                          backward=True)
    if evaluation_sampled(config, size):
        fanouts = list(config.eval.fanouts or config.sampler.num_neighbors)
        evaluation = forward_bytes(config, size, sampled_hops(batch_seeds(config, evaluation=True), fanouts, size),
                                   backward=False)
    else:
        evaluation = full_eval_bytes(config, size, ranks)[2]
        evaluation += exact_eval_gpu_rows(config, size, ranks) if rows_on_gpu else 0
    return int(max(train, evaluation) * CUDA_CACHE_SLACK)


def exact_eval_gpu_rows(config: Config, size: GraphSize, ranks: int) -> int:
    """What the exact evaluation keeps on the GPU where the features are there (train/loop/evaluate.py GraphAt:
    the layers' rows are kept where the features are): this rank's shard of the hidden layers (the one being made
    and the one it reads), the last layer's shard and a chunk's gathered rows; 0 where the evaluation samples."""
    if evaluation_sampled(config, size):
        return 0
    kept, gathered, _work = full_eval_bytes(config, size, ranks)
    if task_row(config.task.name).seeds == "edges" or not any(size.split):
        return kept + gathered
    # A node task's last layer makes rows only for the split it scores (evaluate.py _full_tallies), not the shard.
    hidden = min(2, config.model.num_layers - 1) * math.ceil(size.nodes / ranks) * config.model.hidden * FLOAT
    return hidden + math.ceil(max(size.split) / ranks) * size.classes * FLOAT + gathered


def gpu_feature_bytes_of(config: Config, size: GraphSize, sharing: bool) -> int:
    """The features (in data.feature_dtype) and labels where the GPU holds them, and the edges' values and ids
    (the CSC's perm, in the CSC's dtype) with them."""
    edges = size.edges * (size.edge_floats * FLOAT + size.type_bytes + csc_index_bytes(size, sharing)) \
        if size.edge_floats or size.type_bytes else 0
    nodes = size.nodes * size.type_bytes  # a typed graph's node_type
    return gpu_feature_bytes(size.nodes, size.features, config.data.feature_dtype, edges, size.label_bytes) + nodes


def free_at_placement(gpu_bytes: int, config: Config, size: GraphSize, ranks: int = 1, per_node: int = 1) -> int:
    """The free GPU memory the run places the graph by (Trainer: after the model and DDP's buckets, less what NCCL
    will take for `ranks` ranks, `per_node` a node: device_plan.nccl_buffer_bytes, which the run sets aside too)."""
    model = 2 * parameter_count(config, size) * FLOAT
    return gpu_bytes - GPU_RUNTIME_BYTES - model - nccl_buffer_bytes(ranks, per_node)


def placement_for(config: Config, size: GraphSize, sharing: bool, gpu_bytes: int | None, ranks: int = 1,
                  per_node: int = 1):
    """sampler.device auto or cuda on a GPU of `gpu_bytes` in a job of `ranks` ranks: the run's own decision
    (train/graph/sampling/device_plan.py), or None where the GPU's memory is unknown."""
    if gpu_bytes is None:
        return None
    structure = gpu_structure_bytes(size.nodes, size.edges, with_perm=not sharing,
                                    csc_index_bytes=csc_index_bytes(size, sharing))
    structure += size.segment_ids * csc_index_bytes(size, sharing)  # a typed graph's segment pointer
    return gpu_placement(structure, gpu_feature_bytes_of(config, size, sharing),
                         free_at_placement(gpu_bytes, config, size, ranks, per_node),
                         gpu_working_bytes(config, size, ranks),
                         with_features=gpu_working_bytes(config, size, ranks, rows_on_gpu=True))


@dataclass(frozen=True)
class Setting:
    """What the terms depend on besides the graph: the config, the ranks, and where batches are made."""

    config: Config
    ranks: int
    per_node: int
    gpus: bool
    sharing: bool  # data.share=node with more than one rank on the node
    placement: object  # sampler.device auto or cuda on a GPU of known memory: the run's Placement, else None
    loaded: GraphSize | None = None  # the graph as loaded, where the task holds another (held_size)

    @property
    def gpu_sampling(self) -> bool:
        """Where the run samples, by the sampler.device rule's one home (device_plan.samples_on_gpu)."""
        return self.gpus and samples_on_gpu(self.config.sampler.device, self.placement)

    @property
    def features_on_gpu(self) -> bool:
        return self.placement is not None and self.placement.features


def batch_host_bytes(setting: Setting, size: GraphSize, hops: Hops) -> int:
    """What a batch holds on the host when a GPU runs the model: the loader's batch (CPU sampling), the pinned
    gather of its features (GPU sampling, features on the host), or nothing (all on the GPU)."""
    if not setting.gpu_sampling:
        return host_batch_bytes(size, hops, pinned=setting.config.sampler.pin_memory)
    if setting.features_on_gpu:
        return 0
    edge_rows = hops.total_edges * (size.edge_floats * FLOAT + size.type_bytes + INDEX) \
        if size.edge_floats or size.type_bytes else 0  # values, edge_type, e_id
    return int((hops.total_nodes * (size.features * FLOAT + INDEX + size.type_bytes) + edge_rows) * PINNED_ROUNDING)


def evaluation_bytes(setting: Setting, size: GraphSize) -> tuple[str, int, int]:
    """(label, host bytes, GPU working set) of one evaluation; on the CPU the working set is the host's."""
    config = setting.config
    if evaluation_sampled(config, size):
        fanouts = list(config.eval.fanouts or config.sampler.num_neighbors)
        hops = sampled_hops(batch_seeds(config, evaluation=True), fanouts, size)
        work = forward_bytes(config, size, hops, backward=False)
        label = SAMPLED_EVALUATION + ("" if config.eval.mode == "sampled" else " (no per-layer API)")
        if not setting.gpus:
            return label, work, 0
        return label, batch_host_bytes(setting, size, hops), work
    kept, gathered, work = full_eval_bytes(config, size, setting.ranks)
    host = kept + gathered + size.nodes * INDEX  # and its loader's own node map (train/graph/sampling/samplers.py)
    label = f"evaluation: {math.ceil(size.nodes / setting.ranks):,} layer rows, 1 neighbourhood"
    if setting.features_on_gpu:  # the layers' rows are kept on the GPU with the features (gpu_rows counts them)
        return label, size.nodes * INDEX, work + exact_eval_gpu_rows(config, size, setting.ranks)
    return (label, host, work) if setting.gpus else (label, host + work, 0)


def rank_rows(setting: Setting, size: GraphSize, train_hops: Hops, evaluation: tuple[str, int, int]) -> dict:
    """Host memory of one rank: what it holds throughout, a training step, an evaluation, and the loading."""
    config, gpus = setting.config, setting.gpus
    runtime = RUNTIME_CPU_BYTES + (CUDA_HOST_BYTES if gpus else 0)
    own = "alone on its node" if config.data.share == "node" else "data.share=process"
    training = (batch_host_bytes(setting, size, train_hops) if gpus
                else int(CPU_STEPS_GROWTH * forward_bytes(config, size, train_hops, backward=True)))
    label, eval_host, _work = evaluation
    rows = {"runtime (python, torch, PyG" + (", CUDA)" if gpus else ")"): runtime,
            "model, gradients, Adam state": 0 if gpus else model_bytes(config, size),
            f"graph and CSC of its own ({own})": 0 if setting.sharing else private_graph_bytes(size),
            "sampler's node map": 0 if setting.gpu_sampling else size.nodes * INDEX,
            TRAINING_BATCH + ("" if gpus else ": features, activations, gradients"): training,
            label: eval_host}
    rows = {k: v for k, v in rows.items() if v}
    # Evaluation runs on top of what the heap kept of training (pinned batches stay cached whole).
    kept = training if gpus else int(TRAINING_KEPT * training)
    steady = sum(rows.values()) - training - eval_host + max(training, kept + eval_host)
    loading = f"while loading ({'local rank 0' if setting.sharing else 'each rank'}): graph, CSC build, loader"
    rows[loading] = loading_bytes(size, loader_kind(config.data.name), setting.loaded)
    rows["while training and evaluating"] = steady
    rows["peak"] = max(steady, runtime + rows[loading])
    return rows


def node_rows(setting: Setting, size: GraphSize, rank: dict) -> dict:
    """One node: the shared graph once, and the larger of its loading (one loader, or every rank) and training."""
    per_node, runtime = setting.per_node, _term(rank, "runtime")
    loaders = 1 if setting.sharing else per_node
    loading, steady = _term(rank, "while loading"), rank["while training and evaluating"]
    shared = shared_graph_bytes(size) if setting.sharing else 0
    rows = {"graph, shared once (/dev/shm or node-local disk)": shared,
            f"while loading: {per_node} runtimes + {loaders} loading": per_node * runtime + loaders * loading,
            f"while training: {per_node} ranks x {steady / GIB:.2f} GiB": per_node * steady}
    rows = {k: v for k, v in rows.items() if v}
    rows["peak"] = shared + max(per_node * runtime + loaders * loading, per_node * steady)
    return rows


def make_plan(config: Config, size: GraphSize, nodes: int, ranks: int, gpus: bool,
              gpu_bytes: int | None = None) -> Plan:
    """Bytes per node, per rank and per GPU for `ranks` processes over `nodes` nodes (GPUs of `gpu_bytes`), the
    graph of `size` loaded and held as the task holds it (`held_size`)."""
    loaded, size = size, held_size(config, size)
    per_node = -(-ranks // nodes)  # the busiest node (make submit spreads them evenly: jobs/submit.sh)
    sharing = shares_graph(config.data.share, per_node)  # alone on its node, a rank keeps its own copy
    asked = gpus and config.sampler.device != "cpu"
    setting = Setting(config, ranks, per_node, gpus, sharing,
                      placement_for(config, size, sharing, gpu_bytes, ranks, per_node) if asked else None,
                      loaded if size is not loaded else None)
    train_hops = sampled_hops(batch_seeds(config), config.sampler.num_neighbors, size)
    evaluation = evaluation_bytes(setting, size)
    rank = rank_rows(setting, size, train_hops, evaluation)
    gpu = gpu_rows(setting, size, forward_bytes(config, size, train_hops, backward=True), evaluation[2])
    plan = Plan(size, nodes, per_node, config.data.share)
    if not counts_own_intermediates(config) and reads_graph(config):
        plan.notes.append(f"model.name={config.model.name} is your own model: the training batch counts its "
                          "intermediates per edge as SAGEConv's (one input row per edge); a model that keeps more per "
                          "edge (attention per head, projected edge features) needs more than planned.")
    plan.rows = {"node": node_rows(setting, size, rank), "rank": rank, "GPU": gpu if gpus else {}}
    sampled = (TRAINING_BATCH,) + ((SAMPLED_EVALUATION, EVALUATION_WORK) if evaluation_sampled(config, size) else ())
    plan.bounds = {item for rows in plan.rows.values() for item in rows if item.startswith(sampled)}
    placement = setting.placement
    plan.sampling, plan.placement = ("cuda" if setting.gpu_sampling else "cpu"), placement
    if asked:
        device = config.sampler.device
        plan.notes.append(placement.describe("the GPU", device) if placement is not None else
                          f"sampler.device={device}: GPU memory unknown, so where the graph goes is decided on the "
                          "node; give --gpu-memory GiB to know it now.")
        fell_back = device == "cuda" and placement is not None and not placement.structure
        plan.fallback = placement.describe("the GPU") if fell_back else ""
    return plan


def gpu_rows(setting: Setting, size: GraphSize, train: int, evaluation: int) -> dict:
    """Per GPU: the runtime, the model, the graph where sampler.device=cuda puts it, the larger working set."""
    rows = {"CUDA context, NCCL and cuBLAS buffers": GPU_RUNTIME_BYTES + nccl_buffer_bytes(setting.ranks,
                                                                                          setting.per_node),
            "model, gradients, Adam state": model_bytes(setting.config, size)}
    if setting.gpu_sampling:
        rows["graph structure: CSC and the sampler's node map"] = gpu_structure_bytes(
            size.nodes, size.edges, with_perm=not setting.sharing,
            csc_index_bytes=csc_index_bytes(size, setting.sharing))
        if setting.features_on_gpu:
            rows[f"features ({setting.config.data.feature_dtype}) and labels (they fit)"] = gpu_feature_bytes_of(
                setting.config, size, setting.sharing)
    rows[TRAINING_BATCH + ": features, activations, gradients"] = train
    copy = feature_copy_bytes(size.nodes, size.features, setting.config.data.feature_dtype) \
        if setting.features_on_gpu else 0
    if copy:  # before the first batch, the features' last chunk beside them (device_plan.features_to_device)
        rows[f"while placing the features: a float32 chunk, made {setting.config.data.feature_dtype} there"] = copy
    if evaluation:
        rows[EVALUATION_WORK + (" with its layer rows (kept where the features are)"
                                         if setting.features_on_gpu and not evaluation_sampled(setting.config, size)
                                         else "")] = evaluation
    work = max(train, evaluation, copy)
    rows["allocator blocks beyond the larger working set"] = int(work * (CUDA_CACHE_SLACK - 1))
    rows["in all"] = sum(rows.values()) - train - evaluation - copy + work
    return rows
