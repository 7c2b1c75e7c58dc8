"""One copy of the graph per node, mapped by every rank of that node (where batches are sampled: sampling.device_plan).

Under SLURM every task is its own process, so loading the graph in each (the seed's way,
`data.share=process`) holds one copy per GPU: 4-8 copies of ~57 GB of features for
ogbn-papers100M. With `data.share=node` (the default) only the node's local rank 0 loads
the graph and builds the sampler's CSC; it writes each tensor as a raw file into a
per-job directory (``/dev/shm/pyg-train-u<uid>/pyg-train-j<job>-p<port>-n<node>-u<uid>/``, in the
user's private directory (train/graph/sharing/segments.py), or on node-local disk when /dev/shm is too
small) and every rank of the node maps the files with ``torch.from_file``: the page cache holds
the one copy, each rank only page tables.

Read-only: the files are mapped private (copy-on-write) as inference tensors, so an
in-place write raises ``RuntimeError`` and can never reach the pages other ranks see.

No leaks, also after ``kill -9``: once every local rank has mapped the files, local rank
0 unlinks them (a mapping outlives its file; the memory is freed when the last rank
exits). Until then the writer holds an ``flock`` on ``<segment>.lock``; the kernel drops
it when the writer dies, and every start removes the segments nobody holds. atexit and
`shared_graphs()` (run_fit's ``with``) cover a normal or failing exit in between.
`data.share_keep=true` keeps the files until exit, e.g. to look at them.

The structure is stored once, as the sampler's CSC and nothing else: ``colptr`` and ``row``
(each edge's source, sorted by target), no permutation (``perm`` is None) and no ``edge_index``,
whose second row the CSC's ``colptr`` already holds, and its ids are int32 where the graph allows it
(`csc_index_dtype`): 4 bytes per edge instead of 16 (1.6 billion edges, ogbn-papers100M: 19 GB less
per node). The Data has no ``edge_index`` then; each batch still gets its own (the loader builds it
from the sample, in int64), and `csc_targets` gives the targets of any range of edges where a
whole-graph pass needs them. A graph with edge values (``edge_attr``, ``edge_weight``) stores them
once too, in CSC order beside ``row``, with the CSC's ``perm`` (the batches' ``e_id``): the form's
`edge_rows` (train/graph/edge_rows.py).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import stat
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import timedelta
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data

from train.cluster.distenv import DistEnv
from train.config import DataConfig
from train.errors import AnotherRanksError, UserError
from train.graph.datasets.loading import load_graph
from train.graph.form import (  # noqa: F401 (the CSC's helpers: re-exported where they were before)
    CSC,
    HOMOGENEOUS,
    SPLITS,
    GraphForm,
    Shared,
    attach_csc,
    csc_index_dtype,
    form_of,
    form_of_tensors,
    graph_csc,
)
from train.graph.sharing.segments import (  # noqa: F401 (the place of the files: re-exported where they were before)
    HEADROOM_BYTES,
    PREFIX,
    SHM,
    Segment,
    candidate_dirs,
    choose_dir,
    gib,
    release_all,
    remove_stale,
    segment_name,
    shared_graphs,
    shares_graph,
    user_dir,
)
from train.storage.faults import StorageError, shared_graph_advice
from train.storage.writes import guarded

MANIFEST = "manifest.json"
FORMAT = 3  # 3: colptr and row, no edge_index, in int32 where the graph allows it


def num_edges(data: Data) -> int:
    """The graph's edges, from its CSC where it has one (the node-shared graph has no edge_index)."""
    csc = graph_csc(data)
    return int(csc[1].numel()) if csc is not None else int(data.edge_index.size(1))


def csc_targets(colptr: Tensor, start: int = 0, stop: int | None = None) -> Tensor:
    """The target node of CSC positions start..stop-1: the part of edge_index a CSC keeps only as colptr.
    Linear in the positions and the nodes they span: two lookups find the first and last node, each node
    between them repeated for its edges in the range."""
    stop = int(colptr[-1]) if stop is None else stop
    if stop <= start:
        return torch.empty(0, dtype=torch.long, device=colptr.device)
    ends = torch.tensor([start, stop - 1], dtype=colptr.dtype, device=colptr.device)
    first, last = (torch.searchsorted(colptr, ends, right=True) - 1).tolist()
    counts = colptr[first + 1 : last + 2].clamp(max=stop) - colptr[first : last + 1].clamp(min=start)
    nodes = torch.arange(first, last + 1, dtype=torch.long, device=colptr.device)  # int64 ids, as edge_index
    return torch.repeat_interleave(nodes, counts, output_size=stop - start)


def private_graph(config: DataConfig, load: Callable[[DataConfig], Data] = load_graph) -> Data:
    """`data.share=process`: this process loads its own graph and builds its own CSC (the seed's way)."""
    data = load(config)
    form_of(data).structure(data)
    return data


# ---- tensors <-> files ---------------------------------------------------------------------------

