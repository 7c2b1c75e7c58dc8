"""Where batches are sampled (sampler.device) and what each batch is gathered from, decided once per run.

CPU sampling: the loader's workers sample and gather the features (pinned when training on a
GPU). GPU sampling: the CSC on the GPU, the features there too when they fit, else gathered on
the host into pinned memory and copied without blocking. The edges' values and ids (edge_attr,
edge_weight, e_id: train/graph/edge_rows.py) go where the features go, and count with them.
sampler.device=auto (the default) samples on the GPU when structure and features both fit beside the run's
working sets, else on the CPU.
Each rank's GPU holds a copy of its own: the graph is not split across a node's GPUs, so where each
cannot hold one, every rank samples from the node's one copy in host memory.
The ranks decide alike, by the least free GPU memory of them all (`least_free_gpu_memory`): DDP's lockstep runs
the job at its slowest rank's pace, so one rank sampling on the CPU (a stray process on its GPU) would slow all.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data

from train.config import DataConfig, SamplerConfig, spec_named
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
# NCCL's own GPU memory beyond what one rank's CUDA context, cuBLAS and NCCL take at world size 1 (the plan's
# GPU_RUNTIME_BYTES, train/plan/terms.py): not measured here (no GPU), so from NCCL's defaults (its user guide's
# environment variables): per channel and connection, one buffer a protocol (Simple: NCCL_BUFFSIZE, 4 MiB; LL128
# about as much; LL 256 KiB); up to 32 channels (NCCL_MAX_NCHANNELS' ceiling on NVLink GPUs); a ring's two
# connections a channel, and across nodes a tree's three; all_to_all's point-to-point connections to each peer
# (NCCL_NCHANNELS_PER_NET_PEER, 2, each way, Simple's buffer). `make gpu-check` on several GPUs calibrates it.
NCCL_CONNECTION_BYTES = 9 * 2**20
NCCL_CHANNELS = 32
NCCL_PEER_BYTES = 2 * 2 * 4 * 2**20
INDEX_BYTES = 8  # int64 ids: the sampler's node map, and the CSC but where the node shares it in int32
# data.feature_dtype: how the features placed on the GPU are stored (the model computes in float32); each allowed
# value (its declaration's choices) is the name of a torch dtype.
FEATURE_DTYPES = {name: getattr(torch, name) for name in spec_named(DataConfig, "feature_dtype").choices}


# The features go to the GPU in row chunks of at most this many bytes (in their dtype on the host): the GPU's one
# transient while they are placed.
FEATURE_COPY_CHUNK_BYTES = 64 * 2**20


def features_to_device(x: Tensor, device: torch.device, dtype: torch.dtype,
                       chunk_bytes: int = FEATURE_COPY_CHUNK_BYTES) -> Tensor:
    """`x` on `device` in `dtype`, copied in row chunks in its own dtype and converted there. `x.to(device, dtype)`
    converts on the host first: a whole-size host temporary (27 GiB of bfloat16 for ogbn-papers100M) in every rank
    of the node at once, made on one thread, that no plan counts."""
    if x.dtype == dtype or x.dim() == 0 or x.size(0) == 0:
        return x.to(device, dtype)
    out = torch.empty(x.shape, dtype=dtype, device=device)
    rows = max(1, chunk_bytes // max(x[0].nbytes, 1))
    for start in range(0, x.size(0), rows):
        out[start:start + rows] = x[start:start + rows].to(device)  # the copy in x's dtype; converted on `device`
    return out


def feature_copy_bytes(num_nodes: int, num_features: int, feature_dtype: str) -> int:
    """What `features_to_device` holds on the GPU beside the placed features: one chunk in float32 (0 where the
    features keep float32, copied whole in place)."""
    if FEATURE_DTYPES[feature_dtype] == torch.float32:
        return 0
    row = max(num_features, 1) * torch.float32.itemsize
    return min(num_nodes, max(1, FEATURE_COPY_CHUNK_BYTES // row)) * row


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


def nccl_buffer_bytes(world_size: int, ranks_per_node: int) -> int:
    """What NCCL takes on each GPU for the job's collectives, by world size and topology: a ring's buffers within
    a node, a tree's too where the job spans nodes, and all_to_all's (the exact evaluation's) to every peer; 0 at
    world size 1. The run (train/loop/fit.py) and the plan (train/plan/terms.py) both set it aside before placing
    the graph, so they decide alike near the threshold."""
    if world_size <= 1:
        return 0
    ring = NCCL_CHANNELS * 2 * NCCL_CONNECTION_BYTES
    tree = NCCL_CHANNELS * 3 * NCCL_CONNECTION_BYTES if world_size > ranks_per_node else 0
    return ring + tree + (world_size - 1) * NCCL_PEER_BYTES


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
    # the working sets where the features are on the GPU too: the exact evaluation then keeps its layer rows there
    # (train/loop/evaluate.py GraphAt); None: the same as working_bytes
    with_features: int | None = None

    @property
    def budget(self) -> int:
        """What the graph may take: the free memory less the headroom and the working sets."""
        return max(int(self.free_bytes * (1 - self.headroom)) - self.working_bytes, 0)

    @property
    def features_budget(self) -> int:
        """What the graph with its features may take: as `budget`, beside the working sets that come with them."""
        working = self.working_bytes if self.with_features is None else self.with_features
        return max(int(self.free_bytes * (1 - self.headroom)) - working, 0)

    @property
    def decision(self) -> tuple[bool, bool]:
        """What goes on the GPU: (structure, features)."""
        return self.structure, self.features

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
                f"gathered into pinned memory and copied without blocking ({self._features_room()}).")

    def _features_room(self) -> str:
        if self.with_features is None or self.with_features == self.working_bytes:
            return self._room()
        return (f"{gib(self.features_budget)} of the {gib(self.free_bytes)} of free GPU memory is left beside the "
                f"training and evaluation working sets with the exact evaluation's layer rows, kept on the GPU with "
                f"the features ({gib(self.with_features)}), and a {self.headroom:.0%} headroom")

    def _describe_auto(self, device: str) -> str:
        need = (f"the graph structure ({gib(self.structure_bytes)}) and features ({gib(self.feature_bytes)}) "
                f"need {gib(self.structure_bytes + self.feature_bytes)}")
        if self.features:
            return f"sampler.device=auto: sampling on {device}: {need} and fit ({self._features_room()})."
        return (f"sampler.device=auto: sampling on the CPU: {need}, but {self._features_room()}. Each GPU would hold "
                "a copy of its own, so every rank of the node samples from the node's copy in host memory instead; "
                "data.feature_dtype=bfloat16 halves the features, sampler.device=cuda puts the structure alone "
                "on the GPU.")


def gpu_placement(structure_bytes: int, feature_bytes: int, free: int, working_bytes: int = 0,
                  headroom: float = GPU_HEADROOM, with_features: int | None = None) -> Placement:
    """Structure on the GPU when it fits beside the working sets (and the headroom); features too when both fit
    beside the working sets that come with the features (`with_features`: the exact evaluation's layer rows)."""
    placement = Placement(False, False, structure_bytes, feature_bytes, free, working_bytes, headroom, with_features)
    structure = structure_bytes <= placement.budget
    features = structure and structure_bytes + feature_bytes <= placement.features_budget
    return dataclasses.replace(placement, structure=structure, features=features)


def samples_on_gpu(asked: str, placement: Placement | None) -> bool:
    """The sampler.device rule, the one home the run (plan_sampling) and the memory plan (train/plan/terms.py
    Setting.gpu_sampling) read.

    Args:
        asked: sampler.device: cpu, auto or cuda.
        placement: where the graph fits on the GPU (gpu_placement); None where the GPU's memory is unknown (the
            plan without --gpu-memory).

    Returns:
        Whether batches are sampled on the GPU: never for cpu; for auto where the structure and the features fit;
        for cuda where the structure fits. Unknown memory: cuda is planned on the GPU, auto on the host.
    """
    if asked == "cpu":
        return False
    if placement is None:
        return asked == "cuda"
    return placement.features if asked == "auto" else placement.structure


@dataclass(frozen=True)
class FreeGpuMemory:
    """The free GPU memory every rank places the graph by: the least of all ranks', and whose it is."""

    bytes: int  # the least free memory of the ranks' GPUs
    rank: int  # the rank whose GPU has it
    most: int  # the most free memory of the ranks' GPUs
    ranks: int = 1

    def forced(self, decide) -> str:
        """Where the least free memory chose otherwise than the most would have, the log's words naming the rank
        that forced it ('' where it did not). `decide(free)`: the decision at that free memory."""
        if self.ranks == 1 or decide(self.bytes) == decide(self.most):
            return ""
        return (f" Rank {self.rank} forced this: its GPU has the least free memory of the {self.ranks} ranks "
                f"({gib(self.bytes)}; the most is {gib(self.most)}, where the graph would have gone further onto the "
                "GPU), and every rank places the graph alike (DDP runs the job at its slowest rank's pace); "
                "free that GPU (nvidia-smi shows its processes) or leave that node out.")


def least_free_gpu_memory(free_bytes: int, device: torch.device) -> FreeGpuMemory:
    """Collective over the default process group (where one exists): the least of the ranks' `free_bytes`, and
    the rank that has it; every rank gets the same answer."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return FreeGpuMemory(free_bytes, dist.get_rank() if dist.is_initialized() else 0, free_bytes)
    mine = torch.tensor([free_bytes], dtype=torch.int64, device=device)
    gathered = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, mine)
    frees = [int(t.item()) for t in gathered]
    rank = min(range(len(frees)), key=frees.__getitem__)
    return FreeGpuMemory(frees[rank], rank, max(frees), len(frees))


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


def plan_sampling(data: Data, config: SamplerConfig, device: torch.device,
                  free_gpu_bytes: int | FreeGpuMemory | None = None, working_bytes: int = 0,
                  feature_dtype: str = "float32", with_features: int | None = None) -> SamplingPlan:
    """CPU sampling (features gathered by the loader, pinned when training on a GPU), or GPU sampling with
    the CSC on the GPU and the features there too (in `feature_dtype`) when they fit beside `working_bytes`.
    sampler.device=auto samples on the GPU only when both fit; cuda whenever the structure does, the features
    then gathered on the host into pinned memory. `free_gpu_bytes`: the free GPU memory to place by (the ranks' least:
    `least_free_gpu_memory`), else this GPU's own; `with_features`: the working sets where the features are on the
    GPU too (the exact evaluation's layer rows with them: train/plan/terms.py gpu_working_bytes)."""
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
    free_gpu = free_gpu_bytes if free_gpu_bytes is not None else torch.cuda.mem_get_info(device)[0]
    if isinstance(free_gpu, int):
        free_gpu = FreeGpuMemory(free_gpu, 0, free_gpu)
    colptr, row, perm = csc
    structure = gpu_structure_bytes(colptr.numel() - 1, row.numel(), perm is not None, row.element_size())
    structure += segments.nbytes if segments is not None else 0
    labels = data.y.nbytes // max(data.num_nodes, 1) if data.y is not None else 0
    features = gpu_feature_bytes(data.num_nodes, store.width if x is not None else 0, feature_dtype,
                                 edges.nbytes if edges else 0, labels)
    features += sum(t.nbytes for t in nodes.values())
    placement = gpu_placement(structure, features, free_gpu.bytes, working_bytes, with_features=with_features)
    auto = config.device == "auto"
    note = placement.describe(str(device), config.device) + free_gpu.forced(
        lambda free: gpu_placement(structure, features, free, working_bytes, with_features=with_features).decision)
    if not samples_on_gpu(config.device, placement):
        cpu_plan.note, cpu_plan.fell_back, cpu_plan.each_rank = note, not auto, True
        return cpu_plan
    gpu_csc = tuple(t.to(device) if t is not None else None for t in csc)
    gpu_segments = segments.to(device) if segments is not None else None
    if placement.features:
        on_gpu = batch_source(device, x=features_to_device(x, device, FEATURE_DTYPES[feature_dtype])
                              if x is not None else None,
                              y=data.y.to(device) if data.y is not None else None, num_nodes=data.num_nodes,
                              nodes={name: t.to(device) for name, t in nodes.items()})
        return SamplingPlan(device, on_gpu, gpu_csc, None, False, 0, note, each_rank=auto,
                            edges=edges.to(device) if edges else None, segments=gpu_segments, fetched=fetched)
    structure_only = batch_source(device, num_nodes=data.num_nodes)
    return SamplingPlan(device, structure_only, gpu_csc, (x, data.y), False, 0, note, edges=edges,
                        segments=gpu_segments, host_nodes=nodes, fetched=fetched)
