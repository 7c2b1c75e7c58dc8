"""Where batches are sampled (sampler.device) and what each batch is gathered from, decided once per run.

CPU sampling: the loader's workers sample and gather the features (pinned when training on a
GPU). GPU sampling: the CSC on the GPU, the features there too when they fit, else gathered on
the host into pinned memory and copied without blocking. The edges' values and ids (edge_attr,
edge_weight, e_id: train/graph/edge_rows.py) go where the features go, and count with them.
sampler.device=auto (the default) samples on the GPU when structure and features both fit beside the run's
working sets, else on the CPU.
Each rank's GPU holds a copy of its own: the graph is not split across a node's GPUs, so where each
cannot hold one, every rank samples from the node's one copy in host memory.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch_geometric.data import Data

from train.config import SamplerConfig
from train.errors import UserError
from train.graph.edge_rows import EdgeRows, gather_pinned
from train.graph.form import CSC, form_of
from train.graph.sampling.samplers import make_node_loader, make_node_sampler
from train.graph.sharing.feature_store import GraphFeatures, features_of
from train.graph.sharing.shared_graph import gib
from train.graph.typed_csc import TypedSegments

# Of the free GPU memory, what the graph never takes: the sampler's per-batch tensors, the allocator's blocks
# beyond the planned working sets, and what other libraries (NCCL, cuBLAS) allocate on their first use.
GPU_HEADROOM = 0.1
INDEX_BYTES = 8  # int64 ids: the sampler's node map, and the CSC but where the node shares it in int32
# data.feature_dtype: how the features placed on the GPU are stored (the model computes in float32).
FEATURE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def gpu_structure_bytes(num_nodes: int, num_edges: int, with_perm: bool, csc_index_bytes: int = INDEX_BYTES) -> int:
    """What sampler.device=cuda puts on the GPU for the structure: the CSC (colptr, row, and perm where the
    CSC has one: data.share=process; `csc_index_bytes` per id) and the sampler's global -> local node map
    (one int64 id per node)."""
    return ((num_nodes + 1) + num_edges * (2 if with_perm else 1)) * csc_index_bytes + num_nodes * INDEX_BYTES


def gpu_feature_bytes(num_nodes: int, num_features: int, feature_dtype: str, edge_bytes: int = 0,
                      label_bytes: int = INDEX_BYTES) -> int:
    """The features in data.feature_dtype and the labels (`label_bytes` a node: an int64 class, or a float32 per
    task of a multi-label graph), as the GPU holds them, and the edges' values and ids (`edge_bytes`:
    EdgeRows.nbytes), which go with them."""
    return num_nodes * (num_features * FEATURE_DTYPES[feature_dtype].itemsize + label_bytes) + edge_bytes


@dataclass(frozen=True)
class Placement:
    """Where the graph goes on the GPU, decided from its free memory beside the run's working sets (the run's and
    the plan's: both pass the same figures, train/plan/terms.py gpu_working_bytes)."""

    structure: bool  # the CSC and the node map fit on the GPU
    features: bool  # x and y fit there too
    structure_bytes: int
    feature_bytes: int
    free_bytes: int
    working_bytes: int = 0  # the larger of the training and evaluation working sets on the GPU
    headroom: float = GPU_HEADROOM

    @property
    def budget(self) -> int:
        """What the graph may take: the free memory less the headroom and the working sets."""
        return max(int(self.free_bytes * (1 - self.headroom)) - self.working_bytes, 0)

    def _room(self) -> str:
        return (f"{gib(self.budget)} of the {gib(self.free_bytes)} of free GPU memory is left beside the training "
                f"and evaluation working sets ({gib(self.working_bytes)}) and a {self.headroom:.0%} headroom")

    def describe(self, device: str, asked: str = "cuda") -> str:
        """One line for the log (the run) or the plan: where sampler.device=`asked` puts the graph, and why."""
        if asked == "auto":
            return self._describe_auto(device)
        if not self.structure:
            return (f"sampler.device=cuda falls back to sampling on the CPU: the graph structure (CSC and the "
                    f"sampler's node map) needs {gib(self.structure_bytes)}, but {self._room()}.")
        if self.features:
            return f"sampler.device=cuda: graph structure and features on {device}."
        return (f"sampler.device=cuda: structure on {device}; features ({gib(self.feature_bytes)}) stay on the host, "
                f"gathered into pinned memory and copied without blocking ({self._room()}).")

    def _describe_auto(self, device: str) -> str:
        need = (f"the graph structure ({gib(self.structure_bytes)}) and features ({gib(self.feature_bytes)}) "
                f"need {gib(self.structure_bytes + self.feature_bytes)}")
        if self.features:
            return f"sampler.device=auto: sampling on {device}: {need} and fit ({self._room()})."
        return (f"sampler.device=auto: sampling on the CPU: {need}, but {self._room()}. Each GPU would hold a copy "
                "of its own, so every rank of the node samples from the node's copy in host memory instead; "
                "data.feature_dtype=bfloat16 halves the features, sampler.device=cuda puts the structure alone "
                "on the GPU.")


