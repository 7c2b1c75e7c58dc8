"""Uniform neighbour sampling that runs without pyg-lib or torch-sparse.

PyG's ``NeighborSampler`` needs one of those compiled extensions. They ship in
NVIDIA's PyG container but not in a plain pip install, so this module holds a
vectorized pure-PyTorch sampler with the same output contract (homogeneous,
directed, non-disjoint, ``subgraph_type='directional'``) and a loader factory
that picks PyG's own ``NeighborSampler`` whenever a native one exists. Its batches carry their edges'
ids and values (``e_id``, ``edge_attr``, ``edge_weight``: train/graph/edge_rows.py) as PyG's
``NeighborLoader`` gives them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence

import torch
import torch_geometric.typing
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader
from torch_geometric.sampler import (
    BaseSampler,
    EdgeSamplerInput,
    NeighborSampler,
    NodeSamplerInput,
    SamplerOutput,
)
from torch_geometric.sampler.utils import to_csc

from train.graph.edge_rows import EdgeRows
from train.graph.sampling.gpu_hop import key_positions
from train.graph.seeds import derive_seed
from train.graph.typed_csc import TypedSegments, build_csc

__all__ = [
    "FusedNeighborSampler",
    "SampledNodeLoader",
    "TorchNeighborSampler",
    "have_native_sampler",
    "make_node_loader",
    "make_node_sampler",
    "prefetch_safe",
]

# Floyd's method costs O(fanout^2) per node, independent of its degree; above
# this fanout, sorting random keys over the node's edges (O(degree)) is cheaper.
_FLOYD_MAX_FANOUT = 64

# Values of the global -> local id map besides local ids (which stay far below both).
_UNSEEN = 1 << 62
_FIRST_SEEN = 1 << 48

# The profiler's name for a batch's sampling on the sampler's device (bench/hop_profile.py counts its ops and syncs).
SAMPLE_SCOPE = "sampler.sample"



def have_native_sampler() -> bool:
    """True when PyG's own ``NeighborSampler`` can run (pyg-lib or torch-sparse)."""
    return bool(torch_geometric.typing.WITH_PYG_LIB or torch_geometric.typing.WITH_TORCH_SPARSE)


def _batch_seed(seed: int, epoch: int, first_node: int) -> int:
    """63-bit generator seed that depends only on (seed, epoch, first seed node)."""
    return derive_seed(seed, epoch, first_node)


def _first_node(inputs: NodeSamplerInput) -> int:
    return int(inputs.node[0]) if inputs.node.numel() else -1


def _on_device(nodes: Tensor, device: torch.device) -> Tensor:
    """A batch's seeds on the sampler's device, in int64; to a GPU through pinned memory, queued behind the stream's
    work: a copy from pageable memory would first wait for all of it (a host sync per batch)."""
    if device.type == "cuda" and nodes.device.type == "cpu":
        return nodes.to(torch.long).pin_memory().to(device, non_blocking=True)
    return nodes.to(device, torch.long)


def _floyd_positions(degree: Tensor, fanout: int, generator: torch.Generator | None) -> Tensor:
    """``fanout`` distinct uniform positions in ``[0, degree)`` per node (all degree > fanout).

    Floyd's algorithm, one step per pick for all nodes at once: draw ``r`` in
    ``[0, j]`` with ``j = degree - fanout + step``; keep ``r`` unless already
    picked, else take ``j``. Every ``fanout``-subset is equally likely.
    """
    num_nodes = degree.numel()
    # One row per step, so "already picked?" reduces over contiguous memory.
    picks = torch.empty((fanout, num_nodes), dtype=torch.long, device=degree.device)
    lowest_upper = degree - fanout
    for step in range(fanout):
        upper = lowest_upper + step  # inclusive bound of this draw
        unit = torch.rand(num_nodes, dtype=torch.float64, device=degree.device, generator=generator)
        draw = torch.minimum((unit * (upper + 1)).long(), upper)  # minimum guards float rounding
        if step:
            already = (picks[:step] == draw).any(dim=0)
            draw = torch.where(already, upper, draw)
        picks[step] = draw
    return picks.t()


