"""gpu-check's `profile` check: where a training step's time goes at the seed's settings, op by op and kernel by kernel.

The phase clocks (train/loop/timing.py) say which phase holds a step's time, not why. On an H200 the seed's
settings ran at 8.2 ms a step against a 2.5 ms model step (issue 30 §4), and a clock cannot tell whether the
rest is the GPU working, the GPU waiting for the host to launch kernels (two Python threads, the step's and
the prefetching one, share one interpreter lock), or the host waiting for the GPU. This runs the project's own
epoch (`Trainer.train_epoch` under configs/reddit.yaml's defaults: `sampler.device=auto`, prefetch) on
gpu-check's graph under torch.profiler and reports per step:
  wall_ms               the step's wall time
  host_ops              top-level aten ops called (each costs host time to dispatch and launch), per thread:
                        `training` (the thread that steps the optimizer), `sampling` (threads that draw from the
                        loader: the prefetching one), `other` (e.g. autograd's backward thread on a GPU)
  host_ms               host time spent in those ops, per thread
  host_syncs            ops that read device values on the host (`int(t)`, `.item()`, `.tolist()`, nonzero,
                        masked_select: bench/hop_profile.py's `host_sync`), per thread: on a GPU each waits for it
  device_waits          CUDA runtime calls that block the host until the device catches up
                        (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, cudaMemcpy)
  kernels, device_busy  kernels run, and the fraction of the wall time in which at least one ran
and the busiest ops (host self time) and kernels (device time). Without CUDA it profiles the same epoch on the
CPU over gloo (no kernels, no device waits), so the check runs before any GPU exists.

`python -m bench.gpu_profile ...` is the one process the check runs; it prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from bench.gpu_forms import ROOT, clean_env

WARM_STEPS = 3
TOP = 8  # busiest ops and kernels listed
DEVICE_WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")


def _busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of [start, end) intervals: the time at least one kernel ran."""
    busy, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            busy += end - max(start, reach)
            reach = end
    return busy


THREADS = ("training", "sampling", "other")


def thread_roles(events) -> dict[int, str]:
    """The profiler's thread ids named by what they ran: the optimizer's step (`training`), the loader (`sampling`)."""
    roles: dict[int, str] = {}
    for event in events:
        if event.name.startswith("Optimizer.step"):
            roles[event.thread] = "training"
    if not roles:
        raise RuntimeError("the profile holds no optimizer step: the epoch trained no batch")
    for event in events:
        if event.name.startswith("enumerate(DataLoader)") and event.thread not in roles:
            roles[event.thread] = "sampling"
    return roles


def summarise(events, steps: int, wall_seconds: float) -> dict:
    """Per-step figures from the profiler's events (`profile.events()`): see the module's docstring."""
    roles = thread_roles(events)
    from bench.hop_profile import ancestors, host_sync  # imports torch: not when gpu-check loads this module

    ops, host_us, syncs = Counter(), defaultdict(float), Counter()
    busiest_ops, kernel_us, kernel_calls = defaultdict(float), defaultdict(float), Counter()
    waits = 0
    intervals = []
    for event in events:
        name = event.name
        if event.device_type.name == "CUDA":  # a kernel, memcpy or memset on the device
            kernel_us[name] += event.time_range.elapsed_us()
            kernel_calls[name] += 1
            intervals.append((event.time_range.start, event.time_range.end))
            continue
        role = roles.get(event.thread, "other")
        if name in DEVICE_WAITS:
            waits += 1
        if not name.startswith("aten::"):
            continue
        outer = [a.name for a in ancestors(event) if a.name.startswith("aten::")]
        if host_sync(event, outer) is not None:
            syncs[role] += 1
        if not outer:
            ops[role] += 1
            host_us[role] += event.cpu_time_total
            busiest_ops[name] += event.cpu_time_total
    per_step = max(steps, 1)
    figures = {
        "steps": steps, "wall_ms": wall_seconds * 1000 / per_step,
        "host_ops": {role: ops[role] / per_step for role in THREADS},
        "host_ms": {role: host_us[role] / 1000 / per_step for role in THREADS},
        "host_syncs": {role: syncs[role] / per_step for role in THREADS},
        "busiest_ops_ms": {name: us / 1000 / per_step
                           for name, us in sorted(busiest_ops.items(), key=lambda kv: -kv[1])[:TOP]},
    }
    if intervals:
        figures.update(
            device_waits=waits / per_step, kernels=sum(kernel_calls.values()) / per_step,
            device_busy=_busy_seconds(intervals) / 1e6 / max(wall_seconds, 1e-9),
            busiest_kernels_ms={name[:80]: us / 1000 / per_step
                                for name, us in sorted(kernel_us.items(), key=lambda kv: -kv[1])[:TOP]})
    return figures


