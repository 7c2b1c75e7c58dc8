"""What a first multi-GPU run meets, checked on the CPU where it can be (the CUDA calls through stand-ins
of torch.cuda's shape) and on a GPU where one is (skipped with the reason elsewhere; `make gpu-check` runs them):
a resume under another GPU layout, the optimizer state sent between ranks, two tasks on one GPU, NCCL's
error handling, and the deterministic switches of a GPU run."""

from __future__ import annotations

import datetime
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from train.cluster.devices import (
    choose_device_index,
    gpus_counted,
    invisible_gpus,
    one_gpu_per_task,
    refuse_shared_gpus,
    shared_gpus,
)
from train.cluster.distenv import resolve
from train.cluster.procgroup import nccl_error_handling
from train.cluster.torch_gpus import torch_gpu_view
from train.errors import EXIT_USER_ERROR, UserError
from train.loop import rng
from train.loop.checkpoint import FORMAT_VERSION, decode, encode
from train.loop.failure_report import is_peer_failure
from train.loop.numerics import numerics_env, set_gpu_numerics
from train.loop.step_vote import on_cpu

ROOT = Path(__file__).resolve().parents[1]


def gpu_test(test):
    """A GPU test: collected by `pytest -m gpu` (make gpu-check), skipped with the reason elsewhere."""
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")(test))


# ---- 2: the RNG of the rank's own device, whatever the layout ---------------------------------------
class FakeCuda:
    """torch.cuda's RNG calls as train/loop/rng.py makes them: `visible` GPUs, this process on `current`."""

    def __init__(self, visible: int, current: int, initialized: bool = True):
        self.visible, self.current, self.initialized = visible, current, initialized
        self.states = {i: torch.tensor([10 * visible + i], dtype=torch.uint8) for i in range(visible)}

    def is_available(self):
        return self.visible > 0

    def is_initialized(self):
        return self.initialized

    def current_device(self):
        return self.current

    def _check(self, index):
        if not 0 <= index < self.visible:
            raise IndexError(f"device {index} of {self.visible}")

    def get_rng_state(self, index):
        self._check(index)
        return self.states[index].clone()

    def set_rng_state(self, state, index):
        self._check(index)
        self.states[index] = state.clone()

    def get_rng_state_all(self):
        return [self.states[i].clone() for i in range(self.visible)]


def saved_with(visible: int, current: int) -> dict:
    """A rank's checkpoint part written with `visible` GPUs, on `current`, through the checkpoint's own bytes."""
    return decode(encode({"format": FORMAT_VERSION, "rng": rng.rng_state(FakeCuda(visible, current))}))["rng"]


@pytest.mark.parametrize("saved_layout, resumed_layout", [
    ((4, 3), (1, 0)),  # --gpu-bind=none (cuda:LOCAL_RANK) resumed with --gpus-per-task=1 (cuda:0)
    ((1, 0), (4, 2)),  # and the other way round
    ((4, 1), (2, 1)),  # 2x4 resumed as 4x2
])
def test_a_rank_restores_its_own_device_generator_under_another_layout(saved_layout, resumed_layout):
    saved = saved_with(*saved_layout)
    assert saved["cuda"]["device"] == saved_layout[1]
    own = FakeCuda(*saved_layout).states[saved_layout[1]]
    resumed = FakeCuda(*resumed_layout)
    untouched = {i: s.clone() for i, s in resumed.states.items() if i != resumed_layout[1]}
    rng.set_rng_state(saved, resumed)
    assert torch.equal(resumed.states[resumed_layout[1]], own)  # what the saving rank's device held
    assert all(torch.equal(resumed.states[i], s) for i, s in untouched.items())  # nobody else's device


@pytest.mark.parametrize("listed, visible, current, expected", [
    (4, 1, 0, 0),  # a list (the format before: one per visible GPU) longer than the devices visible now
    (1, 4, 3, 0),  # shorter: its one entry
    (4, 4, 2, 2),  # the same layout: the entry of this device
])
def test_a_list_of_states_from_the_earlier_format_restores_without_index_error(listed, visible, current, expected):
    states = FakeCuda(listed, 0).get_rng_state_all()
    resumed = FakeCuda(visible, current)
    rng.set_cuda_rng_state(states, resumed)
    assert torch.equal(resumed.states[current], states[expected])


