"""The graph a run holds and the process that loads it: the memory plan's terms for the graph itself (the bytes a node
shares, a rank's own copy, the loading peak), and the graph a task holds where it differs from the one loaded
(a link task's split). The rest of the plan: train/plan/terms.py.
"""

from __future__ import annotations

from dataclasses import replace

from train.builtin_tasks import task_row
from train.config import Config
from train.graph.datasets.kinds import dataset_kind
from train.graph.form import form_named
from train.graph.link_fields import HELD_OUT_SPLITS
from train.graph.sharing.shared_graph import csc_index_dtype
from train.graph.sizes import FLOAT, INDEX, GraphSize

# Loading, in int64 arrays of E entries (E x 8 bytes) and copies of x alive at the peak of the process that
# loads. The CSC build (build_csc: PyG's sort of the targets, its permutation, the sources permuted) holds
# the loaded graph and CSC_BUILD_ARRAYS more. Before it, the loader's own peak: the synthetic generator's
# edge pairs, to_undirected and coalesce (measured: 14.0-15.9 arrays at 300k nodes, 13.7 at 1M), then its
# features (x, its noise and their sum); an OGB dataset's processed file in memory, its labels turned to
# int64; a PyG dataset's processed file while from_pyg_masks coalesces its edges (sort keys, their sort and
# permutation, the permuted copy); own files read (memory-mapped) with the finiteness check's mask (a byte
# per feature). Measured: synthetic and own files (bench/plan.py); OGB and PyG from the code.
CSC_BUILD_ARRAYS = 5
# A link task's RandomLinkSplit where the graph is loaded (train/graph/link_split.py) holds the loaded graph and
# LINK_SPLIT_ARRAYS more of its E: the undirected half and its permutation, each of the three splits' message-passing
# edges and pairs (measured: 12.8 at 200k nodes, 8M edges).
LINK_SPLIT_ARRAYS = 13
# Where the graph has edge values, the split also holds them as loaded and looks up the training edges' own
# (link_split.values_of_edges): the loaded edges' keys, their order and the keys sorted, then each training edge's
# key, position and row (counted from the code, not measured), and the values those rows take.
LINK_VALUE_ARRAYS = 6
# A dataset's own link split (ogbl-citation2: train/graph/datasets/ogb_links.py) is held beside the graph as its ids
# (GraphSize.link_ids: its training pairs, its held-out pairs and their ranked negatives), read from OGB's pickled
# split files before the graph is made undirected: while a file is read its arrays are held OWN_SPLIT_READ_COPIES
# times (the zip's record, the unpickler's bytes, the arrays rebuilt from them: measured 3.1 x the 15 MiB of a
# held-out file's), so the last held-out file adds that many less one copies of its split to the split's ids held.
OWN_SPLIT_READ_COPIES = 3
LOADING_FIXED_BYTES = 8 * 2**20  # what a small graph's loading holds beyond its arrays (measured: 20k nodes)
# The synthetic generator's edge values (train/graph/datasets/synthetic.py, data.edge_features) are drawn last,
# while it still
# holds edge_index (2 arrays of E) and the arrays it drew the edge pairs from (src, dst_class, offset, dst: E / 2
# each, 2 arrays of E; same_class, a byte each), with x: the noise, the centroids gathered by each edge's target
# class and their product with edge_signal are 3 [E, F] float arrays at once (the sum then replaces the last two).
# Beside them the loading step holds SYNTHETIC_VALUES_KEPT more than LOADING_FIXED_BYTES of what is no array of the
# graph: its imports, the heap's freed temporaries (measured: 33-41 MiB in all at 20k, 100k and 200k nodes).
SYNTHETIC_VALUES_ARRAYS = 4  # int64 arrays of E held while the values are drawn
SYNTHETIC_VALUES_COPIES = 3  # [E, F] float arrays at once
SYNTHETIC_VALUES_KEPT = 32 * 2**20


def _synthetic_peak(x: float, e: float, n: int, v: float) -> float:
    """The generator's peak: its edges' (to_undirected and coalesce, 17 arrays of E), its features', or its edge
    values' (`v`: the bytes of one [E, F] float array; 0 without)."""
    values = SYNTHETIC_VALUES_ARRAYS * e + x + SYNTHETIC_VALUES_COPIES * v + SYNTHETIC_VALUES_KEPT if v else 0
    return max(17 * e, 2 * e + 3 * x, values)


# Each loader's peak from x's bytes, one int64 array of E (the graph as loaded), N and one [E, F] float array of its
# edge values (0: none; counted where the loader's own peak is measured with them: the synthetic generator's)
LOADER_PEAK = {"synthetic": _synthetic_peak,
               "ogb": lambda x, e, n, v: x + 2 * e + 3 * n * INDEX,
               "pyg": lambda x, e, n, v: x + 8 * e + n * INDEX,
               "files": lambda x, e, n, v: 1.25 * x + 2 * e + n * INDEX,
               # a heterogeneous graph turned typed (train/graph/typed_graph.py): its types' arrays (x, each
               # relation and its reverse), the padded x, the relations offset and concatenated, edge_type, then the
               # typed CSC's sort and segments, with what the heap keeps of them (measured: 267 MiB for
               # hetero-synthetic of 100k papers, tests/test_plan_measured.py)
               "hetero": lambda x, e, n, v: 3 * x + 13 * e + 2 * n * INDEX}


