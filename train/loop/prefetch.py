"""The next batches sampled, gathered and copied to the device while the current one computes (sampler.prefetch).

A thread runs the batch pipeline (sampler, feature gather, copy to the device) up to `depth` batches ahead
of the training step. On a GPU it works on a side CUDA stream, so its kernels and copies overlap the step's;
the step's stream waits for each batch's event before reading it, and the batch's tensors are marked as used
there (`record_stream`), so the allocator does not hand their memory out while the step still reads them.
The side stream starts after the training thread's work so far and is drained when the loop ends, so the
sampler's state (its node map) is never used by two streams at once.

Results equal the serial order's: batches come out in order, and the thread draws from no random generator
the step draws from. The one draw of the pipeline from the global generator (a DataLoader's base seed when its
iterator starts) is made by the first batch, taken on the calling thread before the thread starts, as the
serial order makes it; a sampler that draws from the global generator on every batch (PyG's native sampler
without worker processes) is never prefetched (`SamplingPlan.prefetch_safe`).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator

import torch

_DONE = object()  # the pipeline has no more batches
_POLL_SECONDS = 0.1  # how often a blocked producer checks whether the consumer has gone


class _Failure:
    """An exception raised in the pipeline, re-raised on the consumer's thread."""

    def __init__(self, error: BaseException):
        self.error = error


def _on_device(batch, device: torch.device):
    """The batch's copy to the GPU, made on the producer's stream (the step's `batch.to` then finds it there)."""
    return batch.to(device, non_blocking=True) if device.type == "cuda" else batch


def _tensors(batch) -> list[torch.Tensor]:
    return [value for _key, value in batch if isinstance(value, torch.Tensor)]


class Prefetcher:
    """Iterate over `batches` with up to `depth` of them prepared ahead on a thread (depth 0: serially).

    Use as a context manager (or call `close`): leaving early stops the thread and closes `batches`.
    """

    def __init__(self, batches: Iterator, depth: int, device: torch.device):
        self.batches, self.depth, self.device = batches, int(depth), torch.device(device)
        self._queue: queue.Queue = queue.Queue(maxsize=max(self.depth, 1))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._first = None
        self._exhausted = False  # the last batch was handed out (or the pipeline failed)
        self._cuda = self.device.type == "cuda"
        self._stream = torch.cuda.Stream(self.device) if self._cuda and self.depth else None
        if self.depth:
            # The first batch on this thread, as the serial order takes it (see the module's docstring).
            self._first = next(self.batches, _DONE)
            if self._stream is not None:  # the side stream starts after this thread's work so far (the first batch)
                self._stream.wait_stream(torch.cuda.current_stream(self.device))
            if self._first is not _DONE:
                self._thread = threading.Thread(target=self._produce, name="batch-prefetch", daemon=True)
                self._thread.start()

    # ---- the producer thread -------------------------------------------------------------------
    def _produce(self) -> None:
        try:
            if self._cuda:
                torch.cuda.set_device(self.device)  # the current device is per thread
            while not self._stop.is_set():
                with torch.cuda.stream(self._stream) if self._cuda else contextlib.nullcontext():
                    item = next(self.batches, _DONE)
                    if item is not _DONE:
                        item = _on_device(item, self.device)
                        event = torch.cuda.Event() if self._cuda else None
                        if event is not None:
                            event.record(self._stream)
                        item = (item, event)
                if not self._put(item) or item is _DONE:
                    return
        except BaseException as error:  # noqa: BLE001 - handed to the consumer, which re-raises it
            self._put(_Failure(error))
        finally:
            close = getattr(self.batches, "close", None)
            if close is not None:
                close()

    def _put(self, item) -> bool:
        """Hand `item` over, unless the consumer has gone; False then."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    # ---- the consumer --------------------------------------------------------------------------
    def __iter__(self) -> "Prefetcher":
        return self

    def __next__(self):
        if not self.depth:
            return next(self.batches)  # serially: the caller copies it, as without a prefetcher
        if self._exhausted:
            raise StopIteration
        if self._first is not None:
            first, self._first = self._first, None
            if first is not _DONE:
                return first
            self._exhausted = True
            raise StopIteration
        item = self._queue.get()
        if item is _DONE or isinstance(item, _Failure):
            self._exhausted = True
            self._thread.join()
            if item is _DONE:
                raise StopIteration
            raise item.error
        batch, event = item
        if event is not None:
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(event)
            for tensor in _tensors(batch):
                if tensor.is_cuda:
                    tensor.record_stream(stream)
        return batch

    def close(self) -> None:
        """Stop the thread (it finishes the batch in hand, then closes the pipeline), or close the pipeline."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            if self._stream is not None:  # what the thread launched is done before anyone reuses the sampler
                self._stream.synchronize()
            return
        close = getattr(self.batches, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> "Prefetcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