def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _write_raw(fh, tensor: Tensor) -> None:
    """Raw bytes, row-major: what ``torch.from_file`` maps back."""
    flat = tensor.detach().contiguous().reshape(-1)
    if flat.numel():
        fh.write(memoryview(flat.view(torch.uint8).numpy()))


_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC  # never an existing file or a link


def write_tensors(directory: Path, tensors: Mapping[str, "Tensor | Callable[[], Tensor]"], info: dict) -> dict:
    """Write each tensor (a callable is called only when its turn comes) and, last, the manifest, as new files of
    the fresh `directory` (opened once, without following a link; every file relative to it)."""
    entries = {}
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for name, value in tensors.items():
            value = value() if callable(value) else value
            with guarded(directory / f"{name}.bin"), \
                    os.fdopen(os.open(f"{name}.bin", _NEW_FILE, 0o600, dir_fd=dir_fd), "wb") as fh:
                _write_raw(fh, value)
            entries[name] = {"file": f"{name}.bin", "dtype": _dtype_name(value.dtype), "shape": list(value.shape)}
            del value
        manifest = {"format": FORMAT, "tensors": entries, **info}
        with guarded(directory / MANIFEST):
            with os.fdopen(os.open(f"{MANIFEST}.tmp", _NEW_FILE, 0o600, dir_fd=dir_fd), "w") as fh:
                fh.write(json.dumps(manifest, indent=1))
            # present only once every file is complete
            os.replace(f"{MANIFEST}.tmp", MANIFEST, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    return manifest


def _regular_file(directory: Path, name: str, node: int | None = None) -> Path:
    """directory/name, when it is a regular file of this user (not a link): what map_tensors may open."""
    path = directory / name
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        raise UserError(f"{_on_node(node)}{path} is missing from the node's shared graph; it was removed while the "
                        "job ran (something cleaning /dev/shm?): start the job again.") from None
    if not stat.S_ISREG(found.st_mode) or found.st_uid != os.getuid():
        raise UserError(f"{path} is not a regular file of this user; the node's shared graph was tampered with.")
    return path


def _on_node(node: int | None) -> str:
    return "" if node is None else f"node {node}: "


def _check_size(path: Path, entry: dict, nbytes: int, node: int | None) -> None:
    """A file of the segment holds the bytes its manifest says: a truncated or replaced file is refused, named."""
    found = path.stat().st_size
    if found != nbytes:
        raise UserError(f"{_on_node(node)}{path} holds {found} bytes, but the manifest says {entry['dtype']} of shape "
                        f"{entry['shape']}: {nbytes} bytes; the node's shared graph was truncated or changed: start "
                        "the job again.")


def map_tensors(directory: Path, node: int | None = None) -> dict[str, Tensor]:
    """Map every tensor of a segment private and read-only in effect: an in-place write raises. A file missing or
    of another size than its manifest says is refused, naming `node` and the file."""
    manifest = json.loads(_regular_file(directory, MANIFEST, node).read_text())
    if manifest.get("format") != FORMAT:
        raise UserError(f"{directory / MANIFEST} has format {manifest.get('format')!r}, expected {FORMAT}.")
    out = {}
    # Tensors made in inference mode refuse in-place updates outside it; the private (copy-on-write)
    # mapping keeps even a write that slips through (inference mode, .numpy()) away from the other ranks.
    with torch.inference_mode():
        for name, entry in manifest["tensors"].items():
            dtype = getattr(torch, entry["dtype"])
            shape = entry["shape"]
            numel = math.prod(shape)
            if numel == 0:
                out[name] = torch.empty(shape, dtype=dtype)
            else:
                path = _regular_file(directory, entry["file"], node)
                _check_size(path, entry, numel * dtype.itemsize, node)
                flat = torch.from_file(str(path), shared=False, size=numel, dtype=dtype)
                out[name] = flat.view(shape)
    return out


def graph_tensors(data) -> tuple[Shared, int]:
    """What a node shares, in write order, and its size in bytes: the graph's form says (train/graph/form.py)."""
    return form_of(data).shared_tensors(data)


def graph_from_tensors(tensors: Mapping[str, Tensor], form: GraphForm | None = None):
    """The node-shared graph, rebuilt from the tensors its form shared (the form they name, unless given)."""
    return (form or form_of_tensors(tensors)).from_tensors(tensors)


# ---- the node-local protocol ---------------------------------------------------------------------

def node_group(env: DistEnv, timeout: timedelta):
    """A gloo group of this node's ranks, its local rank 0 (a global rank) and its size. Collective over ALL ranks."""
    info: list = [None] * env.world_size
    dist.all_gather_object(info, (env.node_rank, env.local_rank, socket.gethostname()))
    nodes = sorted({node for node, _, _ in info})
    members = {node: [r for r, (n, _, _) in enumerate(info) if n == node] for node in nodes}
    for node, ranks in members.items():
        leaders = [r for r in ranks if info[r][1] == 0]
        hosts = sorted({info[r][2] for r in ranks})
        if len(leaders) != 1 or len(hosts) != 1:
            raise UserError(
                f"node rank {node} has ranks {ranks} with local ranks {[info[r][1] for r in ranks]} on hosts "
                f"{hosts}: data.share=node needs exactly one local rank 0 per node and one host per node rank. "
                "Check SLURM_NODEID/SLURM_LOCALID (or GROUP_RANK/LOCAL_RANK), or use data.share=process."
            )
    group, _ = dist.new_subgroups_by_enumeration([members[n] for n in nodes], timeout=timeout, backend="gloo")
    leader = next(r for r in members[env.node_rank] if info[r][1] == 0)
    return group, leader, len(members[env.node_rank])


def _write_segment(config: DataConfig, env: DistEnv, load: Callable[[DataConfig], Data]) -> tuple[Segment, str]:
    """Local rank 0: load, pick a place with room, write. Returns the segment and a note for the log."""
    bases = candidate_dirs(config.share_dir, env.node_tmpdirs)
    remove_stale(bases)
    data = load(config)
    tensors, size = graph_tensors(data)
    base, note = choose_dir(size, bases)
    private, squatted = user_dir(base)  # this user's own directory in base: another user's entries are theirs
    note = "\n".join(n for n in (note, squatted) if n)
    name = segment_name(env.job_id, env.master_port, env.node_rank, os.getuid())
    owner = {"pid": os.getpid(), "host": socket.gethostname(), "job": env.job_id, "node_rank": env.node_rank,
             "bytes": size, "created": time.time()}
    try:
        with guarded(private / name):
            segment = Segment.create(private, name, owner, remove_base=bool(squatted))
        try:
            write_tensors(segment.path, tensors, owner)
        except BaseException:
            segment.remove()
            raise
    except StorageError as exc:  # the room was there at the check: something else took it, or the file system failed
        raise StorageError(replace(exc.fault, advice=shared_graph_advice(exc.fault.total_bytes, size))) from None
    return segment, note


def _loader(env: DistEnv) -> Callable[[DataConfig], Data]:
    """`load_graph` under this job's data root ($DATA_DIR, resolved at the entry)."""
    return partial(load_graph, data_dir=env.data_dir)


def share_graph(config: DataConfig, env: DistEnv, load: Callable[[DataConfig], Data] | None = None) -> Data:
    """`data.share=node`: one copy per node, mapped by all its ranks. Collective over ALL ranks."""
    load = load or _loader(env)
    if env.world_size == 1:
        remove_stale(candidate_dirs(config.share_dir, env.node_tmpdirs))
        return private_graph(config, load)
    timeout = timedelta(seconds=config.load_timeout_seconds)
    group, leader, size = node_group(env, timeout)  # every rank takes part, whatever its node's size
    segment = None
    try:
        if not shares_graph(config.share, size):  # alone on its node: nothing to share
            remove_stale(candidate_dirs(config.share_dir, env.node_tmpdirs))
            return private_graph(config, load)
        status: list = [None]
        if env.local_rank == 0:
            try:
                segment, note = _write_segment(config, env, load)
                if note:
                    print(note, file=sys.stderr, flush=True)
                status[0] = ("ok", str(segment.path))
            except BaseException as exc:  # tell the node's other ranks before failing
                message = str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
                status[0] = ("storage", exc.fault) if isinstance(exc, StorageError) else ("error", message)
                with contextlib.suppress(Exception):
                    dist.broadcast_object_list(status, src=leader, group=group)
                raise
        dist.broadcast_object_list(status, src=leader, group=group)
        kind, payload = status[0]
        if kind == "storage":  # the same fault on each rank of the node; run.obtain_graph tells all nodes
            raise StorageError(payload)
        if kind != "ok":  # its error, which it prints: this rank points to it
            raise AnotherRanksError(payload, leader)
        tensors = map_tensors(Path(payload), env.node_rank)
        dist.barrier(group=group)  # every rank of the node has mapped the files
        if segment is not None and not config.share_keep:
            segment.remove()  # the mappings stay valid; the memory goes with the last of them
        return graph_from_tensors(tensors)
    except BaseException:
        if segment is not None:
            segment.remove()
        raise
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group(group)


def obtain_shared_or_private(config: DataConfig, env: DistEnv,
                             load: Callable[[DataConfig], Data] | None = None) -> Data:
    """The graph as `data.share` says; `graph_csc(data)` is the sampler's CSC either way."""
    load = load or _loader(env)
    if config.share == "node":
        return share_graph(config, env, load)
    if env.local_rank == 0:
        remove_stale(candidate_dirs("", env.node_tmpdirs))  # what earlier node-shared runs may have left
    return private_graph(config, load)


__all__ = [
    "Segment", "attach_csc", "candidate_dirs", "choose_dir", "csc_targets", "graph_csc", "graph_from_tensors",
    "graph_tensors", "map_tensors", "num_edges", "obtain_shared_or_private", "private_graph", "release_all",
    "remove_stale", "segment_name", "share_graph", "shared_graphs", "write_tensors",
]
