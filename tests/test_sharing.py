"""data.share=node: one read-only copy of the graph per node, identical training, nothing left in /dev/shm.

Real processes with srun's variables; the rank-side checks run in this very module
(`python -m tests.test_sharing worker ...`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bench.localranks import scrubbed_env
from tests.harness.localjob import ROOT, WORKERS, final_summary, free_port, run_local_job, srun_env
from train.config import DataConfig, SamplerConfig, load_config
from train.errors import UserError
from train.graph.sampling.device_plan import GPU_HEADROOM, gpu_placement, plan_sampling
from train.graph.sharing.segments import user_dir_name
from train.graph.sharing.shared_graph import (
    PREFIX,
    SHM,
    SPLITS,
    Segment,
    attach_csc,
    choose_dir,
    csc_index_dtype,
    csc_targets,
    graph_csc,
    graph_from_tensors,
    graph_tensors,
    map_tensors,
    num_edges,
    remove_stale,
    segment_name,
    user_dir,
    write_tensors,
)

TINY = ["fit", "--config", "tiny"]
# This session's job ids (unique per pytest process, so a concurrent session's jobs are not mistaken for ours).
JOB_IDS = tuple(f"7{os.getpid()}{i}" for i in range(1, 6))
RESULT = "SHARING_RESULT "


MINE = SHM / user_dir_name(os.getuid())  # this user's private directory in /dev/shm, where the segments live


def _entries() -> list[Path]:
    """The project's entries in /dev/shm: in this user's private directory, and any left beside it."""
    inside = sorted(MINE.glob(f"{PREFIX}*")) if MINE.is_dir() else []
    return inside + [p for p in SHM.glob(f"{PREFIX}*") if p != MINE]


def _ours() -> list[Path]:
    return sorted(p for p in _entries() if any(f"-j{job}-" in p.name for job in JOB_IDS))


def _stale() -> list[Path]:
    """Entries of the project that no live process holds (a leak), as opposed to a concurrent run's."""
    out = []
    for entry in _entries():
        if entry.is_dir() and entry.name.startswith(user_dir_name(os.getuid()) + "-"):
            continue  # a fallback private directory of a concurrent run (its creator removes it)
        lock = entry if entry.suffix == ".lock" else entry.with_name(entry.name + ".lock")
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            out.append(entry)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            out.append(entry)
        except BlockingIOError:
            pass
        finally:
            os.close(fd)
    return out


def _older_than(paths: list[Path], moment: float) -> list[Path]:
    out = []
    for path in paths:
        try:
            if path.stat().st_mtime < moment:
                out.append(path)
        except FileNotFoundError:
            pass
    return out


@pytest.fixture(scope="module", autouse=True)
def no_shm_leak():
    """After this module /dev/shm holds nothing of its jobs, nor any unowned entry of the project from before
    it started (its runs remove those). Entries a concurrent session makes meanwhile are its own business."""
    started = time.time()
    yield
    assert _ours() == [], _ours()
    assert _older_than(_stale(), started) == [], _stale()


def _digest(tensor: torch.Tensor) -> str:
    flat = tensor.detach().contiguous().reshape(-1)
    return hashlib.sha256(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"").hexdigest()


# ---- files, mapping, read-only ---------------------------------------------------------------------

def test_written_tensors_map_back_bit_identical_and_refuse_writes(tmp_path):
    tensors = {
        "f32": torch.randn(100, 7),
        "i64": torch.randint(-(2**40), 2**40, (333,)),
        "bf16": torch.randn(10, 3).to(torch.bfloat16),
        "flag": torch.rand(17) > 0.5,
        "empty": torch.empty(0, 5),
    }
    write_tensors(tmp_path, tensors, {"job": "test"})
    before = {p.name: p.read_bytes() for p in tmp_path.glob("*.bin")}
    mapped = map_tensors(tmp_path)
    assert set(mapped) == set(tensors)
    for name, tensor in tensors.items():
        assert mapped[name].dtype == tensor.dtype and mapped[name].shape == tensor.shape
        assert _digest(mapped[name]) == _digest(tensor), name
    with pytest.raises(RuntimeError, match="[Ii]nplace update to inference tensor"):
        mapped["f32"].add_(1.0)
    with pytest.raises(RuntimeError, match="[Ii]nplace update to inference tensor"):
        mapped["i64"][3] = 0
    with torch.inference_mode():  # the one place a write is not refused: it stays in this process
        mapped["f32"].zero_()
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.bin")} == before
    assert _digest(map_tensors(tmp_path)["f32"]) == _digest(tensors["f32"])


