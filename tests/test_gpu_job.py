"""What the first multi-node GPU job (8 ranks over NCCL, 4 GPUs a node) would meet, decided on the CPU: the CUDA calls
through stand-ins (torch.cuda's device count and set_device monkeypatched), init_process_group's and DDP's arguments
captured, the ranks' agreements over a real torch.distributed store (a HashStore shared by threads) or real gloo
ranks with stand-in free GPU memories."""

from __future__ import annotations

import datetime
import threading

import pytest
import torch
import torch.distributed as dist

from tests.harness.gloo_ranks import GlooRanks
from train.cluster import procgroup
from train.cluster.distenv import resolve
from train.config import DistConfig
from train.errors import UserError


def _env(rank: int, world: int):
    per_node = min(world, 4)  # 4 GPUs a node
    return resolve({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank % per_node),
                    "LOCAL_WORLD_SIZE": str(per_node), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"})


class CudaStandIn:
    """torch.cuda as procgroup asks it, per thread (a thread is a rank): which ranks see GPUs, and every call made."""

    def __init__(self, blind_ranks: set[int], visible: int = 4):
        self.blind, self.visible, self.calls = blind_ranks, visible, []
        self.local = threading.local()

    def is_available(self):
        return self.local.rank not in self.blind

    def device_count(self):
        return 0 if self.local.rank in self.blind else self.visible

    def set_device(self, index):
        self.calls.append((self.local.rank, "set_device", index))


@pytest.fixture
def job(monkeypatch):
    """Run process_group on `world` threads over one HashStore; the calls each rank made, and what it raised."""

    def run(world: int, blind: set[int] = frozenset(), backend: str = "auto"):
        cuda = CudaStandIn(set(blind))
        store = dist.HashStore()
        monkeypatch.setattr(torch.cuda, "is_available", cuda.is_available)
        monkeypatch.setattr(torch.cuda, "device_count", cuda.device_count)
        monkeypatch.setattr(torch.cuda, "set_device", cuda.set_device)
        monkeypatch.setattr(procgroup, "gpu_identity", lambda i: {"uuid": f"GPU-{cuda.local.rank}", "bus_id": None})

        def connect(env, timeout):
            cuda.calls.append((env.rank, "store", None))
            return store

        def init(backend, **kwargs):
            cuda.calls.append((kwargs["rank"], "init_process_group", (backend, kwargs["device_id"])))

        monkeypatch.setattr(procgroup, "_connect_store", connect)
        monkeypatch.setattr(procgroup.dist, "init_process_group", init)
        monkeypatch.setattr(procgroup.dist, "destroy_process_group", lambda: None)
        raised: dict[int, Exception] = {}

        def rank(r: int):
            cuda.local.rank = r
            try:
                with procgroup.process_group(_env(r, world), DistConfig(backend=backend, init_timeout_seconds=20)):
                    pass
            except UserError as exc:
                raised[r] = exc

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        return cuda.calls, raised

    return run


# ---- 4: the ranks agree on the backend, each on its own GPU -------------------------------------------------
@pytest.mark.parametrize("requested, cuda, expected", [("auto", True, "nccl"), ("auto", False, "gloo"),
                                                       ("gloo", True, "gloo"), ("nccl", True, "nccl")])
def test_the_backend_a_rank_chooses(requested, cuda, expected):
    assert procgroup.choose_backend(requested, cuda) == expected


def test_nccl_asked_without_a_gpu_is_refused_naming_the_way_out():
    with pytest.raises(UserError, match="dist.backend=gloo or auto"):
        procgroup.choose_backend("nccl", False)


def test_each_rank_takes_its_gpu_before_the_store_and_binds_the_group_to_it(job):
    calls, raised = job(4)
    assert not raised
    for r in range(4):
        own = [(what, arg) for rank, what, arg in calls if rank == r]
        assert own == [("set_device", r), ("store", None), ("init_process_group", ("nccl", torch.device("cuda", r)))]


def test_ranks_that_chose_different_backends_are_refused_on_every_rank_naming_them(job):
    calls, raised = job(4, blind={2})
    assert sorted(raised) == [0, 1, 2, 3]  # every rank refuses at once, none waits for the init timeout
    said = {str(exc) for exc in raised.values()}
    assert len(said) == 1
    message = said.pop()
    assert "nccl (CUDA visible) on ranks 0, 1, 3" in message and "gloo (no CUDA visible) on rank 2" in message
    assert not [c for c in calls if c[1] == "init_process_group"]


def test_gloo_asked_on_gpu_nodes_is_chosen_alike_and_binds_no_gpu(job):
    calls, raised = job(2, backend="gloo")
    assert not raised and not [c for c in calls if c[1] == "set_device"]
    assert sorted(arg for _, what, arg in calls if what == "init_process_group") == [("gloo", None)] * 2


def test_ddp_is_bound_to_the_ranks_own_gpu_or_to_none_on_the_cpu(monkeypatch):
    from train.loop import fit

    captured = []
    monkeypatch.setattr(fit, "DistributedDataParallel", lambda module, **kwargs: captured.append(kwargs))
    module = torch.nn.Linear(2, 2)
    fit.wrap_ddp(module, torch.device("cuda", 3))
    fit.wrap_ddp(module, torch.device("cpu"))
    assert captured == [{"device_ids": [3]}, {"device_ids": None}]


def test_the_agreement_is_a_store_collective_with_the_same_answer_everywhere():
    store, found = dist.HashStore(), {}
    timeout = datetime.timedelta(seconds=20)

    def rank(r):
        found[r] = procgroup.backend_choices(store, r, 3, "gloo" if r == 1 else "nccl", timeout)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len({repr(v) for v in found.values()}) == 1
    assert [r for r, _ in found[0]["nccl"]] == [0, 2] and [r for r, _ in found[0]["gloo"]] == [1]


# ---- 5: the ranks agree on placement, by the least free GPU memory, naming the rank that forced it ----------
def _tiny_graph():
    from train.config import DataConfig
    from train.graph.sharing.shared_graph import private_graph

    return private_graph(DataConfig(num_nodes=600, num_features=8))


def _structure_only(data) -> int:
    """Free GPU memory that holds the tiny graph's structure but not its features beside the headroom."""
    return int((600 + 1 + data.edge_index.size(1) * 2) * 8 / 0.9) + 600 * 8 * 2


def _placement_work(rank: int, world: int) -> dict:
    """A rank whose GPU has room for the whole graph (rank 0) beside one with room for its structure only (rank 1,
    a stray process on it): stand-in free memories, the real all-gather over gloo, the run's own plan_sampling."""
    from train.config import SamplerConfig
    from train.graph.sampling.device_plan import least_free_gpu_memory, plan_sampling

    data = _tiny_graph()
    free = [2**34, _structure_only(data)][rank % 2]
    agreed = least_free_gpu_memory(free, torch.device("cpu"))
    plan = plan_sampling(data, SamplerConfig(), torch.device("cuda", rank), free_gpu_bytes=agreed)
    return {"device": plan.device.type, "note": plan.note, "least": [agreed.bytes, agreed.rank, agreed.most]}


placement_ranks = GlooRanks(_placement_work, "placement")


def test_the_rank_with_the_least_free_gpu_memory_decides_for_all_and_is_named(tmp_path_factory):
    found = placement_ranks(tmp_path_factory, 2)
    data = _tiny_graph()
    assert [r["least"] for r in found] == [[_structure_only(data), 1, 2**34]] * 2
    assert [r["device"] for r in found] == ["cpu", "cpu"]  # rank 0 alone would have sampled on its GPU
    for r in found:
        assert r["note"].startswith("sampler.device=auto: sampling on the CPU")
        assert "Rank 1 forced this: its GPU has the least free memory of the 2 ranks" in r["note"]


def test_ranks_alike_name_no_rank():
    from train.graph.sampling.device_plan import FreeGpuMemory, gpu_placement

    decide = lambda free: gpu_placement(10, 10, free).decision  # noqa: E731
    assert FreeGpuMemory(100, 3, 100, 8).forced(decide) == ""  # equal memories
    assert FreeGpuMemory(100, 3, 10**6, 8).forced(decide) == ""  # less, but the same decision
    assert "Rank 3 forced this" in FreeGpuMemory(15, 3, 10**6, 8).forced(decide)


# ---- 1: the exact evaluation's layer rows, kept on the GPU with the features, counted by placement and plan -
H100 = 81_559 * 2**20  # nvidia-smi's memory.total of an H100 80GB HBM3
H200 = 143_771 * 2**20


def _papers100m(*overrides: str):
    from train.cli.plan_run import graph_size
    from train.config import load_config

    config = load_config("ogbn-papers100M", list(overrides))
    return config, graph_size(config)


def test_papers100m_on_four_h100s_counts_the_evaluations_gpu_rows_and_takes_the_host_path():
    from train.plan.terms import exact_eval_gpu_rows, make_plan

    config, size = _papers100m()
    plan = make_plan(config, size, 1, 4, True, gpu_bytes=H100)
    placement = plan.placement
    graph = placement.structure_bytes + placement.feature_bytes
    assert graph <= placement.budget  # beside the per-chunk working set alone the graph would have gone on the GPU
    assert graph > placement.features_budget and plan.sampling == "cpu"  # beside the layer rows it does not fit
    assert "with the exact evaluation's layer rows, kept on the GPU with the features" in plan.notes[0]
    rows = exact_eval_gpu_rows(config, size, 4)
    assert rows > 27_764_989 * 128 * 4  # a rank's shard of the hidden layer: 27.8M rows x 128 floats, 13.2 GiB
    on_h200 = make_plan(config, size, 1, 4, True, gpu_bytes=H200)
    assert on_h200.sampling == "cuda" and on_h200.placement.features
    evaluation = next(v for k, v in on_h200.rows["GPU"].items() if k.startswith("evaluation working set with"))
    assert evaluation >= rows
    alone = make_plan(config, size, 1, 1, True, gpu_bytes=H200)  # one rank: all 111M rows of the hidden layer
    assert alone.sampling == "cpu" and alone.placement.structure_bytes + alone.placement.feature_bytes <= \
        alone.placement.budget
    host = next(v for k, v in on_h200.rows["rank"].items() if k.startswith("evaluation"))
    assert host == size.nodes * 8  # on the host only the loader's node map: the rows are the GPU's
    sampled_config = _papers100m("eval.mode=sampled")[0]
    sampled = make_plan(sampled_config, size, 1, 4, True, gpu_bytes=H200)
    assert exact_eval_gpu_rows(sampled_config, size, 4) == 0
    assert not any(k.startswith("evaluation working set with") for k in sampled.rows["GPU"])


def test_the_run_places_the_features_only_beside_the_evaluations_rows():
    """plan_sampling, as the Trainer calls it: room for the graph beside the per-chunk working set but not beside
    the layer rows that come with the features: auto samples on the CPU (decided before any CUDA call)."""
    from train.config import SamplerConfig
    from train.graph.sampling.device_plan import plan_sampling

    data = _tiny_graph()
    free = 2**24
    plan = plan_sampling(data, SamplerConfig(), torch.device("cuda", 0), free_gpu_bytes=free, working_bytes=0,
                         with_features=int(free * 0.9))
    assert plan.device.type == "cpu" and "with the exact evaluation's layer rows" in plan.note


# ---- 2: 16-bit features copied in row chunks and converted on the device -----------------------------------
class CopiesSeen(torch.utils._python_dispatch.TorchDispatchMode):
    """Every copy between devices and every dtype conversion torch makes: (op, input device, output device,
    input dtype, output dtype, elements)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in ("_to_copy", "copy_", "to"):
            source = args[1] if name == "copy_" else args[0]
            target = out
            self.seen.append((name, source.device.type, target.device.type, source.dtype, target.dtype,
                              source.numel()))
        return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sixteen_bit_features_are_the_hosts_rounded_whatever_the_chunks(dtype):
    from train.graph.sampling.device_plan import features_to_device

    x = torch.randn(1000, 7)
    for chunk_bytes in (1, 7 * 4 * 33, 2**30):  # a row a chunk, 33 rows, one chunk
        placed = features_to_device(x, torch.device("cpu"), dtype, chunk_bytes)
        assert placed.dtype == dtype and torch.equal(placed, x.to(dtype))


def test_the_features_cross_to_the_device_in_row_chunks_and_convert_there():
    """On the meta device (a device other than the host, without memory): no conversion reads the host's copy, and
    no copy to the device is larger than a chunk; `x.to(device, dtype)` makes one whole-size conversion of the
    host's copy (on a GPU: a whole-size host temporary)."""
    from train.graph.sampling.device_plan import features_to_device

    x, chunk_rows = torch.randn(1000, 16), 50
    with CopiesSeen() as whole:
        x.to("meta", torch.bfloat16)
    assert any(src == "cpu" and a != b and n == x.numel() for _, src, _, a, b, n in whole.seen)
    with CopiesSeen() as chunked:
        placed = features_to_device(x, torch.device("meta"), torch.bfloat16, chunk_bytes=chunk_rows * 16 * 4)
    assert placed.device.type == "meta" and placed.dtype == torch.bfloat16 and placed.shape == x.shape
    crossing = [n for _, src, dst, _, _, n in chunked.seen if src == "cpu" and dst == "meta"]
    assert len(crossing) == 1000 // chunk_rows and max(crossing) == chunk_rows * 16
    assert not [c for c in chunked.seen if c[1] == "cpu" and c[3] != c[4]]  # no conversion on the host


def test_the_plan_counts_the_copys_chunk_on_the_gpu():
    from train.graph.sampling.device_plan import FEATURE_COPY_CHUNK_BYTES
    from train.plan.terms import make_plan

    config, size = _papers100m("data.feature_dtype=bfloat16")
    rows = make_plan(config, size, 1, 8, True, gpu_bytes=H200).rows["GPU"]
    copy = next(v for k, v in rows.items() if k.startswith("while placing the features"))
    assert copy == FEATURE_COPY_CHUNK_BYTES  # 131,072 rows of 128 float32s
    float32 = make_plan(*_papers100m(), 1, 8, True, gpu_bytes=H200).rows["GPU"]
    assert not any(k.startswith("while placing the features") for k in float32)


# ---- 10: NCCL's own memory, by world size and topology, set aside alike by the run and the plan -------------
def test_nccls_memory_grows_with_the_world_and_the_nodes_it_spans():
    from train.graph.sampling.device_plan import nccl_buffer_bytes

    assert nccl_buffer_bytes(1, 1) == 0  # the world-size-1 calibration stands
    one_node, two_nodes, many = nccl_buffer_bytes(4, 4), nccl_buffer_bytes(8, 4), nccl_buffer_bytes(64, 8)
    assert 0 < one_node < two_nodes < many
    assert 1 * 2**30 <= two_nodes + 2**30 <= 3 * 2**30  # with the context: NCCL's 1-3 GiB at 8 ranks


def test_the_run_and_the_plan_place_alike_at_the_threshold(monkeypatch):
    """The plan's GPU of `gpu_bytes` and the run's measured free memory on it (after the CUDA context and the model)
    give one free figure, both less NCCL's buffers for 2 x 4 ranks: the same decision either side of the threshold."""
    from types import SimpleNamespace

    from train.config import load_config
    from train.graph.sampling.device_plan import gpu_placement, nccl_buffer_bytes
    from train.loop import fit
    from train.plan.terms import FLOAT, GPU_RUNTIME_BYTES, make_plan, parameter_count

    config, size = _papers100m()
    context_and_model = GPU_RUNTIME_BYTES + 2 * parameter_count(config, size) * FLOAT
    placement = make_plan(config, size, 2, 8, True, gpu_bytes=H200).placement
    at_least = -(-(placement.structure_bytes + placement.feature_bytes + placement.with_features) * 10 // 9)
    threshold = at_least + context_and_model + nccl_buffer_bytes(8, 4)  # the smallest GPU that takes the features
    decisions = []
    for gpu_bytes in (threshold - 2**20, threshold + 2**20):
        planned = make_plan(config, size, 2, 8, True, gpu_bytes=gpu_bytes).placement
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device, free=gpu_bytes - context_and_model: (free, 0))
        run = SimpleNamespace(device=torch.device("cuda", 0), config=load_config("ogbn-papers100M"), env=_env(5, 8))
        free = fit.Trainer.free_gpu(run)  # one rank: no process group here, its own figure
        assert free.bytes == planned.free_bytes
        ran = gpu_placement(placement.structure_bytes, placement.feature_bytes, free.bytes, placement.working_bytes,
                            with_features=placement.with_features)
        assert ran.decision == planned.decision
        decisions.append(planned.features)
    assert decisions == [False, True]


# ---- 9: what the docs promise of a resume under another layout ----------------------------------------------
def test_the_docs_promise_bit_for_bit_resume_only_under_the_same_layout_and_hardware():
    """With NCCL over several nodes, 2x4 resumed as 4x2 sums the gradients in another order: no page may promise
    bit for bit under another layout, and the checkpoints' page says what holds."""
    import re
    from pathlib import Path

    docs = Path(__file__).resolve().parents[1] / "docs"
    for page in docs.glob("*.md"):
        for sentence in re.split(r"(?<=[.!?])\s", " ".join(page.read_text().split())):
            if re.search(r"bit[- ](for[- ]bit|exact)", sentence) and re.search(r"another (GPU )?layout", sentence):
                assert re.search(r"under the same layout|within rounding|not bit for bit", sentence), \
                    (page.name, sentence)
    assert "Bit for bit it continues only under the same layout on the same kind of hardware" in " ".join(
        (docs / "preemption.md").read_text().split())