def gpu_placement(structure_bytes: int, feature_bytes: int, free: int, working_bytes: int = 0,
                  headroom: float = GPU_HEADROOM) -> Placement:
    """Structure on the GPU when it fits beside the working sets (and the headroom); features too when both fit."""
    placement = Placement(False, False, structure_bytes, feature_bytes, free, working_bytes, headroom)
    structure = structure_bytes <= placement.budget
    features = structure and structure_bytes + feature_bytes <= placement.budget
    return dataclasses.replace(placement, structure=structure, features=features)


@dataclass
class SamplingPlan:
    """Decided once per run: where the sampler runs, what each batch is gathered from."""

    device: torch.device  # where the sampler runs
    data: Data  # what the loader gathers per batch (no split indices: batches must not carry them)
    csc: CSC
    host_features: tuple[Tensor, Tensor] | None  # (x, y) gathered per batch into pinned memory
    pin_memory: bool  # DataLoader pinning: CPU sampling, GPU training
    num_workers: int
    note: str = ""
    fell_back: bool = False  # sampler.device=cuda asked, sampling on the CPU
    each_rank: bool = False  # the note is this rank's own decision (auto, or a fallback): every rank says it
    edges: EdgeRows | None = None  # the edges' values and ids, where the features are (None: the graph has none)
    segments: TypedSegments | None = None  # a typed graph's typed CSC, where the CSC is: k drawn per edge type
    host_nodes: dict[str, Tensor] = field(default_factory=dict)  # per-node tensors gathered with host_features
    # data.features=sharded: each batch's x fetched through the graph's store (train/graph/sharing/feature_store.py),
    # a collective every rank makes in the same order, inside `fetch_session`
    fetched: GraphFeatures | None = None
    _samplers: dict = field(default_factory=dict, repr=False, compare=False)  # built on first use, then reused

    def loader(self, seeds: Tensor, num_neighbors: Sequence[int], batch_size: int, *, seed: int | None,
               epoch: int = 0):
        """Batches of `seeds` (in order) from the run's one sampler: every epoch and sampled evaluation."""
        sampler = self.batch_sampler(num_neighbors)
        return make_node_loader(self.data, seeds, num_neighbors, batch_size, sampler=sampler, seed=seed, epoch=epoch,
                                num_workers=self.num_workers, pin_memory=self.pin_memory, edges=self.edges)

    def batch_sampler(self, num_neighbors: Sequence[int] = ()):
        """The run's one sampler (built on first use, then reused): every epoch and sampled evaluation."""
        if "batches" not in self._samplers:
            self._samplers["batches"] = make_node_sampler(self.data, num_neighbors, csc=self.csc, device=self.device,
                                                          num_workers=self.num_workers, segments=self.segments)
        return self._samplers["batches"]

    def complete(self, batch: Data, device: torch.device) -> Data:
        """Add the features where the loader did not gather them: fetched through the graph's store (sharded: a
        collective), or gathered on the host into pinned memory and copied without blocking."""
        if self.fetched is not None:
            batch.x = self.fetched.rows(batch.n_id, device)
        if self.host_features is None:
            return batch
        index = batch.n_id.to("cpu")
        x, y = self.host_features
        if x is not None:
            batch.x = gather_pinned(x, index).to(device, non_blocking=True)
        batch.y = gather_pinned(y, index).to(device, non_blocking=True)
        for name, values in self.host_nodes.items():
            batch[name] = gather_pinned(values, index).to(device, non_blocking=True)
        return batch

    def fetch_session(self):
        """Around a run of batches whose number may differ between ranks (an epoch, an evaluation split): where
        each batch's rows are fetched, every rank ends it together (row_exchange.RowExchange); else nothing."""
        return self.fetched.session() if self.fetched is not None else contextlib.nullcontext()

    def release_fetches(self) -> None:
        """This rank's batches of the session are done: it keeps answering the others' fetches on a thread."""
        if self.fetched is not None:
            self.fetched.release()