def test_node_layout_samples_like_the_per_process_csc(tmp_path):
    """colptr + row in int32, no perm and no edge_index: the same CSC and so the same samples as build_csc, the
    same edges, in a quarter of the bytes of the edge_index it replaces."""
    from torch_geometric.data import Data
    from torch_geometric.sampler import NodeSamplerInput

    from train.graph.datasets.loading import synthetic_graph
    from train.graph.sampling.samplers import TorchNeighborSampler
    from train.graph.typed_csc import build_csc

    config = DataConfig(num_nodes=500, avg_degree=9)
    original = synthetic_graph(config)
    colptr, row, _perm = build_csc(original.edge_index, original.num_nodes)
    tensors, size = graph_tensors(synthetic_graph(config))
    write_tensors(tmp_path, tensors, {})
    assert size == sum(p.stat().st_size for p in tmp_path.glob("*.bin"))
    edge_bytes = {p.stem: p.stat().st_size for p in tmp_path.glob("*.bin") if p.stem in ("colptr", "row")}
    assert edge_bytes == {"colptr": 4 * 501, "row": 4 * original.edge_index.size(1)}
    assert not (tmp_path / "edge_index.bin").exists()
    shared = graph_from_tensors(map_tensors(tmp_path))
    assert shared.edge_index is None and num_edges(shared) == original.edge_index.size(1)
    assert graph_csc(shared)[0].dtype == graph_csc(shared)[1].dtype == torch.int32
    assert torch.equal(graph_csc(shared)[0].long(), colptr) and torch.equal(graph_csc(shared)[1].long(), row)
    assert graph_csc(shared)[2] is None
    for key in ("x", "y", "train_idx", "val_idx", "test_idx"):
        assert torch.equal(shared[key], original[key]), key
    as_set = lambda ei: set(map(tuple, ei.t().tolist()))  # noqa: E731
    assert as_set(torch.stack([graph_csc(shared)[1], csc_targets(graph_csc(shared)[0])])) == as_set(original.edge_index)
    seeds = NodeSamplerInput(input_id=None, node=torch.arange(0, 500, 7))
    structure = Data(num_nodes=500)
    a = TorchNeighborSampler(structure, [4, 3], seed=5, csc=graph_csc(shared)).sample_from_nodes(seeds)
    b = TorchNeighborSampler(structure, [4, 3], seed=5, csc=(colptr, row, _perm)).sample_from_nodes(seeds)
    assert torch.equal(a.node, b.node) and torch.equal(a.row, b.row) and torch.equal(a.col, b.col)
    assert a.node.dtype == a.row.dtype == a.col.dtype == a.edge.dtype == torch.long  # what PyG's layers index with


@pytest.mark.parametrize("nodes,edges,dtype", [(2**31 - 1, 2**31 - 1, torch.int32), (2**31, 10, torch.int64),
                                               (10, 2**31, torch.int64)])
def test_the_shared_csc_takes_int32_ids_while_every_id_fits(nodes, edges, dtype):
    """colptr counts up to the edges, row names nodes: int32 while both fit, and the size written says so."""
    from torch_geometric.data import Data

    assert csc_index_dtype(nodes, edges) == dtype
    meta = Data(x=torch.empty(nodes, 1, device="meta"), y=torch.empty(nodes, dtype=torch.long, device="meta"),
                edge_index=torch.empty(2, edges, dtype=torch.long, device="meta"),
                **{split: torch.empty(0, dtype=torch.long, device="meta") for split in SPLITS})
    id_bytes = torch.empty(0, dtype=dtype).element_size()
    assert graph_tensors(meta)[1] == nodes * 4 + nodes * 8 + (nodes + 1 + edges) * id_bytes