def test_no_cuda_state_without_a_gpu_in_use_and_none_restored_on_a_cpu():
    assert "cuda" not in rng.rng_state(FakeCuda(2, 0, initialized=False))  # a CPU run on a GPU machine
    rng.set_rng_state(saved_with(4, 3), FakeCuda(0, 0))  # a GPU checkpoint resumed on a CPU: nothing to set


@gpu_test
def test_the_real_cuda_generator_comes_back_on_this_device():
    torch.cuda.init()
    saved = rng.rng_state()
    first = torch.rand(4, device="cuda")
    rng.set_rng_state(saved)
    assert torch.equal(torch.rand(4, device="cuda"), first)
    rng.set_cuda_rng_state({"device": 7, "state": saved["cuda"]["state"]})  # written on another layout's cuda:7
    assert torch.equal(torch.rand(4, device="cuda"), first)
    rng.set_cuda_rng_state([saved["cuda"]["state"]] * (torch.cuda.device_count() + 3))  # a longer list


# ---- 3: the optimizer state travels on the CPU --------------------------------------------------------
def test_on_cpu_keeps_structure_and_values():
    state = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(2)}},
             "param_groups": [{"lr": 0.1, "params": [0], "betas": (0.9, 0.999)}]}
    moved = on_cpu(state)
    assert moved["param_groups"] == state["param_groups"] and isinstance(moved["param_groups"][0]["betas"], tuple)
    assert torch.equal(moved["state"][0]["exp_avg"], state["state"][0]["exp_avg"])


@gpu_test
def test_a_cuda_optimizer_state_is_sent_on_the_cpu_and_loaded_onto_the_receivers_device():
    model = torch.nn.Linear(3, 2).cuda()
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(5, 3, device="cuda")).sum().backward()
    optimizer.step()
    sent = pickle.loads(pickle.dumps(on_cpu(optimizer.state_dict())))
    tensors = [t for s in sent["state"].values() for t in s.values()]
    assert tensors and all(t.device.type == "cpu" for t in tensors)
    receiver = torch.optim.Adam(torch.nn.Linear(3, 2).cuda().parameters())
    receiver.load_state_dict(sent)
    assert all(s["exp_avg"].device == torch.device("cuda", torch.cuda.current_device())
               for s in receiver.state.values())


# ---- 7: two tasks on one GPU --------------------------------------------------------------------------
@pytest.mark.parametrize("local_rank, visible, cvd, tasks, expected", [
    (2, 4, None, 4, 2),  # --gpu-bind=none: every task sees the node's GPUs
    (3, 1, "3", 4, 0),  # one GPU bound per task by SLURM (told apart from a shared one by UUID)
    (0, 1, None, 1, 0),
    (0, 8, "0,1,2,3,4,5,6,7", 2, 0),  # more GPUs than tasks
])
def test_the_device_of_a_local_rank(local_rank, visible, cvd, tasks, expected):
    assert choose_device_index(local_rank, visible, cvd, tasks) == expected


@pytest.mark.parametrize("local_rank, visible, cvd, tasks, needle", [
    (0, 0, "", 1, "no GPU is visible (CUDA_VISIBLE_DEVICES='')"),
    (1, 1, None, 4, "4 tasks on this node all see its one GPU"),
    (0, 2, "0,1", 4, "4 tasks on this node but 2 GPUs visible to each"),  # every rank refuses, rank 0 too
    (3, 2, "0,1", 1, "local rank 3 would have no GPU of its own"),
])
def test_a_device_layout_without_a_gpu_per_task_is_refused_with_the_srun_line(local_rank, visible, cvd, tasks,
                                                                              needle):
    with pytest.raises(UserError) as info:
        choose_device_index(local_rank, visible, cvd, tasks)
    assert needle in str(info.value)
    if visible:
        assert "srun --ntasks-per-node=" in str(info.value) and "--gpus-per-task=1 --gpu-bind=none" in str(info.value)