def shared_graph_bytes(size: GraphSize) -> int:
    """What data.share=node writes once per node (train/graph/sharing/shared_graph.py's graph_tensors), from meta
    tensors."""
    form = form_named(size.form)
    return form.shared_tensors(form.planned(size))[1]


def csc_index_bytes(size: GraphSize, sharing: bool) -> int:
    """Bytes of one id of the CSC: the node-shared one's dtype (int32 where the graph allows it), else PyG's int64."""
    return csc_index_dtype(size.nodes, size.edges).itemsize if sharing else INDEX


def private_graph_bytes(size: GraphSize) -> int:
    """One rank's own graph (data.share=process, or alone on its node): the loaded tensors and a CSC with its own
    row and perm (train/graph/sharing/shared_graph.py private_graph), in int64. Beyond what a node shares (its CSC's
    colptr and row, in its own dtype), that is those two in int64, the loaded edge_index (two ids per edge) and
    the CSC's perm (one). Its edge values, in the user's order, take what the node's in CSC order do."""
    # the node-shared graph keeps perm where the graph has edge values or edge types; a typed graph's segment
    # pointer (train/graph/typed_csc.py) is kept beside its CSC, in the CSC's dtype there and int64 here
    perm_kept = 1 if size.edge_floats or size.type_bytes else 0
    shared_ids = (size.nodes + 1 + size.segment_ids + size.edges * (1 + perm_kept)) * csc_index_bytes(size, True)
    return (shared_graph_bytes(size) - shared_ids + (size.nodes + 1 + size.segment_ids) * INDEX
            + 4 * size.edges * INDEX)


def loading_bytes(size: GraphSize, source: str, loaded: GraphSize | None = None) -> int:
    """The peak of the process that loads the graph, beyond its runtime: the loader's own peak, a link task's split
    of the graph as loaded (`loaded`, where the task holds another graph: held_size), or the CSC build on the graph
    held (`size`, see CSC_BUILD_ARRAYS), whichever is larger."""
    x_bytes, edge_array = size.nodes * size.features * FLOAT, size.edges * INDEX
    loaded_edges = (loaded or size).edges * INDEX
    split, own_split = 0, own_split_bytes(size) if loaded is None else 0
    if loaded is not None:
        values = (loaded.edges + size.edges) * size.edge_floats * FLOAT  # as loaded, and the training edges'
        lookup = LINK_VALUE_ARRAYS * loaded_edges if size.edge_floats else 0
        split = x_bytes + (2 + LINK_SPLIT_ARRAYS) * loaded_edges + lookup + values
    held = shared_graph_bytes(size) + edge_array  # the shared CSC keeps one id per edge, edge_index two
    # edge values: the node-shared graph's writer keeps the int64 perm and one value permuted at a time
    widest = max(size.edge_features * FLOAT, int(size.edge_weight) * FLOAT, size.type_bytes)  # edge_type: typed
    values = (edge_array + size.edges * widest) if widest else 0
    csc_build = held + CSC_BUILD_ARRAYS * edge_array + values
    value_array = (loaded or size).edges * size.edge_floats * FLOAT  # one [E, F] array of the values as loaded
    loader = LOADER_PEAK[source](x_bytes, loaded_edges, size.nodes, value_array) + own_split
    return int(max(loader, csc_build, split)) + LOADING_FIXED_BYTES


def own_split_bytes(size: GraphSize) -> int:
    """What a graph's own link split adds to its loader's peak (OWN_SPLIT_READ_COPIES): its ids, and a held-out
    file's arrays twice more while the last is read. The held-out splits are taken as of one size (OGB's: 86,596 each):
    their ids are what the training pairs (as many ids as the graph has edges) leave of the split's."""
    held_out = max(size.link_ids - size.edges, 0) / len(HELD_OUT_SPLITS)  # ids of one held-out split
    return int((size.link_ids + (OWN_SPLIT_READ_COPIES - 1) * held_out) * INDEX) if size.link_ids else 0


def loader_kind(name: str) -> str:
    """Whose loading peak data.name has (its kind's, train/graph/datasets/kinds.py): the generator, own files, OGB
    or PyG."""
    return dataset_kind(name).loader


def held_size(config: Config, size: GraphSize) -> GraphSize:
    """The graph a run holds (and a node shares), where `size` is the graph loaded: a link task splits a graph
    without its own split where it is loaded (train/graph/link_split.py: RandomLinkSplit), so its edges are the
    training edges, with their values, and the split's ids lie beside them: each training pair once, each
    held-out pair and its negative. Counted as undirected, as the sizes count edges (both directions of each). A
    graph with its own split holds it as loaded, its ids in its size (GraphSize.link_ids)."""
    if not task_row(config.task.name).edge_split or dataset_kind(config.data.name).own_link_split:
        return size
    pairs = size.edges // 2
    held_out = int(pairs * config.task.val_fraction) + int(pairs * config.task.test_fraction)
    train = pairs - held_out
    return replace(size, edges=2 * train, link_ids=2 * train + 4 * held_out)