def test_pyg_lib_samples_the_node_shared_csc_in_place(anchor_venv):
    """In NVIDIA's container the node-shared graph is sampled by pyg-lib (PyG's NeighborSampler): run in the
    anchor's Python, which has pyg-lib, it must sample real edges from the CSC alone (no edge_index), every
    in-edge of a seed with fanout -1, and the same batches from the same seed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([str(anchor_venv / "bin" / "python"), "-m", "tests.harness.workers.native_shared"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["batches"] == 8 and result["python"].startswith(str(anchor_venv))


def test_small_shm_falls_back_to_disk_or_says_what_is_needed():
    shm, tmp = Path("/dev/shm"), Path("/tmp")
    free = {shm: 64 << 20, tmp: 100 << 30}
    chosen, note = choose_dir(1 << 30, [shm, tmp], free=free.__getitem__)
    assert chosen == tmp and "--shm-size" in note and "1.00 GiB" in note
    assert choose_dir(1 << 20, [shm, tmp], free={shm: 1 << 30, tmp: 0}.__getitem__) == (shm, "")
    with pytest.raises(UserError, match=r"needs 200\.06 GiB .* /dev/shm has 0\.06 GiB.*--shm-size=201g"):
        choose_dir(200 << 30, [shm, tmp], free=free.__getitem__)


def test_share_dir_must_exist():
    from train.graph.sharing.shared_graph import candidate_dirs

    with pytest.raises(UserError, match="data.share_dir='/no/such/dir' does not exist"):
        candidate_dirs("/no/such/dir")


def node_env(ranks_on_node: int, node_tmpdirs: tuple[str, ...] = ()):
    import dataclasses

    from train.cluster.distenv import resolve

    return dataclasses.replace(resolve({}, pick_free_port=lambda: 29500), local_world_size=ranks_on_node,
                               node_tmpdirs=node_tmpdirs)


@pytest.mark.parametrize("share,ranks_on_node,shared", [("node", 1, False), ("node", 2, True), ("node", 8, True),
                                                         ("process", 2, False), ("process", 1, False)])
def test_a_rank_alone_on_its_node_shares_nothing_for_the_run_the_plan_and_the_doctor(share, ranks_on_node, shared):
    """segments.shares_graph is asked by the run (share_graph), the memory plan and the doctor, which once counted
    /dev/shm for a rank alone on its node."""
    from train.cli.plan_run import graph_size, make_plan
    from train.doctor.probes import probe_share_dir
    from train.graph.sharing.segments import shares_graph

    assert shares_graph(share, ranks_on_node) == shared
    config = load_config("tiny", [f"data.share={share}"])
    plan = make_plan(config, graph_size(config), 1, ranks_on_node, gpus=False)
    assert any(item.startswith("graph, shared once") for item in plan.rows["node"]) == shared
    doctor = probe_share_dir(config.data, node_env(ranks_on_node), 1 << 30)
    assert doctor.need == (1 << 30 if shared else 0)


# (graph GiB, room in /dev/shm, where the doctor looks, what the run does)
DOCTOR_PLACES = [(1, True, "shm", "shares there"), (1, False, "scratch", "shares there"),
                 (500, False, "shm", "refuses, naming it"), (0, False, "shm", "shares nothing")]


@pytest.mark.parametrize("need_gib,roomy_shm,where,run", DOCTOR_PLACES)
def test_the_doctor_looks_where_the_run_would_share_the_graph(tmp_path, need_gib, roomy_shm, where, run):
    """The doctor once assumed /dev/shm; it now takes segments' choice among /dev/shm, the node's scratch and /tmp."""
    from train.doctor.probes import probe_share_dir
    from train.graph.sharing.segments import SHM, candidate_dirs

    room = {SHM: (100 if roomy_shm else 0) << 30, tmp_path: 100 << 30}
    free = lambda path: room.get(path, 0)  # noqa: E731
    env = node_env(2, (str(tmp_path),))
    doctor = probe_share_dir(DataConfig(share="node"), env, need_gib << 30, free=free)
    assert doctor.path == str({"shm": SHM, "scratch": tmp_path}[where])
    candidates = candidate_dirs("", env.node_tmpdirs)
    if run == "shares there":
        assert choose_dir(need_gib << 30, candidates, free=free)[0] == Path(doctor.path)
    elif run == "refuses, naming it":
        with pytest.raises(UserError, match=f"{doctor.path} has 0.00 GiB"):
            choose_dir(need_gib << 30, candidates, free=free)
    else:
        assert doctor.need == 0 and doctor.path == str(candidates[0])


def die_holding_a_segment(directory: Path, tag: str, uid: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(WORKERS / "dying_segment.py"), str(directory), tag, str(uid)], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_only_segments_without_a_live_owner_are_removed(tmp_path):
    uid = os.getuid()
    private, note = user_dir(tmp_path)
    assert private == tmp_path / user_dir_name(uid) and note == ""
    live = Segment.create(private, segment_name("live", 1, 0, uid), {"pid": os.getpid()})
    # Another process creates a segment and dies by SIGKILL while holding it.
    proc = die_holding_a_segment(private, "dead", uid)
    assert proc.returncode == -signal.SIGKILL and "ready" in proc.stdout, proc.stderr
    dead = private / segment_name("dead", 2, 0, uid)
    assert dead.is_dir() and dead.with_name(dead.name + ".lock").exists()
    orphan = private / segment_name("orphan", 3, 0, uid)  # a directory whose lock is gone
    orphan.mkdir()
    # The same name taken again (the same job restarted) starts from an empty directory.
    again = Segment.create(private, dead.name, {})
    assert again.path == dead and list(dead.iterdir()) == []
    again.remove()
    proc = die_holding_a_segment(private, "gone", uid)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    dead = private / segment_name("gone", 2, 0, uid)
    assert sorted(remove_stale([tmp_path], uid)) == sorted([dead, orphan])
    assert sorted(p.name for p in private.iterdir()) == sorted([live.path.name, live.lock_path.name])
    live.remove()
    assert list(private.iterdir()) == []  # the private directory itself stays, empty, like tmux's


def test_sampling_placement():
    # 90 of the 100 free bytes are the budget (the 10 % headroom)
    placed = [gpu_placement(10, 20, free=100), gpu_placement(10, 85, free=100), gpu_placement(95, 1, free=100)]
    assert [(p.structure, p.features) for p in placed] == [(True, True), (True, False), (False, False)]
    from train.graph.datasets.loading import synthetic_graph
    from train.graph.typed_csc import build_csc

    data = synthetic_graph(DataConfig(num_nodes=100, avg_degree=4))
    attach_csc(data, build_csc(data.edge_index, data.num_nodes))
    with pytest.raises(UserError, match="sampler.device='cuda' needs training on a GPU"):
        plan_sampling(data, SamplerConfig(device="cuda"), torch.device("cpu"))
    plan = plan_sampling(data, SamplerConfig(), torch.device("cpu"))
    assert plan.device.type == "cpu" and plan.host_features is None and plan.csc is graph_csc(data)
    assert set(plan.data.keys()) == {"x", "y", "edge_index"}  # split indices never travel with batches


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (sampler.device=cuda)")
def test_gpu_sampling_batches_are_right_wherever_the_features_live():
    """sampler.device=cuda, features on the GPU or gathered pinned on the host: the same, correct batches."""
    from train.graph.datasets.loading import synthetic_graph
    from train.graph.sampling.samplers import make_node_loader
    from train.graph.typed_csc import build_csc

    data = synthetic_graph(DataConfig(num_nodes=3000, avg_degree=10))
    attach_csc(data, build_csc(data.edge_index, data.num_nodes))
    device = torch.device("cuda", 0)
    seeds = data.train_idx[:300]
    cuda = SamplerConfig(num_neighbors=[5, 3], batch_size=100, device="cuda")
    structure = sum(t.nbytes for t in graph_csc(data) if t is not None) + data.num_nodes * 8
    room_for_structure_only = int(structure / (1 - GPU_HEADROOM)) + 2  # no working set: plan_sampling passes 0
    plans = {"gpu": plan_sampling(data, cuda, device),
             "pinned": plan_sampling(data, cuda, device, free_gpu_bytes=room_for_structure_only)}
    assert plans["gpu"].host_features is None and plans["pinned"].host_features is not None
    assert all(plan.device.type == "cuda" and plan.csc[0].is_cuda for plan in plans.values())
    edges = set(map(tuple, data.edge_index.t().tolist()))
    batches = {}
    for name, plan in plans.items():
        loader = make_node_loader(plan.data, seeds, [5, 3], 100, seed=3, csc=plan.csc, device=plan.device,
                                  num_workers=plan.num_workers, pin_memory=plan.pin_memory)
        batches[name] = [plan.complete(b, device).to(device) for b in loader]
    assert len(batches["gpu"]) == len(batches["pinned"]) == 3
    for index, (a, b) in enumerate(zip(batches["gpu"], batches["pinned"])):
        n_id = a.n_id.cpu()
        assert torch.equal(n_id[:100], seeds[index * 100:(index + 1) * 100])
        assert torch.equal(a.x.cpu(), data.x[n_id]) and torch.equal(a.y.cpu(), data.y[n_id])
        assert a.x.is_cuda and a.edge_index.is_cuda
        assert set(zip(n_id[a.edge_index[0].cpu()].tolist(), n_id[a.edge_index[1].cpu()].tolist())) <= edges
        for key in ("n_id", "edge_index", "x", "y"):  # same sampler seed on the same device: the same batch
            assert torch.equal(a[key], b[key]), key


# ---- real ranks ------------------------------------------------------------------------------------

def _worker(argv: list[str]) -> None:
    """One rank: take the graph the way training does and report what it sees."""
    import torch.distributed as dist

    from train.cluster.distenv import resolve
    from train.cluster.procgroup import process_group
    from train.graph.sharing.shared_graph import shared_graphs
    from train.loop.run import obtain_graph

    config = load_config("tiny", argv)
    env = resolve(os.environ)
    with process_group(env, config.dist), shared_graphs():
        data = obtain_graph(config, env)
        colptr, row, perm = graph_csc(data)
        keys = ("x", "y", "train_idx", "val_idx", "test_idx")
        seen = {key: _digest(data[key]) for key in keys}
        seen["colptr"], seen["row"] = _digest(colptr), _digest(row)
        seen["edge_index"] = _digest(torch.stack([row, csc_targets(colptr)]))  # the graph's edges, from its CSC
        seen["has_edge_index"] = "edge_index" in data  # the shared graph keeps only its CSC
        maps = [line.split(None, 5)[-1].strip() for line in open("/proc/self/maps") if PREFIX in line]
        write_error = None
        dist.barrier()
        if env.local_rank == 1:
            try:
                data.x[0, 0] = 123.0
            except RuntimeError as exc:
                write_error = str(exc).splitlines()[0]
        dist.barrier()
        rows: list = [None] * env.world_size
        dist.all_gather_object(rows, {"rank": env.rank, "digests": seen, "x_after": _digest(data.x),
                                      "perm": perm is not None, "maps": maps, "write_error": write_error,
                                      "shm_during": sorted(p.name for p in
                                                           MINE.glob(f"{PREFIX}j{os.environ['SLURM_JOB_ID']}-*"))})
        if env.rank == 0:
            print(RESULT + json.dumps(rows), flush=True)


def test_ranks_of_a_node_map_one_identical_read_only_copy():
    from train.graph.datasets.loading import load_graph
    from train.graph.typed_csc import build_csc

    config = load_config("tiny")
    procs = _start_job(["-m", "tests.test_sharing", "worker"], JOB_IDS[0], free_port())
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outputs)
    rows = json.loads(next(line for line in outputs[0].splitlines() if line.startswith(RESULT))[len(RESULT):])
    expected = load_graph(config.data)
    colptr, row, _ = build_csc(expected.edge_index, expected.num_nodes)
    col = torch.repeat_interleave(torch.arange(expected.num_nodes), torch.diff(colptr))
    want = {key: _digest(expected[key]) for key in ("x", "y", "train_idx", "val_idx", "test_idx")}
    ids = csc_index_dtype(expected.num_nodes, row.numel())  # the node's copy holds int32 ids here
    want.update(edge_index=_digest(torch.stack([row, col])), colptr=_digest(colptr.to(ids)), row=_digest(row.to(ids)),
                has_edge_index=False)
    for r in rows:
        assert r["digests"] == want, r["rank"]  # bit-identical on every rank, and to a plain load
        assert not r["perm"]
        assert r["maps"] and all(PREFIX in m and m.endswith("(deleted)") for m in r["maps"]), r["maps"]
    writer, other = rows[1], rows[0]
    assert writer["write_error"] and "inference tensor" in writer["write_error"]
    assert other["x_after"] == want["x"]  # the other rank never saw the attempted write
    assert all(r["shm_during"] == [] for r in rows)  # unlinked once both ranks had mapped it


def test_node_and_process_sharing_train_identically(tmp_path):
    runs = {}
    for share in ("node", "process"):
        result = run_local_job([*TINY, f"data.share={share}", f"output.dir={tmp_path / share}"], 2, job_id=JOB_IDS[1])
        assert result.returncodes == [0, 0], "\n".join(result.outputs)
        rows = [json.loads(line) for line in (tmp_path / share / "metrics.jsonl").read_text().splitlines()]
        runs[share] = ([{k: v for k, v in r.items() if not k.endswith("_seconds") and k != "seeds_per_second"}
                        for r in rows],
                       final_summary(tmp_path / share)["weights_sha256"])
    assert runs["node"][0] and runs["node"] == runs["process"]


def test_leader_failure_reaches_every_rank_told_once(tmp_path):
    """The node's loader prints its error; the other rank stops with it, in one line that points to it."""
    result = run_local_job([*TINY, "data.share_dir=/no/such/dir", f"output.dir={tmp_path}"], 2, job_id=JOB_IDS[2])
    assert result.returncodes == [2, 2], "\n".join(result.outputs)
    assert "error: data.share_dir='/no/such/dir' does not exist" in result.outputs[0]
    assert "rank 1: rank 0 stopped: see its error above" in result.outputs[1]
    assert "error:" not in result.outputs[1] and "/no/such/dir" not in result.outputs[1], result.outputs[1]
    assert not any("Traceback" in out for out in result.outputs), result.outputs