def batch_source(device: torch.device, *, x: Tensor | None = None, y: Tensor | None = None,
                 num_nodes: int | None = None, nodes: dict[str, Tensor] | None = None) -> Data:
    """What a loader gathers each batch from: the node features (where they are gathered), the form's other
    per-node tensors (`nodes`: a typed graph's node_type, gathered by n_id as x is) and an empty edge_index. The
    structure is the CSC, sampled apart; PyG's loader builds each batch's edge_index from the sample and reads only
    the device of the graph's (torch_geometric/loader/utils.py filter_edge_store_)."""
    placeholder = torch.empty(2, 0, dtype=torch.long, device=device)
    if x is None and y is None:
        return Data(edge_index=placeholder, num_nodes=num_nodes)
    if x is None:  # sharded features: fetched per batch (SamplingPlan.complete), the labels gathered here
        return Data(y=y, edge_index=placeholder, num_nodes=num_nodes, **(nodes or {}))
    return Data(x=x, y=y, edge_index=placeholder, **(nodes or {}))


def _nbytes(tensors) -> int:
    return sum(t.nbytes for t in tensors if t is not None)


def plan_sampling(data: Data, config: SamplerConfig, device: torch.device, free_gpu_bytes: int | None = None,
                  working_bytes: int = 0, feature_dtype: str = "float32") -> SamplingPlan:
    """CPU sampling (features gathered by the loader, pinned when training on a GPU), or GPU sampling with
    the CSC on the GPU and the features there too (in `feature_dtype`) when they fit beside `working_bytes`.
    sampler.device=auto samples on the GPU only when both fit; cuda whenever the structure does, the features
    then gathered on the host into pinned memory."""
    form = form_of(data)
    csc, edges = form.structure(data), form.edge_rows(data)
    segments, nodes = form.segments(data), form.node_values(data)
    store = features_of(data)
    x = store.whole()  # None: sharded, each batch's rows fetched (never the whole matrix on a GPU)
    fetched = store if x is None else None
    on_host = batch_source(torch.device("cpu"), x=x, y=data.y, nodes=nodes, num_nodes=data.num_nodes)
    cpu_plan = SamplingPlan(torch.device("cpu"), on_host, csc, None,
                            pin_memory=config.pin_memory and device.type == "cuda", num_workers=config.num_workers,
                            edges=edges, segments=segments, fetched=fetched)
    if config.device == "cpu":
        return cpu_plan
    if device.type != "cuda":
        if config.device == "auto":
            cpu_plan.note = (f"sampler.device=auto: sampling on the CPU: this rank trains on {device} (no GPU visible, "
                             "or dist.backend=gloo).")
            cpu_plan.each_rank = True
            return cpu_plan
        raise UserError(f"sampler.device='cuda' needs training on a GPU, but this rank trains on {device} "
                        "(no GPU visible, or dist.backend=gloo); use sampler.device=auto or cpu.")
    if free_gpu_bytes is None:
        free_gpu_bytes, _total = torch.cuda.mem_get_info(device)
    colptr, row, perm = csc
    structure = gpu_structure_bytes(colptr.numel() - 1, row.numel(), perm is not None, row.element_size())
    structure += segments.nbytes if segments is not None else 0
    labels = data.y.nbytes // max(data.num_nodes, 1) if data.y is not None else 0
    features = gpu_feature_bytes(data.num_nodes, store.width if x is not None else 0, feature_dtype,
                                 edges.nbytes if edges else 0, labels)
    features += sum(t.nbytes for t in nodes.values())
    placement = gpu_placement(structure, features, free_gpu_bytes, working_bytes)
    auto = config.device == "auto"
    note = placement.describe(str(device), config.device)
    if not (placement.features if auto else placement.structure):
        cpu_plan.note, cpu_plan.fell_back, cpu_plan.each_rank = note, not auto, True
        return cpu_plan
    gpu_csc = tuple(t.to(device) if t is not None else None for t in csc)
    gpu_segments = segments.to(device) if segments is not None else None
    if placement.features:
        on_gpu = batch_source(device, x=x.to(device, FEATURE_DTYPES[feature_dtype]) if x is not None else None,
                              y=data.y.to(device) if data.y is not None else None, num_nodes=data.num_nodes,
                              nodes={name: t.to(device) for name, t in nodes.items()})
        return SamplingPlan(device, on_gpu, gpu_csc, None, False, 0, note, each_rank=auto,
                            edges=edges.to(device) if edges else None, segments=gpu_segments, fetched=fetched)
    structure_only = batch_source(device, num_nodes=data.num_nodes)
    return SamplingPlan(device, structure_only, gpu_csc, (x, data.y), False, 0, note, edges=edges,
                        segments=gpu_segments, host_nodes=nodes, fetched=fetched)
