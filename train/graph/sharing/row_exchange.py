"""Rows held by other ranks, fetched with three `all_to_all_single`s: counts, then ids, then rows (issue 40).

One home for every exchange of rows between ranks: the sharded features (train/graph/sharing/feature_store.py) and
the exact evaluation's hidden layers (train/loop/evaluate.py `fetch_rows`). `exchange_rows` is one round: each rank
says how many rows it asks of every other (and whether it still has requests of its own), sends the keys the owners
look up, and receives the rows, in its own order. A rank with nothing to ask still takes part: it answers.

`RowExchange` keeps a session of rounds on a process group of the fetch's own (so a fetch never queues behind DDP's
all-reduce, which runs on the default group in the step's thread), for callers whose ranks make different numbers of
fetches (uneven epochs, the last short batch, Join, a rank's share of an evaluation split, a link task's pairs):

* `fetch` makes one round as an active rank; any number per session, differing between ranks.
* `release` says this rank asks nothing more this session: a thread of the exchange keeps answering the others in
  rounds flagged inactive until a round where every rank is inactive, so this rank's own thread is free (to shadow
  DDP's all-reduce under Join, or to evaluate nothing). Every rank sees every flag, so all end on the same round.
* `close` ends the session on every rank alike: it waits for the answering thread (or answers itself, where
  `release` was not called: a stop at a step boundary, or a rank with no batch at all), then re-raises what the
  thread met. Every rank calls `close` once per session, from the same code path; so the sessions line up.

One thread at a time: the rounds of a session are issued by whichever thread runs the batches (the prefetch thread,
whose first batch the caller took before starting it; or the caller), then by the answering thread, started by the
last batch and joined by `close`. A second thread inside a round at once is a bug and raises (a lock taken without
waiting), so a collective can never be issued out of order on one rank.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor

Serve = Callable[[Tensor], Tensor]  # the keys other ranks asked of this one -> their rows, in that order


def exchange_rows(dest: Tensor, keys: Tensor, serve: Serve, row_shape: tuple[int, ...], dtype: torch.dtype,
                  world_size: int, device: torch.device, group=None, active: bool = True,
                  into: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, bool]:
    """One round: the rows of `keys` from the ranks `dest` names, in the order of `keys`. Collective over `group`.

    Args:
        dest: the rank that holds each requested row (int64, any device).
        keys: what that rank looks each row up by (its own row index, or a global id `serve` maps).
        serve: this rank's answer to the keys the others sent it (rows of `row_shape` and `dtype`).
        device: where the exchange's buffers live: the group's (the CPU for gloo, this rank's GPU for NCCL).
        active: whether this rank still has requests of its own this session (RowExchange's sessions).
        into: (out, places): write the row of keys[i] to out[places[i]] (on out's device) and return out, instead
            of a tensor of its own: one copy of the received rows, not two.

    Returns:
        The rows (on `device`, or `into`'s out) and whether every rank was inactive in this round.
    """
    dest = dest.to("cpu", torch.long)
    order = torch.argsort(dest, stable=True)
    send_keys = keys.to("cpu", torch.long)[order]
    counts = torch.bincount(dest, minlength=world_size)
    # Each rank sends every other its count and its flag; each receives all flags, so all agree on the end.
    send_counts = torch.stack([counts, torch.full_like(counts, int(active))], dim=1).reshape(-1)
    recv_counts = torch.empty_like(send_counts, device=device)
    dist.all_to_all_single(recv_counts, send_counts.to(device), group=group)
    recv_counts = recv_counts.view(world_size, 2).cpu()
    everyone_done = not bool(recv_counts[:, 1].any())
    send_split, recv_split = counts.tolist(), recv_counts[:, 0].tolist()
    wanted = torch.empty(sum(recv_split), dtype=torch.long, device=device)
    dist.all_to_all_single(wanted, send_keys.to(device), recv_split, send_split, group=group)
    reply = serve(wanted).to(device, dtype).reshape(-1, *row_shape)
    row_numel = math.prod(row_shape)
    out, places = into if into is not None else (torch.empty(dest.numel(), *row_shape, dtype=dtype, device=device),
                                                 torch.arange(dest.numel()))
    if not row_numel:  # rows of no values: nothing to move
        return out, everyone_done
    # The rows travel as bytes: the same bits whatever the dtype (gloo and NCCL both move uint8).
    raw = reply.contiguous().reshape(-1, row_numel).view(torch.uint8)
    got = torch.empty(dest.numel(), raw.size(1), dtype=torch.uint8, device=device)
    dist.all_to_all_single(got, raw, send_split, recv_split, group=group)
    rows = got.view(dtype).reshape(-1, *row_shape).to(out.device, non_blocking=True)
    out.index_copy_(0, places.to("cpu", torch.long)[order].to(out.device), rows)  # back in the asked order
    return out, everyone_done


class RowExchange:
    """Sessions of `exchange_rows` rounds on a process group of their own (see the module's docstring).

    Args:
        group: the fetch's own process group (`fetch_group`), or None: the default group.
        world_size: the group's size (every rank of the job).
        device: where the exchange's buffers live (the CPU for gloo, this rank's GPU for NCCL).
    """

    def __init__(self, group, world_size: int, device: torch.device):
        self.group, self.world_size, self.device = group, world_size, torch.device(device)
        self._round_lock = threading.Lock()
        self._answering: threading.Thread | None = None
        self._answer_error: BaseException | None = None
        self._released = False  # this rank asks nothing more in the session
        self._serving: tuple[Serve, tuple[int, ...], torch.dtype] | None = None
        self.rounds = 0  # rounds made by this rank (the bench and the tests count them)

    def serve_with(self, serve: Serve, row_shape: tuple[int, ...], dtype: torch.dtype) -> None:
        """What this rank answers with in every round: its rows, their shape and dtype (alike on every rank)."""
        self._serving = (serve, tuple(row_shape), dtype)

    def _round(self, dest: Tensor, keys: Tensor, active: bool, into=None) -> tuple[Tensor, bool]:
        if self._serving is None:
            raise RuntimeError("RowExchange: serve_with() was not called before the first round")
        if not self._round_lock.acquire(blocking=False):
            raise RuntimeError("RowExchange: two threads of one rank fetch at once; the rounds would leave order")
        try:
            serve, row_shape, dtype = self._serving
            self.rounds += 1
            return exchange_rows(dest, keys, serve, row_shape, dtype, self.world_size, self.device, self.group, active,
                                 into)
        finally:
            self._round_lock.release()

    def fetch(self, dest: Tensor, keys: Tensor, into: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """The rows of `keys` from ranks `dest` (one round, this rank active), on the exchange's device (or written
        into `into`: exchange_rows)."""
        if self._released:
            raise RuntimeError("RowExchange: a fetch after release() in the same session")
        rows, _ = self._round(dest, keys, active=True, into=into)
        return rows

    def _answer_until_all_done(self) -> None:
        empty = torch.empty(0, dtype=torch.long)
        while True:
            _, everyone_done = self._round(empty, empty, active=False)
            if everyone_done:
                return

    def release(self) -> None:
        """This rank asks nothing more this session: a thread of the exchange answers the others until all are done."""
        if self._released:
            return
        self._released = True

        def answer() -> None:
            try:
                self._answer_until_all_done()
            except BaseException as error:  # noqa: BLE001 - re-raised by close() on the rank's own thread
                self._answer_error = error

        self._answering = threading.Thread(target=answer, name="row-exchange-answers", daemon=True)
        self._answering.start()

    def close(self) -> None:
        """End the session on this rank: wait for the answering thread (or answer now, where release() was not
        called), then re-raise what it met. Collective: every rank closes each session once."""
        try:
            if self._answering is not None:
                self._answering.join()
            elif self._serving is not None:
                self._answer_until_all_done()
            error, self._answer_error = self._answer_error, None
            if error is not None:
                raise error
        finally:
            self._answering, self._released = None, False

    def abandon(self) -> None:
        """Leave the session without answering (this rank is failing): the others' next round fails or times out
        and names this rank (train/loop/failure_report.py); an answering thread, a daemon, is left to end with it."""
        self._answering, self._released, self._answer_error = None, False, None

    @contextlib.contextmanager
    def session(self) -> Iterator["RowExchange"]:
        """`close` on a normal exit, `abandon` on an exception."""
        try:
            yield self
        except BaseException:
            self.abandon()
            raise
        self.close()


def fetch_group(timeout_seconds: float, backend: str | None = None):
    """The fetch's own process group, over every rank. Collective: every rank creates it once, at the same point."""
    return dist.new_group(backend=backend, timeout=timedelta(seconds=timeout_seconds))
