"""Where batches are sampled (sampler.device) and what each batch is gathered from, decided once per run.

CPU sampling: the loader's workers sample and gather the features (pinned when training on a
GPU). GPU sampling: the CSC on the GPU, the features there too when they fit, else gathered on
the host into pinned memory and copied without blocking.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch_geometric.data import Data

from train.config import SamplerConfig
from train.errors import UserError
from train.graph.form import CSC, form_of
from train.graph.sampler import make_node_sampler, node_loader
from train.graph.shared_graph import gib

# Fraction of the free GPU memory the graph may take with sampler.device=cuda
# (the rest is for the model, activations and the sampler's per-batch tensors).
GPU_GRAPH_FRACTION = 0.6
INDEX_BYTES = 8  # int64 ids: the sampler's node map, and the CSC but where the node shares it in int32


def gpu_structure_bytes(num_nodes: int, num_edges: int, with_perm: bool, csc_index_bytes: int = INDEX_BYTES) -> int:
    """What sampler.device=cuda puts on the GPU for the structure: the CSC (colptr, row, and perm where the
    CSC has one: data.share=process; `csc_index_bytes` per id) and the sampler's global -> local node map
    (one int64 id per node)."""
    return ((num_nodes + 1) + num_edges * (2 if with_perm else 1)) * csc_index_bytes + num_nodes * INDEX_BYTES


@dataclass(frozen=True)
class Placement:
    """Where sampler.device=cuda puts the graph, decided from the free GPU memory (the run's and the plan's)."""

    structure: bool  # the CSC and the node map on the GPU (else: sampling falls back to the CPU)
    features: bool  # x and y on the GPU too (else gathered on the host into pinned memory per batch)
    structure_bytes: int
    feature_bytes: int
    free_bytes: int
    fraction: float = GPU_GRAPH_FRACTION

    @property
    def budget(self) -> int:
        return int(self.free_bytes * self.fraction)

    def describe(self, device: str) -> str:
        """One line for the log (the run) or the plan: where the graph goes, and why when not on the GPU."""
        room = f"at most {self.fraction:.0%} of the {gib(self.free_bytes)} of free GPU memory goes to the graph"
        if not self.structure:
            return (f"sampler.device=cuda falls back to sampling on the CPU: the graph structure (CSC and the "
                    f"sampler's node map) needs {gib(self.structure_bytes)}, but {room} ({gib(self.budget)}).")
        if self.features:
            return f"sampler.device=cuda: graph structure and features on {device}."
        return (f"sampler.device=cuda: structure on {device}; features ({gib(self.feature_bytes)}) stay on the host, "
                f"gathered into pinned memory and copied without blocking ({room}).")


def gpu_placement(structure_bytes: int, feature_bytes: int, free: int,
                  fraction: float = GPU_GRAPH_FRACTION) -> Placement:
    """Structure on the GPU when it fits in `fraction` of the free GPU memory; features too when both fit."""
    budget = free * fraction
    structure = structure_bytes <= budget
    features = structure and structure_bytes + feature_bytes <= budget
    return Placement(structure, features, structure_bytes, feature_bytes, free, fraction)


def gather_pinned(source: Tensor, index: Tensor) -> Tensor:
    """``source[index]`` written straight into page-locked memory, ready for a non-blocking copy.

    PyTorch's caching host allocator keeps the block until the copy that reads it has finished.
    """
    out = torch.empty((index.numel(), *source.shape[1:]), dtype=source.dtype, pin_memory=True)
    return torch.index_select(source, 0, index, out=out)


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
    fell_back: bool = False  # sampler.device=cuda asked, sampling on the CPU: every rank says so in the log
    _samplers: dict = field(default_factory=dict, repr=False, compare=False)  # built on first use, then reused

    def loader(self, seeds: Tensor, num_neighbors: Sequence[int], batch_size: int, *, seed: int | None,
               epoch: int = 0):
        """Batches of `seeds` (in order) from the run's one sampler: every epoch and sampled evaluation."""
        sampler = self._sampler("batches", self.data, self.csc, self.device, num_neighbors)
        return node_loader(sampler, self.data, seeds, num_neighbors, batch_size, seed=seed, epoch=epoch,
                           num_workers=self.num_workers, pin_memory=self.pin_memory)

    def host_loader(self, structure: Data, host_csc: CSC, nodes: Tensor, batch_size: int):
        """Full neighbourhoods of `nodes`, sampled on the host (full evaluation gathers its rows there):
        the batches' sampler when it samples on the CPU, else one host sampler, kept for the run."""
        on_cpu = self.device.type == "cpu"
        sampler = self._sampler("batches" if on_cpu else "host", structure, self.csc if on_cpu else host_csc,
                                torch.device("cpu"), [-1])
        return node_loader(sampler, structure, nodes, [-1], batch_size)

    def _sampler(self, key: str, data: Data, csc: CSC, device: torch.device, num_neighbors: Sequence[int]):
        if key not in self._samplers:
            self._samplers[key] = make_node_sampler(data, num_neighbors, csc=csc, device=device,
                                                    num_workers=self.num_workers)
        return self._samplers[key]

    def complete(self, batch: Data, device: torch.device) -> Data:
        """Add the features when they stay on the host: pinned gather, then a non-blocking copy."""
        if self.host_features is None:
            return batch
        index = batch.n_id.to("cpu")
        x, y = self.host_features
        batch.x = gather_pinned(x, index).to(device, non_blocking=True)
        batch.y = gather_pinned(y, index).to(device, non_blocking=True)
        return batch


