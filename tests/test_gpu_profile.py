"""gpu-check's `profile` check (bench/gpu_profile.py): its figures are counted from a real torch.profiler run of a
known workload on two threads, and the GPU's busy fraction is the union of its kernels' intervals."""

from __future__ import annotations

import threading

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from bench.gpu_profile import _all_threads_config, _busy_seconds, summarise, thread_roles


def test_busy_time_is_the_union_of_the_intervals():
    assert _busy_seconds([]) == 0.0
    assert _busy_seconds([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (5.5, 5.7)]) == 4.0
    assert _busy_seconds([(4.0, 5.0), (0.0, 1.0)]) == 2.0


def _sampling(count: int) -> None:
    # what a loader's thread looks like to the profiler: its work under the DataLoader's record function
    with torch.profiler.record_function("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"):
        values = torch.arange(10)
        for _ in range(count):
            int(values.sum())  # a host read: aten::item -> aten::_local_scalar_dense


def test_ops_and_host_syncs_are_counted_per_thread_and_per_step():
    weight = torch.nn.Parameter(torch.ones(4))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    config, _note = _all_threads_config()
    with profile(activities=[ProfilerActivity.CPU], experimental_config=config) as prof:
        for _ in range(2):  # two steps
            (weight * 2).sum().backward()
            optimizer.step()
            float(weight.detach().sum())  # one host read per step on the training thread
            sampler = threading.Thread(target=_sampling, args=(3,))
            sampler.start()
            sampler.join()
    events = prof.events()
    roles = thread_roles(events)
    assert sorted(roles.values()) == ["sampling", "sampling", "training"]  # one training thread, two loader threads
    figures = summarise(events, steps=2, wall_seconds=0.5)
    assert figures["wall_ms"] == 250.0
    assert figures["host_syncs"] == {"training": 1.0, "sampling": 3.0, "other": 0.0}
    assert figures["host_ops"]["sampling"] == 1 + 2 * 3  # arange, then (sum, item) per read
    assert figures["host_ops"]["training"] > 0
    assert "kernels" not in figures and "device_waits" not in figures  # no CUDA activity recorded


def test_a_profile_without_an_optimizer_step_is_refused():
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.ones(3).sum()
    with pytest.raises(RuntimeError, match="no optimizer step"):
        thread_roles(prof.events())