def _random_key_positions(degree: Tensor, fanout: int, generator: torch.Generator | None) -> Tensor:
    """Same contract as :func:`_floyd_positions`, by keeping the ``fanout`` smallest
    of one random key per edge; O(sum of degrees), better for large fanouts."""
    device = degree.device
    num_nodes = degree.numel()
    num_candidates = int(degree.sum())
    segment = torch.repeat_interleave(
        torch.arange(num_nodes, device=device), degree, output_size=num_candidates
    )
    segment_start = torch.cumsum(degree, 0) - degree
    position = torch.arange(num_candidates, device=device) - segment_start.index_select(0, segment)
    keys = torch.rand(num_candidates, dtype=torch.float64, device=device, generator=generator)
    # Sort by key, then stably by segment: each segment ends up ordered by key.
    order = torch.sort(keys, stable=True).indices
    order = order.index_select(0, torch.sort(segment.index_select(0, order), stable=True).indices)
    keep = position < fanout  # segment[order] == segment, so `position` is the rank
    return position.index_select(0, order).masked_select(keep).view(num_nodes, fanout)


class TorchNeighborSampler(BaseSampler):
    """Uniform neighbour sampler for ``NodeLoader`` in plain PyTorch.

    Returns what PyG's ``NeighborSampler`` returns for a homogeneous graph
    (directed, non-disjoint, without replacement): seeds first in ``node``,
    then each hop's new nodes in order of first appearance; ``row``/``col``
    are local source/target ids, ``edge`` the CSC position of each edge
    (``NodeLoader`` maps it through :attr:`edge_permutation`).

    With ``seed`` set, each batch draws from its own generator seeded by
    (seed, epoch, first seed node), so a batch's sample does not depend on
    which batches ran before it or in which worker process: resuming from a
    checkpoint reproduces it bit for bit.
    """

    def __init__(
        self,
        data: Data,
        num_neighbors: list[int],
        *,
        seed: int | None = None,
        csc: tuple[Tensor, Tensor, Tensor] | None = None,
        device: torch.device | str | None = None,
        segments: TypedSegments | None = None,
    ):
        self.configure(num_neighbors, seed=seed, epoch=0)

        if csc is None:
            if device is None:
                device = data.edge_index.device if data.edge_index is not None else "cpu"
            if data.edge_index is None:
                csc = to_csc(data)
            else:
                csc = build_csc(data.edge_index, data.num_nodes)
        colptr, row, perm = csc
        # `.to` is a no-op for tensors already there, so shared-memory CSC stays shared.
        self.colptr = colptr.to(device) if device is not None else colptr
        self.device = self.colptr.device  # normalised, e.g. "cuda" -> cuda:0
        self.row = row.to(self.device)
        self.perm = perm.to(self.device) if perm is not None else None
        self.segments = segments.to(self.device) if segments is not None else None  # a typed graph's typed CSC
        self.num_nodes = self.colptr.numel() - 1
        if data.num_nodes is not None and data.num_nodes != self.num_nodes:
            raise ValueError(f"csc has {self.num_nodes} nodes but data has {data.num_nodes}")

        self._init_scratch()

    # Global -> local id map, all _UNSEEN between calls. Kept across calls so a
    # batch costs O(sampled) instead of O(num_nodes); the lock makes reuse safe.
    def _init_scratch(self) -> None:
        self._to_local: Tensor | None = None
        self._scratch_lock = threading.Lock()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_to_local"], state["_scratch_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_scratch()

    def set_epoch(self, epoch: int) -> None:
        """Change the sample every epoch while keeping each epoch reproducible."""
        self.epoch = int(epoch)

    def configure(self, num_neighbors: Sequence[int], *, seed: int | None, epoch: int) -> None:
        """What the next loader samples: one sampler (one CSC, one node map) serves every epoch and evaluation."""
        fanouts = [int(fanout) for fanout in num_neighbors]
        if any(fanout < -1 for fanout in fanouts):
            raise ValueError(f"num_neighbors entries must be >= -1 (-1 = all), got {list(num_neighbors)}")
        self.num_neighbors = fanouts
        self.seed = None if seed is None else int(seed)
        self.set_epoch(epoch)

    @property
    def edge_permutation(self) -> Tensor | None:
        return self.perm

    def sample_from_nodes(self, inputs: NodeSamplerInput, **kwargs) -> SamplerOutput:
        if inputs.input_type is not None or inputs.time is not None:
            raise NotImplementedError("TorchNeighborSampler supports homogeneous, non-temporal graphs only")
        generator = None
        if self.seed is not None:
            generator = torch.Generator(device=self.device)
            generator.manual_seed(_batch_seed(self.seed, self.epoch, _first_node(inputs)))
        seeds = _on_device(inputs.node, self.device)
        with self._scratch_lock, torch.profiler.record_function(SAMPLE_SCOPE):
            node, row, col, edge, num_sampled_nodes, num_sampled_edges = self._sample(seeds, generator)
        return SamplerOutput(
            node=node,
            row=row,
            col=col,
            edge=edge,
            batch=None,
            num_sampled_nodes=num_sampled_nodes,
            num_sampled_edges=num_sampled_edges,
            metadata=(inputs.input_id, inputs.time),  # what NodeLoader reads back
        )

    def sample_from_edges(self, index: EdgeSamplerInput, neg_sampling=None) -> SamplerOutput:
        raise NotImplementedError("TorchNeighborSampler samples from nodes only")

    def _sample(self, seeds: Tensor, generator: torch.Generator | None):
        if self._to_local is None:
            self._to_local = torch.full((self.num_nodes,), _UNSEEN, dtype=torch.long, device=self.device)
        to_local = self._to_local
        num_seeds = seeds.numel()
        # A repeated seed keeps its own slot (batch_size == len(seeds)) but
        # neighbours that are that node link to its first slot.
        to_local.scatter_reduce_(0, seeds, torch.arange(num_seeds, device=self.device), "amin")
        nodes: list[Tensor] = [seeds]
        rows: list[Tensor] = []
        cols: list[Tensor] = []
        edges: list[Tensor] = []
        num_sampled_nodes = [num_seeds]
        num_sampled_edges: list[int] = []
        frontier, frontier_start, num_local = seeds, 0, num_seeds
        try:
            for fanout in self.num_neighbors:
                edge, target_local = self._sample_hop(frontier, frontier_start, fanout, generator)
                source = self.row.index_select(0, edge).long()
                new_nodes = self._assign_new_ids(source, num_local)
                rows.append(to_local.index_select(0, source))
                cols.append(target_local)
                edges.append(edge)
                nodes.append(new_nodes)
                num_sampled_nodes.append(new_nodes.numel())
                num_sampled_edges.append(edge.numel())
                frontier, frontier_start = new_nodes, num_local
                num_local += new_nodes.numel()
        except BaseException:
            self._to_local = None  # may hold partial writes; rebuild it next call
            raise
        node = torch.cat(nodes)
        if node.numel() > self.num_nodes // 8:  # a full memset beats scattered writes
            to_local.fill_(_UNSEEN)
        else:
            to_local.index_fill_(0, node, _UNSEEN)
        if not self.num_neighbors:  # zero hops: no edges at all
            rows = cols = edges = [seeds.new_empty(0)]
        return node, torch.cat(rows), torch.cat(cols), torch.cat(edges), num_sampled_nodes, num_sampled_edges

    def _sample_hop(
        self, frontier: Tensor, frontier_start: int, fanout: int, generator: torch.Generator | None
    ) -> tuple[Tensor, Tensor]:
        """CSC positions of the sampled in-edges of ``frontier`` and their local targets,
        grouped by target in frontier order. A typed graph (``segments``) draws ``fanout`` per target and
        edge type: each (target, edge type) segment of the typed CSC is sampled as a node is."""
        if self.segments is None:
            edge, target = self._positions(self.colptr, frontier, fanout, generator)
            return edge, target + frontier_start
        segments, owner = self.segments.of(frontier)
        edge, segment = self._positions(self.segments.ptr, segments, fanout, generator)
        return edge, owner.index_select(0, segment) + frontier_start

    def _positions(self, colptr: Tensor, frontier: Tensor, fanout: int,
                   generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
        """CSC positions of at most ``fanout`` in-edges of each of ``frontier`` (ids into ``colptr``) and the
        index in ``frontier`` of each one's target, grouped by target in frontier order."""
        device = self.device
        # int64 from here on: the node-shared CSC may hold int32 ids (shared_graph.csc_index_dtype)
        start = colptr.index_select(0, frontier).long()
        degree = colptr.index_select(0, frontier + 1).long() - start
        take = degree if fanout < 0 else degree.clamp(max=fanout)
        num_edges = int(take.sum())
        first_slot = torch.cumsum(take, 0) - take
        target = torch.repeat_interleave(
            torch.arange(frontier.numel(), device=device), take, output_size=num_edges
        )
        # Slot i of target t holds edge start[t] + (i - first_slot[t]): the whole neighbourhood.
        edge = torch.arange(num_edges, device=device) + (start - first_slot).index_select(0, target)
        if fanout >= 0:
            subsampled = torch.nonzero(degree > fanout).view(-1)
            if subsampled.numel():
                pick = _floyd_positions if fanout <= _FLOYD_MAX_FANOUT else _random_key_positions
                picks = pick(degree.index_select(0, subsampled), fanout, generator)
                # Subsampled targets own exactly `fanout` consecutive slots: overwrite them.
                slot_offset = torch.arange(fanout, device=device)
                slots = first_slot.index_select(0, subsampled).unsqueeze(1) + slot_offset
                chosen = start.index_select(0, subsampled).unsqueeze(1) + picks
                edge.scatter_(0, slots.reshape(-1), chosen.reshape(-1))
        return edge, target

    def _assign_new_ids(self, source: Tensor, num_local: int) -> Tensor:
        """Give unseen nodes in ``source`` the next local ids in order of first
        appearance; return them (global ids) in that order. O(len(source)), one wait for the device."""
        device = self.device
        to_local = self._to_local
        # Each source offers _FIRST_SEEN + its index: between any local id and _UNSEEN, so amin leaves a seen
        # node's local id and gives an unseen one its first occurrence's mark, which only that occurrence matches.
        mark = torch.arange(_FIRST_SEEN, _FIRST_SEEN + source.numel(), device=device)
        to_local.scatter_reduce_(0, source, mark, "amin")
        new_nodes = source.masked_select(to_local.index_select(0, source) == mark)
        to_local.scatter_(0, new_nodes, torch.arange(num_local, num_local + new_nodes.numel(), device=device))
        return new_nodes


class FusedNeighborSampler(TorchNeighborSampler):
    """`TorchNeighborSampler` with each hop in a few whole-frontier ops (train/graph/sampling/gpu_hop.py): one random
    key per candidate edge and one sort, in place of Floyd's k rounds of small kernels. For sampler.device=cuda."""

    def _positions(self, colptr: Tensor, frontier: Tensor, fanout: int,
                   generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
        return key_positions(colptr, frontier, fanout, generator)


@contextlib.contextmanager
def _seeded_cpu_rng(seed: int) -> Iterator[None]:
    """Seed torch's default CPU generator for one native sampling call and restore it.

    pyg-lib and torch-sparse draw from that generator, so this gives the native
    route the same per-batch determinism as :class:`TorchNeighborSampler`.
    """
    saved = torch.default_generator.get_state()
    torch.default_generator.manual_seed(seed)
    try:
        yield
    finally:
        torch.default_generator.set_state(saved)


class _SeededNeighborSampler(NeighborSampler):
    """PyG's native sampler, with each batch seeded like TorchNeighborSampler."""

    def __init__(self, data: Data, num_neighbors: list[int], *, seed: int | None, epoch: int,
                 share_memory: bool, csc: tuple[Tensor, Tensor, None] | None = None):
        if csc is None:  # PyG builds its CSC from data.edge_index
            super().__init__(data, num_neighbors, share_memory=share_memory)
        else:
            # A CSC sorted by target (the node-shared graph, which has no edge_index): PyG's sampler takes
            # no CSC of its own making, so it starts from an empty graph of as many nodes and samples from
            # this one: `colptr`, `row` and `perm` are what its `_sample` reads. The mapped files are shared
            # between processes already, so share_memory (a copy into shared memory) is not asked for.
            super().__init__(Data(num_nodes=data.num_nodes), num_neighbors)
            self.colptr, self.row, self.perm = csc
        self.seed, self.epoch = seed, int(epoch)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def configure(self, num_neighbors: Sequence[int], *, seed: int | None, epoch: int) -> None:
        """As `TorchNeighborSampler.configure`: PyG's sampler keeps its CSC, only the fanouts and seeds change."""
        self.num_neighbors = list(num_neighbors)
        self.seed, self.epoch = seed, int(epoch)

    def sample_from_nodes(self, inputs: NodeSamplerInput):
        if self.seed is None:  # the global RNG, as PyG's own loader
            return _int64_ids(super().sample_from_nodes(inputs))
        with _seeded_cpu_rng(_batch_seed(self.seed, self.epoch, _first_node(inputs))):
            return _int64_ids(super().sample_from_nodes(inputs))


def _int64_ids(out: SamplerOutput) -> SamplerOutput:
    """pyg-lib answers in the CSC's dtype (int32 for the node-shared graph, shared_graph.csc_index_dtype);
    the batch's n_id and edge_index are int64, as PyG's layers index with them."""
    out.node, out.row, out.col = out.node.long(), out.row.long(), out.col.long()
    if out.edge is not None:
        out.edge = out.edge.long()
    return out


def _is_cpu(device: torch.device | str | None) -> bool:
    return device is None or torch.device(device).type == "cpu"


def prefetch_safe(sampler: BaseSampler, num_workers: int) -> bool:
    """Whether this sampler's batches may be prepared on another thread while the training step runs: the
    torch samplers draw each batch from a generator of their own (training seeds them), and loader workers
    draw in their own processes; PyG's native sampler in this process draws from the global generator, which
    the step's dropout draws from too (train/loop/prefetch.py)."""
    return num_workers > 0 or isinstance(sampler, TorchNeighborSampler)


def make_node_sampler(
    data: Data,
    num_neighbors: Sequence[int] = (),
    *,
    csc: tuple[Tensor, Tensor, Tensor] | None = None,
    device: torch.device | str | None = None,
    num_workers: int = 0,
    force_torch_sampler: bool = False,
    segments: TypedSegments | None = None,
) -> BaseSampler:
    """One sampler to reuse across loaders (`make_node_loader(..., sampler=)` configures it for each): its CSC and its
    node map (N x 8 bytes, on `device`) are built once, not once per epoch or evaluation.

    PyG's native sampler (seeded per batch) when one exists, no ``csc`` is passed (or it needs no
    permutation: sorted by target), and sampling runs on the CPU; otherwise :class:`TorchNeighborSampler` on
    the CPU and :class:`FusedNeighborSampler` on a GPU. A typed graph's `segments` (train/graph/typed_csc.py)
    always take the torch samplers: they draw k per (target, edge type), which PyG's homogeneous sampler cannot.
    """
    # A CSC without a permutation is sorted by target (the node-shared graph): pyg-lib samples from it
    # in place. One with a permutation would need PyG's own copy of it (to_csc): the torch sampler uses it.
    edges_sorted = csc is not None and csc[2] is None
    native = have_native_sampler() and not force_torch_sampler and segments is None
    if native and (csc is None or edges_sorted) and _is_cpu(device):
        return _SeededNeighborSampler(data, list(num_neighbors), seed=None, epoch=0,
                                      share_memory=num_workers > 0, csc=csc)
    torch_sampler = TorchNeighborSampler if _is_cpu(device) else FusedNeighborSampler
    return torch_sampler(data, list(num_neighbors), csc=csc, device=device, segments=segments)


class SampledNodeLoader(NodeLoader):
    """PyG's `NodeLoader` (as `NeighborLoader` builds it around a sampler), whose batches carry their edges' ids and
    values from `edges`, read by the sampler's CSC positions (train/graph/edge_rows.py). Where the graph keeps
    no edge ids (the node-shared graph of a graph without edge values, whose CSC has no perm), a batch has no
    `e_id`: the positions are not the user's edge ids."""

    def __init__(self, data: Data, *, edges: EdgeRows | None = None, **kwargs):
        super().__init__(data, **kwargs)
        self.edges = edges

    def filter_fn(self, out: SamplerOutput) -> Data:
        batch = super().filter_fn(out)
        if self.edges is not None:
            for name, rows in self.edges.at(out.edge).items():
                batch[name] = rows
        elif self.node_sampler.edge_permutation is None:
            del batch.e_id
        return batch


def make_node_loader(
    data: Data,
    input_nodes: Tensor,
    num_neighbors: Sequence[int],
    batch_size: int,
    *,
    sampler: BaseSampler | None = None,
    seed: int | None = None,
    epoch: int = 0,
    csc: tuple[Tensor, Tensor, Tensor] | None = None,
    device: torch.device | str | None = None,
    num_workers: int = 0,
    pin_memory: bool = False,
    force_torch_sampler: bool = False,
    edges: EdgeRows | None = None,
    segments: TypedSegments | None = None,
) -> NodeLoader:
    """Mini-batches over input_nodes IN THE GIVEN ORDER (no shuffling, drop_last=False) with these fanouts
    and seeds. `sampler`: one from `make_node_sampler` to reuse, as a run does (train/graph/sampling/device_plan.py;
    one loader at a time per sampler: the next call reconfigures it, a loader's worker processes keep their
    own copy); else a sampler of its own is made from `csc`, `device` and `force_torch_sampler`. `edges`: the
    graph's edge values and ids by CSC position, which each batch then carries."""
    if sampler is None:
        sampler = make_node_sampler(data, num_neighbors, csc=csc, device=device, num_workers=num_workers,
                                    force_torch_sampler=force_torch_sampler, segments=segments)
    sampler.configure(list(num_neighbors), seed=seed, epoch=epoch)
    kwargs = dict(input_nodes=input_nodes, batch_size=batch_size, shuffle=False, drop_last=False,
                  num_workers=num_workers, pin_memory=pin_memory)
    return SampledNodeLoader(data, node_sampler=sampler, edges=edges, **kwargs)


__doc__ += """
Complexity, per batch of B seeds with fanouts k_1..k_L (E_h edges sampled at hop h):
  * degrees and slot layout: O(frontier + E_h) per hop (gathers, cumsum, repeat_interleave);
  * choosing neighbours of nodes with degree > k: Floyd's method, O(k^2) per node and
    independent of degree, for k <= 64; above that, random keys plus two sorts over
    the node's edges, O(d log d);
  * relabelling: O(E_h) with scatter_reduce into a persistent num_nodes-sized map
    (8 bytes per graph node, per sampler copy), reset where it was written (or by one
    memset once a batch touched over 1/8 of the graph); the CSC is built once, O(E log E).
No Python work per node: the only Python loops run over hops and over Floyd's k steps.
"""