def batch_source(device: torch.device, *, x: Tensor | None = None, y: Tensor | None = None,
                 num_nodes: int | None = None) -> Data:
    """What a loader gathers each batch from: the node features (where they are gathered) and an empty
    edge_index. The structure is the CSC, sampled apart; PyG's loader builds each batch's edge_index from
    the sample and reads only the device of the graph's (torch_geometric/loader/utils.py filter_edge_store_)."""
    placeholder = torch.empty(2, 0, dtype=torch.long, device=device)
    if x is None:
        return Data(edge_index=placeholder, num_nodes=num_nodes)
    return Data(x=x, y=y, edge_index=placeholder)


def _nbytes(tensors) -> int:
    return sum(t.nbytes for t in tensors if t is not None)


def plan_sampling(data: Data, config: SamplerConfig, device: torch.device,
                  free_gpu_bytes: int | None = None) -> SamplingPlan:
    """CPU sampling (features gathered by the loader, pinned when training on a GPU), or GPU sampling with
    the CSC on the GPU and the features there too when they fit, else gathered on the host into pinned memory."""
    csc = form_of(data).structure(data)
    on_host = batch_source(torch.device("cpu"), x=data.x, y=data.y)
    cpu_plan = SamplingPlan(torch.device("cpu"), on_host, csc, None,
                            pin_memory=config.pin_memory and device.type == "cuda", num_workers=config.num_workers)
    if config.device == "cpu":
        return cpu_plan
    if device.type != "cuda":
        raise UserError(f"sampler.device='cuda' needs training on a GPU, but this rank trains on {device} "
                        "(no GPU visible, or dist.backend=gloo); use sampler.device=cpu.")
    if free_gpu_bytes is None:
        free_gpu_bytes, _total = torch.cuda.mem_get_info(device)
    colptr, row, perm = csc
    structure = gpu_structure_bytes(colptr.numel() - 1, row.numel(), perm is not None, row.element_size())
    placement = gpu_placement(structure, _nbytes((data.x, data.y)), free_gpu_bytes)
    if not placement.structure:
        cpu_plan.note, cpu_plan.fell_back = placement.describe(str(device)), True
        return cpu_plan
    gpu_csc = tuple(t.to(device) if t is not None else None for t in csc)
    if placement.features:
        on_gpu = batch_source(device, x=data.x.to(device), y=data.y.to(device))
        return SamplingPlan(device, on_gpu, gpu_csc, None, False, 0, placement.describe(str(device)))
    structure_only = batch_source(device, num_nodes=data.num_nodes)
    return SamplingPlan(device, structure_only, gpu_csc, (data.x, data.y), False, 0, placement.describe(str(device)))
