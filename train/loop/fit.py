"""The training loop of one rank: `Trainer` runs the epochs of distributed GNN training with neighbour sampling.

The loop is the seed's (DDP, Adam, sampled mini-batches, a barrier per epoch) with what a
long multi-node run needs: seeds split without loss, per-step seeding so a run is
reproducible, and evaluation sharded over all ranks. It emits a record per step and per epoch
(train/loop/records.py) to the sinks of train/loop/outputs.py (metrics.jsonl, the progress display). The run
around it (process group, run directory, checkpoints, stop and finish) is train/loop/run.py.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.data import Data

from train import heap
from train.cluster.distenv import DistEnv
from train.config import Config
from train.graph.form import form_of
from train.graph.sampling.device_plan import (
    FreeGpuMemory,
    least_free_gpu_memory,
    nccl_buffer_bytes,
    plan_sampling,
)
from train.graph.sampling.samplers import prefetch_safe
from train.graph.seeds import derive_seed, lone_seed_ranks, without_lone_seed
from train.loop.outputs import Outputs
from train.loop.prefetch import Prefetcher
from train.loop.records import EpochRecord, StepRecord, split_figures
from train.loop.rng import ProcessRng
from train.loop.scores import score_summary
from train.loop.tasks import TaskParts, task_for
from train.loop.timing import AllReduceProbe, PhaseTimer, reduce_mean
from train.models import ModelStep, graph_edge_width, resolve
from train.plan.terms import gpu_working_bytes, graph_size_of


@dataclass
class EpochStats:
    """Sums over this rank's batches; all-reduced before anything is reported."""

    loss_sum: float = 0.0
    correct: int = 0
    seeds: int = 0
    steps: int = 0
    scored: int = 0  # what `correct` is out of: the seeds, or the labelled tasks of multi-label seeds

    def reduce(self, device: torch.device) -> "EpochStats":
        totals = torch.tensor([self.loss_sum, self.correct, self.seeds, self.scored], dtype=torch.float64,
                              device=device)
        dist.all_reduce(totals)
        return EpochStats(float(totals[0]), int(totals[1]), int(totals[2]), self.steps, int(totals[3]))

    @classmethod
    def restored(cls, state: dict) -> "EpochStats":
        """From a checkpoint; one written before `scored` was kept scored every seed."""
        return cls(**{"scored": state["seeds"], **state})


@dataclass
class RunState:
    """What a checkpoint must carry to continue exactly where the run stopped."""

    epoch: int = 0  # the epoch in progress (or next to start)
    step: int = 0  # batches of `epoch` already done on this rank
    stats: EpochStats = field(default_factory=EpochStats)
    history: list[dict] = field(default_factory=list)

    def state_dict(self) -> dict:
        """The part every rank holds alike: the epoch in progress and the metrics so far."""
        return {"epoch": self.epoch, "history": self.history}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.history = state["epoch"], list(state["history"])


class RankState:
    """This rank's own part of a checkpoint: its step in the epoch, its statistics so far, its RNGs."""

    def __init__(self, run: RunState, rng: ProcessRng):
        self.run, self.rng = run, rng

    def state_dict(self) -> dict:
        return {"step": self.run.step, "stats": dataclasses.asdict(self.run.stats), "rng": self.rng.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.run.step, self.run.stats = state["step"], EpochStats.restored(state["stats"])
        self.rng.load_state_dict(state["rng"])


@dataclass(frozen=True)
class FitResult:
    """How `Trainer.fit` ended: all epochs done, or stopped at a step boundary that all ranks agreed on."""

    stopped: bool
    epoch: int  # the epoch in progress when stopped, else the number of epochs done
    step: int  # batches of `epoch` done on this rank when stopped, else 0
    summary: dict  # `Trainer.summary()`: the run's figures so far


def wrap_ddp(module: torch.nn.Module, device: torch.device) -> DistributedDataParallel:
    """DDP bound to this rank's own GPU (device_ids=[its index]: the reducer's buckets and its outputs there), or
    to none on the CPU (gloo)."""
    return DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)