def _all_threads_config():
    """The profiler's setting that records every thread's ops (the prefetching thread starts inside the profile,
    and a profile records only its own thread by default), where this torch has it: (config, what it records)."""
    from torch._C._profiler import _ExperimentalConfig

    try:
        return _ExperimentalConfig(profile_all_threads=True), "every thread"
    except TypeError:  # an older torch: the prefetching thread's ops are missing from `other`
        return None, "the training thread only (this torch cannot profile every thread)"


def measure(overrides: list[str], steps: int) -> dict:
    """One epoch of `steps` steps (after WARM_STEPS untimed) under the profiler, in this process."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from bench.common import free_port
    from train.cluster.distenv import resolve
    from train.cluster.procgroup import process_group
    from train.config import load_config
    from train.graph.sharing.shared_graph import shared_graphs
    from train.loop.fit import Trainer
    from train.loop.numerics import set_gpu_numerics
    from train.loop.run import obtain_graph

    os.environ.update(WORLD_SIZE="1", RANK="0", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", GROUP_RANK="0",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    config = load_config("reddit", overrides)
    env = resolve(os.environ)
    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]

    def synchronize() -> None:
        if cuda:
            torch.cuda.synchronize()

    with process_group(env, config.dist) as (_backend, device), shared_graphs(), \
            tempfile.TemporaryDirectory() as out:
        if device.type == "cuda":
            set_gpu_numerics(config.trainer.deterministic)
        trainer = Trainer(config, env, device, obtain_graph(config, env), out_dir=Path(out))

        def epoch(index: int, count: int) -> float:
            trainer.state.step = 0
            trainer.timer.reset()
            synchronize()
            started = time.perf_counter()
            trainer.train_epoch(index, on_step_end=lambda tr, _record: tr.state.step >= count)
            synchronize()
            return time.perf_counter() - started

        epoch(0, WARM_STEPS)
        every_thread, config_note = _all_threads_config()
        with profile(activities=activities, experimental_config=every_thread) as prof:
            wall = epoch(1, steps)
        figures = summarise(prof.events(), trainer.state.step, wall)
        figures.update(device=str(device), placement=trainer.sampling.note or "CPU sampling",
                       prefetch=trainer.prefetch_depth(), threads_recorded=config_note)
    return figures


def worker_command(args) -> list[str]:
    """The check's process: gpu-check's graph under the reddit config's defaults (the `training` check's run)."""
    overrides = ["data.name=synthetic", f"data.num_nodes={args.nodes}", f"data.avg_degree={args.degree}",
                 f"data.num_features={args.features}", "data.num_classes=41", f"sampler.num_workers={args.workers}",
                 f"sampler.batch_size={args.batch_size}", "trainer.checkpoint_every=0", "output.progress=lines",
                 f"trainer.log_every={10**6}"]
    return [sys.executable, "-m", "bench.gpu_profile", "--steps", str(args.steps), *overrides]


def check_profile(args, budget: float) -> dict:
    """Where a step's time goes at the seed's settings (the module's docstring); runs on the CPU too."""
    from train.config import load_config
    from train.loop.numerics import numerics_env

    deterministic = load_config("reddit").trainer.deterministic  # the run's numerics, as `fit` exports them
    proc = subprocess.run(worker_command(args), cwd=ROOT, env=clean_env(numerics_env(deterministic, clean_env({}))),
                          capture_output=True, text=True, timeout=max(budget, 1.0))
    if proc.returncode != 0:
        raise RuntimeError(f"bench.gpu_profile exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, required=True, help="steps profiled (after the warm-up)")
    parser.add_argument("overrides", nargs="*", help="the reddit config's overrides (key=value)")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.overrides, args.steps)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
