"""The per-step vote: all ranks stop after the same step, and checkpoint while they agree.

A stop signal reaches one process first (train/loop/stop_signals.py). At every step boundary
all ranks all-reduce (MAX) [stop signal, checkpoint due, some rank joined], so they stop after
the same step. Ranks that already ran out of batches (DDP `Join`, uneven shards) take part
through a join hook, so the vote never hangs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from train.loop.stop_signals import StopSignals


class StepAgreement:
    """One all-reduce (MAX) per step of [stop signal, checkpoint due, some rank joined].

    Rank 0 alone decides whether the time-based checkpoint is due (one clock, one decision).
    Inside an uneven epoch (a rank has joined) the time-based checkpoint waits for the epoch
    end, so every checkpoint is taken while all ranks hold the same model and optimizer.

    Everything it acts on comes in as arguments: `save(reason)` writes a checkpoint (collective),
    `seconds_since_save()` says how long ago the last one was, `on_stop()` tells the loop to stop
    at the next boundary, and `optimizer` is the one `sync_optimizer` brings back in step.

    A torch `Joinable` by duck typing (join_hook, join_device, join_process_group; `Join`
    sets `_join_config`), so that this module needs no torch at import time.
    """

    def __init__(self, signals: StopSignals, *, rank: int, device, optimizer, save: Callable[[str], object],
                 seconds_since_save: Callable[[], float], on_stop: Callable[[], None], epochs: int,
                 every_epochs: int = 0, every_minutes: float = 0.0, step_delay: float = 0.0):
        self.signals, self.rank, self.device, self.optimizer = signals, rank, device, optimizer
        self.save, self.seconds_since_save, self.on_stop = save, seconds_since_save, on_stop
        self.epochs, self.every_epochs = epochs, every_epochs
        self.every_seconds = every_minutes * 60.0
        self.step_delay = step_delay
        self.stop_signal = 0

    def vote(self, joined: bool) -> tuple[int, bool, bool]:
        due = self.rank == 0 and self.every_seconds > 0 and self.seconds_since_save() >= self.every_seconds
        flags = torch.tensor([self.signals.received, int(due), int(joined)], dtype=torch.int64, device=self.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        signum, any_due, any_joined = (int(v) for v in flags.tolist())
        if signum:
            self.stop_signal = signum
            self.on_stop()
        return signum, bool(any_due), bool(any_joined)

    def on_step_end(self) -> bool:
        """After each step on ranks that still have batches; True: leave the epoch now."""
        if self.step_delay > 0:
            time.sleep(self.step_delay)  # testing aid: a short run that lasts long enough to interrupt
        signum, due, joined = self.vote(joined=False)
        if signum:
            return True
        if due and not joined:
            self.save("time interval, trainer.checkpoint_every_minutes")
        return False

    def on_epoch_end(self, done: int) -> None:
        """After `done` epochs (all ranks, outside Join): the scheduled checkpoint, or one that is due."""
        signum, due, _ = self.vote(joined=False)
        scheduled = done == self.epochs or (self.every_epochs > 0 and done % self.every_epochs == 0)
        if scheduled or due or signum:
            why = "" if scheduled else (" (time interval)" if due else " (stop signal)")
            self.save(f"end of epoch {done - 1}{why}")

    # Joinable: ranks without batches left keep voting, and get the optimizer back in step.
    def join_hook(self, **kwargs) -> "_AgreementJoinHook":
        return _AgreementJoinHook(self)

    @property
    def join_device(self):
        return self.device

    @property
    def join_process_group(self):
        return dist.group.WORLD

    def sync_optimizer(self, is_last_joiner: bool) -> None:
        """After an uneven epoch, copy the optimizer state of a rank that ran every step.

        A rank that joined early skipped its last optimizer steps (DDP only shadows the
        gradient all-reduce); DDP copies the model back, this copies the optimizer state,
        so every rank, rank 0's checkpoint included, holds the same state again.
        """
        rank = self.rank
        flags = torch.tensor([0 if is_last_joiner else 1, rank if is_last_joiner else -1],
                             dtype=torch.int64, device=self.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        uneven, source = (int(v) for v in flags.tolist())
        if not uneven:
            return
        # On the CPU: pickled CUDA tensors would come back on the sender's device index, a neighbour's GPU
        # (--gpu-bind=none) or one that does not exist here; load_state_dict puts them on this rank's own.
        box = [on_cpu(self.optimizer.state_dict()) if rank == source else None]
        dist.broadcast_object_list(box, src=source, device=self.device)
        if rank != source:
            self.optimizer.load_state_dict(box[0])


def on_cpu(state):
    """`state` (nested dicts, lists and tuples) with every tensor copied to the CPU; the rest as it is."""
    if isinstance(state, torch.Tensor):
        return state.detach().cpu()
    if isinstance(state, dict):
        return {key: on_cpu(value) for key, value in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(on_cpu(value) for value in state)
    return state


class _AgreementJoinHook:
    """StepAgreement's torch `JoinHook` (duck-typed): what a rank without batches does each step."""

    def __init__(self, agreement: StepAgreement):
        self.agreement = agreement

    def main_hook(self) -> None:
        self.agreement.vote(joined=True)  # matches on_step_end's vote of the ranks still training

    def post_hook(self, is_last_joiner: bool) -> None:
        self.agreement.sync_optimizer(is_last_joiner)