def _all_ranks(gpus: list[str]) -> list:
    """`shared_gpus` on every rank at once (threads over one in-memory store, as over the rendezvous store)."""
    store, results = dist.HashStore(), [None] * len(gpus)

    def rank(r):
        results[r] = shared_gpus(store, r, len(gpus), gpus[r], f"node1 GPU {gpus[r]}", datetime.timedelta(seconds=30))

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(len(gpus))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_tasks_on_distinct_gpus_pass_and_shared_ones_are_named_on_every_rank():
    assert _all_ranks(["GPU-a", "GPU-b", "GPU-c", "GPU-d"]) == [[]] * 4
    found = _all_ranks(["GPU-a", "GPU-b", "GPU-a", "GPU-a", "GPU-c", "GPU-c"])
    assert all(sorted(r) == ["ranks 0, 2, 3 on node1 GPU GPU-a", "ranks 4, 5 on node1 GPU GPU-c"] for r in found)
    with pytest.raises(UserError) as info:
        refuse_shared_gpus(found[1], 4)
    assert "ranks 0, 2, 3 on node1 GPU GPU-a" in str(info.value) and one_gpu_per_task(4) in str(info.value)
    refuse_shared_gpus([], 4)  # nothing shared: no refusal


# ---- 8: NCCL's errors raise in the rank's own thread -------------------------------------------------------
def test_nccl_error_handling_aborts_the_communicators_not_the_process_unless_chosen_otherwise():
    assert nccl_error_handling({}) == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"}
    for name in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_BLOCKING_WAIT"):
        assert nccl_error_handling({name: "1"}) == {}  # the user's (or torchrun's) choice stands


def test_nccl_failures_and_ranks_missing_at_the_loading_barrier_count_as_a_peer_failure():
    assert is_peer_failure(RuntimeError("[Rank 0]: Ranks 1 failed to pass monitoredBarrier in 3600000 ms"))
    assert is_peer_failure(dist.DistBackendError("NCCL communicator was aborted on rank 1."))
    assert is_peer_failure(RuntimeError("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
                                        "OpType=ALLREDUCE) ran for 180012 milliseconds before timing out."))


