"""Where each training epoch's time goes: wall clocks around the real work, split into phases.

Phases (seconds per epoch, exclusive, measured on the training thread):
  sample     waiting for the next batch from the loader, feature gathering excluded: the sampler
             itself with `sampler.num_workers=0`, the wait for the worker processes otherwise; with
             `sampler.prefetch` (train/loop/prefetch.py) the wait for the prefetching thread, which
             samples, gathers and copies (the part of them not hidden behind the step)
  gather     joining the sampled nodes with their features and labels (PyG's `filter_fn`, or the
             pinned host gather of GPU sampling), where it runs on the training thread
  copy       `batch.to(device)`: host to device copy of the batch, where the training thread makes it
  compute    forward, loss, backward (the gradient all-reduce excluded) and the optimizer step
  allreduce  the gradient all-reduce not hidden behind backward: from the moment the last gradient
             is computed to `backward()` returning (DDP waits for its bucket all-reduces there)
  eval       evaluation (layer-wise inference and its collectives)
  other      the rest of the epoch's wall time: per-step bookkeeping, checkpoints, progress lines,
             the epoch-end reductions and barrier, uneven-input joins

The phases add up to the epoch's wall time (`other` is the remainder, never negative). Nested
phases are exclusive: the time of `gather` inside `sample` counts once, in `gather`.

On a GPU, kernels run asynchronously; at every phase boundary the timer waits for the training thread's
stream (`stream_wait`), so each phase holds the GPU work it launched. It waits for that stream only, not
for the device: the prefetching thread samples the next batches on a side stream (train/loop/prefetch.py),
and a device-wide `torch.cuda.synchronize` would wait for that work too, at every boundary, and undo the
overlap the side stream exists for (issue 30: on an H200 the step's `compute` held the sampler's kernels).
The wait for a prefetched batch's kernels shows in `sample`: the step's stream waits on the batch's event
when the batch is taken. The all-reduce wait is measured with CUDA events on the stream backward runs on
(last gradient ready -> backward done), because NCCL's wait is a stream wait, not a host wait. The waits
cost a little overlap within the training thread (a few microseconds per boundary); that is the price of
attributing time honestly.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable, Iterator

import torch
import torch.distributed as dist

from train.loop.records import MEASURED, PHASES


def stream_wait(device: torch.device):
    """What a phase boundary waits for on `device`: on a GPU, the work launched so far on the calling thread's
    current stream (not the device's other streams: see the module's docstring); None where work is synchronous."""
    if device.type != "cuda":
        return None
    cuda = torch.cuda
    return lambda: cuda.current_stream(device).synchronize()


class PhaseTimer:
    """Exclusive wall-clock time per phase for one epoch, on the thread that created it.

    `phase(name)` may nest: entering a phase pauses the enclosing one. Calls from another
    thread or a forked loader worker are ignored (their time is not on this thread's clock).
    """

    def __init__(self, device: torch.device | str = "cpu", clock=time.perf_counter):
        self.device = torch.device(device)
        self.wait = stream_wait(self.device)
        self.clock = clock
        self._owner = (os.getpid(), threading.get_ident())
        self.reset()

    def reset(self) -> None:
        self.seconds = dict.fromkeys(MEASURED, 0.0)
        self._stack: list[str] = []
        self._mark = 0.0
        self._started = self.clock()

    def _mine(self) -> bool:
        return (os.getpid(), threading.get_ident()) == self._owner

    def _now(self) -> float:
        if self.wait is not None:
            self.wait()
        return self.clock()

    def _charge(self, now: float) -> None:
        if self._stack:
            self.seconds[self._stack[-1]] += now - self._mark
        self._mark = now

    @contextlib.contextmanager
    def phase(self, name: str):
        if name not in self.seconds:
            raise ValueError(f"unknown phase {name!r}; phases: {', '.join(MEASURED)}")
        if not self._mine():
            yield
            return
        self._charge(self._now())
        self._stack.append(name)
        try:
            yield
        finally:
            self._charge(self._now())
            self._stack.pop()

    def move(self, seconds: float, source: str, target: str) -> None:
        """Re-attribute time measured inside `source` (e.g. the all-reduce wait inside backward)."""
        seconds = min(max(seconds, 0.0), self.seconds[source])
        self.seconds[source] -= seconds
        self.seconds[target] += seconds

    def iterate(self, iterable: Iterable, name: str = "sample") -> Iterator:
        """Yield from `iterable`, charging the time spent waiting in `next()` to `name`."""
        iterator = iter(iterable)
        while True:
            with self.phase(name):
                try:
                    item = next(iterator)
                except StopIteration:
                    return
            yield item

    def wrap_loader(self, loader):
        """Charge a PyG NodeLoader's feature gathering (`filter_fn`) to `gather` (in this process)."""
        filter_fn = getattr(loader, "filter_fn", None)
        if filter_fn is not None:
            loader.filter_fn = _TimedCall(self, "gather", filter_fn)
        return loader

    def totals(self, wall_seconds: float | None = None) -> dict[str, float]:
        """Every phase in PHASES; `other` = wall time (default: since reset) minus the measured ones."""
        wall = self.clock() - self._started if wall_seconds is None else wall_seconds
        out = dict(self.seconds)
        out["other"] = max(wall - sum(out.values()), 0.0)
        return out


class _TimedCall:
    """`inner(...)` charged to `phase`. Picklable (a loader sent to spawned workers carries it): the
    copy drops the timer, as a worker's time is not on the training thread's clock anyway."""

    def __init__(self, timer: PhaseTimer | None, phase: str, inner):
        self.timer, self.phase, self.inner = timer, phase, inner

    def __call__(self, *args, **kwargs):
        if self.timer is None:
            return self.inner(*args, **kwargs)
        with self.timer.phase(self.phase):
            return self.inner(*args, **kwargs)

    def __getstate__(self) -> dict:
        return {"timer": None, "phase": self.phase, "inner": self.inner}


class AllReduceProbe:
    """The gradient all-reduce wait that backward could not hide.

    A hook after each parameter's gradient accumulation marks when the last gradient was ready;
    DDP launches the last bucket's all-reduce right then and `backward()` returns only once every
    bucket's all-reduce has finished. The gap is the exposed wait. Host clocks on the CPU; CUDA
    events on the backward stream on a GPU (NCCL's wait there is a stream wait).
    """

    def __init__(self, module: torch.nn.Module, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self._last_ready: float | torch.cuda.Event | None = None
        self._handles = [p.register_post_accumulate_grad_hook(self._ready)
                         for p in module.parameters() if p.requires_grad]

    def _ready(self, _param) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._last_ready = event
        else:
            self._last_ready = time.perf_counter()

    def backward(self, loss: torch.Tensor) -> float:
        """Run `loss.backward()`; return the exposed all-reduce wait in seconds (0 if unmeasured)."""
        self._last_ready = None
        loss.backward()
        ready = self._last_ready
        if ready is None:
            return 0.0
        if self.cuda:
            done = torch.cuda.Event(enable_timing=True)
            done.record()
            done.synchronize()
            return max(ready.elapsed_time(done) / 1000.0, 0.0)
        return max(time.perf_counter() - ready, 0.0)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def reduce_mean(phases: dict[str, float], world_size: int, device: torch.device) -> dict[str, float]:
    """The mean over ranks of each phase (collective: every rank calls it with the same keys)."""
    keys = list(phases)
    values = torch.tensor([phases[k] for k in keys], dtype=torch.float64, device=device)
    if world_size > 1 and dist.is_available() and dist.is_initialized():
        dist.all_reduce(values)
        values /= world_size
    return {k: float(v) for k, v in zip(keys, values.tolist())}


__all__ = ["MEASURED", "PHASES", "AllReduceProbe", "PhaseTimer", "reduce_mean"]