class Trainer:
    """Owns the model, optimizer and data of one rank; `fit` runs the epochs."""

    def __init__(self, config: Config, env: DistEnv, device: torch.device, data: Data, out_dir: Path):
        self.config, self.env, self.device, self.data, self.out_dir = config, env, device, data, out_dir
        spec = resolve(config.model)  # checked before the rendezvous too (train/cli/preflight.py)
        spec.check_edges(graph_edge_width(data))  # model.kwargs.edge_dim against the graph's edge features
        self.form = form_of(data)  # what the graph answers: its widths, splits and batches (graph/form.py)
        # what the run trains for (task.name): its seeds, batches, loss and figures (train/loop/tasks/)
        self.task = task_for(TaskParts(config, env, device, data, self.form))
        width = self.form.feature_width(data)
        self.model = self.task.build_model(spec, width).to(device)
        self.model_description = self.task.describe_model(spec, width)  # what checkpoints record
        # how a batch reaches the model (models/step.py)
        self.step = ModelStep(self.task.encoder(self.model), config.model.input_dropout)
        self.ddp = wrap_ddp(self.task.ddp_module(self.step, self.model), device)
        self.eval_note = self.task.eval_note(self.step)  # why the evaluation samples where eval.mode=full
        # A batch of one node is one row, on which batch norm cannot train (torch refuses it): as PyG's loaders do
        # with drop_last, a rank whose share of the epoch would end on one leaves that node out (lone_seed_note).
        self.drops_lone_seed = self.task.seed_is_one_row and bool(self.step.one_row_norm)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.optim.lr,
                                          weight_decay=config.optim.weight_decay)
        self.state = RunState()
        self.rank_state = RankState(self.state, ProcessRng())  # this rank's own part of a checkpoint
        self.stop_requested = False  # set by `request_stop` (the per-step vote); checked at step boundaries
        self.joinables: list = []  # more Joinables that take part in every step (step_vote.StepAgreement)
        # sampler.device: where batches are sampled; the graph on the GPU only beside the working sets the plan counts
        size, ranks = graph_size_of(data), env.world_size
        working = gpu_working_bytes(config, size, ranks) if device.type == "cuda" else 0
        with_features = gpu_working_bytes(config, size, ranks, rows_on_gpu=True) if device.type == "cuda" else 0
        self.sampling = plan_sampling(self.task.graph, config.sampler, device, free_gpu_bytes=self.free_gpu(),
                                      working_bytes=working, feature_dtype=config.data.feature_dtype,
                                      with_features=with_features)
        self.timer = PhaseTimer(device)  # where each epoch's time goes (train/loop/timing.py)
        self.allreduce_probe = AllReduceProbe(self.model, device)
        self.outputs = Outputs(config, env, out_dir)  # rank 0's sinks: metrics.jsonl, the progress display, ...
        if self.sampling.each_rank:  # each rank decides on its own GPU's free memory: each one says what and why
            print(f"rank {env.rank}: {self.sampling.note}", flush=True)
        if env.is_main:
            params = sum(p.numel() for p in self.model.parameters())
            print(f"model {spec.class_path} ({params:,} parameters); model.trim: "
                  f"{self.step.trim_mode if config.model.trim else 'off (every sampled row in every layer)'}",
                  flush=True)
            for note in (None if self.sampling.each_rank else self.sampling.note, self.eval_note,
                         self.lone_seed_note()):
                if note:
                    print(note, flush=True)

    def free_gpu(self) -> FreeGpuMemory | None:
        """The least free GPU memory of the ranks, which every rank places the graph by (None: no GPU placement): what
        CUDA says, less what NCCL will take for the job's collectives (as the plan sets it aside)."""
        if self.device.type != "cuda" or self.config.sampler.device == "cpu":
            return None
        free = torch.cuda.mem_get_info(self.device)[0] - nccl_buffer_bytes(self.env.world_size,
                                                                           self.env.local_world_size)
        return least_free_gpu_memory(free, self.device)

    # ---- state (train/loop/checkpoint.py saves and restores it) -------------------------------------
    def state_dict(self) -> dict:
        """What every rank holds alike: model, optimizer, epoch, history, and the seeds batches come from."""
        seed = self.config.trainer.seed
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), **self.state.state_dict(),
                "seeds": {"shuffle": seed, "sampler": derive_seed(seed, 1)}}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.state.load_state_dict(state)

    def request_stop(self) -> None:
        """Stop at the next step boundary (all ranks agreed: train/loop/step_vote.py)."""
        self.stop_requested = True

    # ---- batches -------------------------------------------------------------------------------
    def epoch_shard(self, epoch: int) -> torch.Tensor:
        """This rank's seeds of the epoch, in order: nodes, or the training edges' ids (the task's); without a last
        batch of one seed where the model cannot train on it (drops_lone_seed)."""
        shard = self.task.epoch_shard(epoch)
        return without_lone_seed(shard, self.config.sampler.batch_size) if self.drops_lone_seed else shard

    def lone_seed_note(self) -> str:
        """The log's line when some rank leaves a lone last seed out of each epoch ('' when none does)."""
        if not self.drops_lone_seed:
            return ""
        total, batch = self.task.epoch_items().numel(), self.config.sampler.batch_size
        ranks = lone_seed_ranks(total, self.env.world_size, batch)
        if not ranks:
            return ""
        return (f"batch norm ({self.step.one_row_norm}) cannot train on a batch of one node, and {total} training "
                f"nodes over {self.env.world_size} rank(s) in batches of {batch} (sampler.batch_size) end each epoch "
                f"on one on rank(s) {', '.join(map(str, ranks))}: that node sits the epoch out (another one each "
                f"epoch, as shuffled); a sampler.batch_size that leaves no batch of one trains every node")

    def batches(self, seeds: torch.Tensor, epoch: int):
        return self.task.batches(seeds, epoch, self.sampling, self.step, self.timer)

    def fetched_batches(self, batches, count: int):
        """The epoch's `count` batches, then `release_fetches`: where each batch's rows are fetched from the other
        nodes (data.features=sharded), this rank then answers the others' fetches on a thread of the exchange, so
        its own thread is free to shadow DDP's all-reduce under Join while ranks with more batches go on. The
        fetches are issued by the one thread that runs these batches (the prefetch thread, or this one), the
        answers by the exchange's thread after it; the epoch's session ends them on every rank alike."""
        yield from itertools.islice(batches, max(count, 0))
        self.sampling.release_fetches()

    def prefetch_depth(self) -> int:
        """Batches prepared ahead (sampler.prefetch), or 0 where the sampler draws from the step's generator."""
        cfg = self.config.sampler
        if not self.step.uses_graph:
            return cfg.prefetch  # features only: no sampler, no random draws
        return cfg.prefetch if prefetch_safe(self.sampling.batch_sampler(cfg.num_neighbors), cfg.num_workers) else 0

    def steps_in_epoch(self, epoch: int) -> int:
        steps = math.ceil(self.epoch_shard(epoch).numel() / self.config.sampler.batch_size)
        cap = self.config.trainer.max_steps_per_epoch
        return min(steps, cap) if cap > 0 else steps

    # ---- one epoch -----------------------------------------------------------------------------
    def train_epoch(self, epoch: int, on_step_end=None) -> EpochStats:
        """Train from `state.step` to the end of the epoch (or until a stop is requested).

        After each step its record goes to the sinks, then to `on_step_end(trainer, record)`; True: leave the epoch.
        """
        self.ddp.train()
        total = self.steps_in_epoch(epoch)
        shard = self.epoch_shard(epoch)[self.state.step * self.config.sampler.batch_size :]
        stats = self.state.stats
        batches = self.fetched_batches(self.batches(shard, epoch), total - self.state.step)
        with self.sampling.fetch_session(), Join([self.ddp, *self.joinables]), \
                Prefetcher(batches, self.prefetch_depth(), self.device) as batches:
            for batch in self.timer.iterate(batches, "sample"):  # ranks may have one batch more or less than others
                if self.state.step >= total:
                    break
                self._maybe_fail()
                # Dropout draws from the global RNG: seed it per step so a resumed run draws the same.
                torch.manual_seed(derive_seed(self.config.trainer.seed, epoch, self.state.step, self.env.rank))
                with self.timer.phase("copy"):
                    batch = batch.to(self.device, non_blocking=True)
                with self.timer.phase("compute"):
                    self.optimizer.zero_grad(set_to_none=True)
                    result = self.task.forward(self.ddp, batch)
                    allreduce_wait = self.allreduce_probe.backward(result.loss)  # loss.backward(), timed
                    self.optimizer.step()
                    loss_value = float(result.loss.detach())
                self.timer.move(allreduce_wait, "compute", "allreduce")
                stats.loss_sum += loss_value * result.seeds
                correct, scored = self.task.counts(result)
                stats.correct += correct
                stats.scored += scored
                stats.seeds += result.seeds
                stats.steps += 1
                self.state.step += 1
                record = StepRecord(epoch, self.state.step, total, loss_value, result.seeds)
                self.outputs.step(record)
                if on_step_end is not None and on_step_end(self, record):
                    break
        return stats

    def _maybe_fail(self) -> None:
        """Testing aid: an injected error on one rank (trainer.fail_at_step / fail_rank)."""
        cfg = self.config.trainer
        if cfg.fail_at_step >= 0 and self.env.rank == cfg.fail_rank:
            global_step = sum(self.steps_in_epoch(e) for e in range(self.state.epoch)) + self.state.step
            if global_step >= cfg.fail_at_step:
                raise RuntimeError(f"injected failure on rank {self.env.rank} at step {global_step}")

    # ---- evaluation ----------------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        """Val and test figures on all ranks (train/loop/evaluate.py: full and exact, or sampled)."""
        return self.task.evaluate(self.step, self.model, self.sampling)

    # ---- the run -------------------------------------------------------------------------------
    def fit(self, on_step_end=None, on_epoch_end=None) -> FitResult:
        """The epochs from the run state on; each epoch's record goes to the sinks, then to
        `on_epoch_end(trainer, record)`."""
        self.outputs.start([EpochRecord.from_row(row) for row in self.state.history])
        try:
            while self.state.epoch < self.config.trainer.epochs:
                if self.stop_requested:  # agreed at the end of the previous epoch
                    return self._result(stopped=True)
                record = self.run_epoch(on_step_end)
                if record is None:
                    return self._result(stopped=True)
                self.outputs.epoch(record)
                if on_epoch_end is not None:
                    on_epoch_end(self, record)
            return self._result(stopped=False)
        finally:
            self.outputs.close()

    def run_epoch(self, on_step_end=None) -> EpochRecord | None:
        """Train the epoch in progress and evaluate when due: its record, alike on every rank (None: stopped)."""
        cfg = self.config.trainer
        epoch = self.state.epoch
        started = time.perf_counter()
        self.timer.reset()
        stats = self.train_epoch(epoch, on_step_end)
        if self.stop_requested:
            return None
        totals = stats.reduce(self.device)
        seconds = time.perf_counter() - started
        figures = {"val_acc": None, "test_acc": None}
        if (epoch + 1) % cfg.eval_every == 0 or epoch + 1 == cfg.epochs:
            with self.timer.phase("eval"):
                figures = self.evaluate()
        wall = time.perf_counter() - started  # training and evaluation; phases below add up to it
        phases = reduce_mean(self.timer.totals(wall), self.env.world_size, self.device)
        record = EpochRecord(
            epoch=epoch, loss=totals.loss_sum / max(totals.seeds, 1), train_acc=totals.correct / max(totals.scored, 1),
            **split_figures(figures), epoch_seconds=seconds,
            seeds_per_second=totals.seeds / seconds if seconds > 0 else None, world_size=self.env.world_size,
            phase_seconds=phases, wall_seconds=sum(phases.values()))
        dist.barrier()
        self.state.history.append(record.row())
        self.state.epoch, self.state.step, self.state.stats = epoch + 1, 0, EpochStats()
        return record

    def _result(self, stopped: bool) -> FitResult:
        return FitResult(stopped, self.state.epoch, self.state.step, self.summary())

    def summary(self) -> dict:
        history = self.state.history
        return {
            "epochs": len(history),
            **score_summary(history),  # the best-validation epoch's figures and the last evaluated ones
            "final_loss": history[-1]["loss"] if history else None,
            "mean_epoch_seconds": sum(r["epoch_seconds"] for r in history) / len(history) if history else None,
            "world_size": self.env.world_size,
            "device": self.device.type,  # cpu or cuda: what "per rank" means in the report
            "model": self.config.model.name,
            "model_class": self.model_description["class"],
            "model_trim": self.step.trim_mode if self.config.model.trim else "off",
            "eval_mode": "sampled" if self.eval_note else self.config.eval.mode,  # what the evaluation ran
            **({"eval_note": self.eval_note} if self.eval_note else {}),
            "dataset": self.config.data.name,
            "task": self.task.name,  # what the run trained for (task.name: train/loop/tasks/)
            "heap": heap.applied(),  # the C heap's settings (train/heap.py); None: not run by python -m train
        }