# ---- 6: the deterministic switches of a GPU run ------------------------------------------------------------
def test_numerics_env_turns_off_the_containers_tf32_override_and_fixes_the_cublas_workspace():
    assert numerics_env(True, {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}) == {
        "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "0", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    assert numerics_env(True, {"CUBLAS_WORKSPACE_CONFIG": ":16:8"}) == {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "0"}
    assert numerics_env(False, {}) == {}


def test_set_gpu_numerics_switches_deterministic_kernels_on_and_tf32_off(torch_switches):
    torch.backends.cuda.matmul.allow_tf32 = True
    note = set_gpu_numerics(True)
    assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert torch.get_float32_matmul_precision() == "highest" and torch.backends.cudnn.deterministic
    assert "trainer.deterministic=true" in note and "TF32 matmul False" in note


@gpu_test
def test_deterministic_switches_make_a_gpu_scatter_repeat_bit_for_bit(torch_switches):
    set_gpu_numerics(True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    src = torch.randn(200_000, 64, device="cuda", generator=gen)
    index = torch.randint(0, 1000, (200_000,), device="cuda", generator=gen)
    runs = [torch.zeros(1000, 64, device="cuda").index_add_(0, index, src) for _ in range(3)]
    assert all(torch.equal(runs[0], r) for r in runs[1:])


# ---- issue 30 §11: GPUs that SLURM allocated but torch cannot see are refused, not trained beside -------------
CPU_TORCH = {"torch_version": "2.9.0+cpu", "torch_cuda": None, "device_count": 0}
CUDA_TORCH_NO_DEVICE = {"torch_version": "2.11.0+cu130", "torch_cuda": "13.0", "device_count": 0}


@pytest.mark.parametrize("name, value, count", [
    ("SLURM_GPUS_PER_TASK", "1", 1), ("SLURM_GPUS_PER_TASK", "h200:2", 2), ("SLURM_GPUS", "a100:1,v100:2", 3),
    ("SLURM_GPUS_ON_NODE", "0", 0), ("SLURM_JOB_GPUS", "0,1", 2), ("SLURM_STEP_GPUS", "3", 1),
    ("SLURM_GPUS_PER_NODE", "gpu:none", 0),
])
def test_the_gpus_a_slurm_variable_gives(name, value, count):
    assert gpus_counted(name, value) == count


def test_allocated_gpus_that_torch_cannot_see_are_refused_naming_slurm_torch_the_cause_and_the_way_out():
    allocation = (("SLURM_GPUS_PER_TASK", "1"), ("SLURM_GPUS_ON_NODE", "2"))
    refusal = invisible_gpus(allocation, "0,1", **CPU_TORCH)
    for part in ("SLURM_GPUS_PER_TASK=1", "SLURM_GPUS_ON_NODE=2", "CUDA_VISIBLE_DEVICES='0,1'", "torch 2.9.0+cpu",
                 "torch.version.cuda None", "torch.cuda.device_count() 0", "CPU build", "GPUS_PER_TASK=0"):
        assert part in refusal
    hook = invisible_gpus(allocation, "0,1", **CUDA_TORCH_NO_DEVICE)
    assert "CUDA 13.0" in hook and "NVIDIA hook" in hook and "driver" in hook and "CPU build" not in hook


@pytest.mark.parametrize("allocation, torch_view", [
    ((), CPU_TORCH),  # no GPU asked for: a CPU job
    ((("SLURM_GPUS_ON_NODE", "0"),), CPU_TORCH),  # SLURM says none
    ((("SLURM_GPUS_PER_TASK", "1"),), {**CUDA_TORCH_NO_DEVICE, "device_count": 1}),  # asked for and seen
])
def test_no_refusal_without_allocated_gpus_or_with_visible_ones(allocation, torch_view):
    assert invisible_gpus(allocation, None, **torch_view) is None


def test_the_env_contract_reads_slurms_gpu_variables_at_the_entry():
    env = resolve({"SLURM_GPUS_PER_TASK": "1", "SLURM_JOB_GPUS": "0,1", "CUDA_VISIBLE_DEVICES": "0,1",
                   "SLURM_GPUS": ""}, pick_free_port=lambda: 29500)
    assert env.gpu_allocation == (("SLURM_GPUS_PER_TASK", "1"), ("SLURM_JOB_GPUS", "0,1"))
    assert env.sources["gpu_allocation"] == "SLURM_GPUS_PER_TASK, SLURM_JOB_GPUS"
    assert resolve({}, pick_free_port=lambda: 29500).gpu_allocation == ()


@pytest.mark.skipif(torch.cuda.device_count() > 0, reason="needs a torch that sees no GPU (the CPU machines)")
def test_fit_with_slurms_gpus_unseen_refuses_before_the_rendezvous_without_a_traceback(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_", "TORCHELASTIC_"))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", SLURM_GPUS_PER_TASK="1", CUDA_VISIBLE_DEVICES="0,1")
    done = subprocess.run([sys.executable, "-m", "train", "fit", "--config", "tiny"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == EXIT_USER_ERROR, done.stderr
    assert "Traceback" not in done.stderr and "backend" not in done.stdout  # no process group, no training
    assert done.stderr.count("\n") == 1 and "SLURM_GPUS_PER_TASK=1" in done.stderr
    assert f"torch {torch.__version__}" in done.stderr and "GPUS_PER_TASK=0" in done.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(torch.cuda.device_count() > 0, reason="needs a torch that sees no GPU (the CPU machines)")
def test_the_doctor_reports_the_same_refusal_on_every_rank():
    from tests.harness.doctor_records import minimal_record
    from train.doctor.checks import check_devices
    from train.doctor.rank_record import inspect_device

    env = resolve({"SLURM_GPUS_PER_TASK": "1"}, pick_free_port=lambda: 29500)
    device = inspect_device(env, "gloo")
    assert device.error == invisible_gpus(env.gpu_allocation, None, **torch_gpu_view())
    records = [minimal_record(job__rank=r, host=f"node{r}", device=device) for r in range(2)]
    failures = [f for f in check_devices(records) if device.error in f.message]
    assert [f.message.split(":")[0] for f in failures] == ["rank 0 on node0", "rank 1 on node1"]