def _start_job(args: list[str], job_id: str, port: int, envs: list[dict] | None = None) -> list[subprocess.Popen]:
    """Ranks running `python ARGS...` with srun's variables (default: 2 ranks on one node), a fixed job id and port."""
    base = scrubbed_env(os.environ, threads=1)  # bench/localranks.py: no other launch's variables
    envs = envs or [srun_env(rank, 2, 1, job_id, port) for rank in range(2)]
    return [subprocess.Popen([sys.executable, *args], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, env={**base, **env}) for env in envs]


def test_uneven_nodes_share_where_there_is_someone_to_share_with(tmp_path):
    """2 ranks on node 0 share; the single rank of node 1 loads its own; all take part in the same collectives."""
    job, port = JOB_IDS[4], free_port()
    envs = [{"SLURM_JOB_ID": job, "SLURM_STEP_ID": "0", "SLURM_NTASKS": "3", "SLURM_PROCID": str(rank),
             "SLURM_LOCALID": str(local), "SLURM_NODEID": str(node), "SLURM_JOB_NUM_NODES": "2",
             "SLURM_TASKS_PER_NODE": "2,1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
            for rank, (node, local) in enumerate([(0, 0), (0, 1), (1, 0)])]
    procs = _start_job(["-m", "train", *TINY, "trainer.epochs=1", f"output.dir={tmp_path}"], job, port, envs)
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    final_summary(tmp_path)  # checks that the 3 ranks ended with the same weights


def test_kill_9_of_the_whole_job_leaves_nothing_after_the_restart(tmp_path):
    job, port = JOB_IDS[3], free_port()
    segment = MINE / segment_name(job, port, 0, os.getuid())
    procs = _start_job(["-m", "train", *TINY, "data.share_keep=true", "trainer.epochs=100",
                        "trainer.step_delay_seconds=0.2", f"output.dir={tmp_path / 'first'}"], job, port)
    try:
        deadline = time.monotonic() + 120
        while not (segment / "manifest.json").exists():
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
                [p.communicate()[0] for p in procs if p.poll() is not None]
            time.sleep(0.1)
        time.sleep(1.0)  # both ranks are training on the mapped segment
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
        for proc in procs:
            proc.communicate()
    assert [p.returncode for p in procs] == [-signal.SIGKILL] * 2
    assert segment.is_dir() and segment.with_name(segment.name + ".lock").exists()  # what kill -9 leaves
    assert segment in _stale()
    # The same job starts again on the node (same job id; srun may give it another port): the stale segment goes first.
    procs = _start_job(["-m", "train", *TINY, "trainer.epochs=1", "trainer.resume=never",
                        f"output.dir={tmp_path / 'second'}"], job, free_port())
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert not segment.exists() and not segment.with_name(segment.name + ".lock").exists()
    assert _ours() == []


if __name__ == "__main__":  # pragma: no cover - only for the real ranks started above
    _worker(sys.argv[2:] if sys.argv[1:2] == ["worker"] else sys.argv[1:])
