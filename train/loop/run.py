"""One training run from start to end, in named steps: prepare, resume, train, then stop or finish.

`run_fit` is what `python -m train fit` runs once config and environment are resolved. Stop
signals are caught from the first moment (train/loop/stop_signals.py); a failure on any rank
ends this one within dist.collective_timeout_seconds, with a message naming the rank that
failed where it can be known (train/loop/failure_report.py). A file system that fails one of the
run's files ends every rank alike (train/loop/rank0_writes.py): rank 0 names the file, the room and
the last good checkpoint (train/storage/faults.py), and the status is EXIT_STORAGE. The epochs
themselves are the `Trainer`'s (train/loop/fit.py).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import io
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist
import yaml
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.data import Data

from train.cluster.distenv import DistEnv
from train.cluster.procgroup import process_group
from train.config import Config, DataConfig
from train.errors import EXIT_FAILED, EXIT_STORAGE, EXIT_USER_ERROR, AnotherRanksError, UserError, leave_within
from train.graph.datasets.kinds import DATASETS
from train.graph.datasets.loading import load_graph, prepare_dataset
from train.graph.datasets.synthetic import GENERATOR_KEYS
from train.graph.form import form_of
from train.graph.sampling.device_plan import FEATURE_DTYPES
from train.graph.sharing.feature_layout import LayoutChoice, resolved_layout
from train.graph.sharing.feature_shards import obtain_graph_with_features
from train.graph.sharing.shared_graph import shared_graphs
from train.loop.checkpoint import CHECKPOINT_DIR, Checkpointer, graph_fingerprint, list_checkpoints
from train.loop.failure_report import announce, default_store, report_failure, tell_once, wait_for_reports
from train.loop.fit import FitResult, Trainer
from train.loop.numerics import set_gpu_numerics
from train.loop.rank0_writes import written_by_rank0
from train.loop.report import write_report
from train.loop.rundir import decide, job_identity, write_identity
from train.loop.scores import final_line
from train.loop.step_vote import StepAgreement
from train.loop.stop_signals import STOP_SIGNALS, STOPPED, StopSignals, leave_in_order, signal_name, stop_outcome
from train.loop.tasks import prepared_graph
from train.models import batch_norms, graph_edge_values
from train.plan.memory_figures import plan_figures
from train.plan.sharded import node_layout
from train.storage.faults import StorageError, StorageFault, storage_message
from train.storage.writes import atomic_write, atomic_write_text, guarded

# The statuses after which every rank leaves in order, rank 0 last with the status (stop_signals.leave_in_order).
AGREED_ENDS = (*STOPPED, EXIT_STORAGE)


def run_dir(config: Config, env: DistEnv) -> Path:
    """The run directory `rundir.decide` gives; without output.dir rank 0 decides (it reads runs/ and the clock)
    and every rank takes its answer. Collective unless output.dir is set."""
    chosen = [None, None]
    if env.is_main or config.output.dir:
        found, note = decide(config.output.dir, env)
        chosen = [str(found), note]
    if not config.output.dir:
        dist.broadcast_object_list(chosen, src=0)
    if env.is_main and chosen[1]:
        print(chosen[1], flush=True)
    return Path(chosen[0])


def obtain_graph(config: Config, env: DistEnv) -> Data:
    """Exactly one process prepares (downloads/processes) a dataset; the others wait, then load.

    data.share=node: each node's local rank 0 loads it (and a link task splits its edges: graph_loader) and the
    node's ranks map that one copy (train/graph/sharing/shared_graph.py); process: every rank loads its own.
    `graph_csc(data)` holds the sampler's CSC. data.features=sharded: that copy holds the node's own feature rows
    only, the others' fetched (train/graph/sharing/feature_shards.py).
    All ranks meet after preparing and again after loading, under data.load_timeout_seconds: a node that
    loads minutes after the others keeps them waiting there, not in the default group's next collective
    (DDP's first broadcast), whose dist.collective_timeout_seconds would end the job.
    A full node-local directory on one node (the shared graph's segments) ends every rank alike: the ranks meet with
    their storage faults, and all raise the first one.
    """
    with loading_barrier(env, config.data.load_timeout_seconds) as all_meet:
        if env.is_main:
            prepare_dataset(config.data, env.data_dir)
        all_meet()
        data, fault = None, None
        try:
            data = obtain_graph_with_features(config.data, env, graph_loader(config, env),
                                              features_choice(config, env, gpus=on_gpus()),
                                              collective_timeout_seconds=config.dist.collective_timeout_seconds,
                                              dtype=FEATURE_DTYPES[config.data.feature_dtype],
                                              load_own=own_rows_loader(config, env))
        except StorageError as exc:
            fault = exc.fault
        all_meet(fault)
    return data


def on_gpus() -> bool:
    """Whether the ranks train on GPUs (the default group's backend is NCCL); none yet: a process of its own."""
    return dist.is_initialized() and dist.get_backend() == "nccl"


def features_choice(config: Config, env: DistEnv, gpus: bool) -> LayoutChoice:
    """data.features on this node: as asked, or for auto on several nodes the memory plan's decision against the
    node's own limit (train/plan/sharded.py node_layout, the one the plan makes for `make submit`). A plan that
    cannot be made keeps a copy per node and says why: the run's own checks then meet what stopped it."""
    asked = config.data.features
    if asked == "auto" and env.num_nodes > 1:
        try:
            return node_layout(config, env, gpus)
        except UserError as exc:
            return LayoutChoice("node", f"node: the memory plan could not be made ({exc}), so the features are not "
                                        "sharded")
    if asked == "auto":
        return LayoutChoice("node", "node: one node, nothing to shard over")
    return resolved_layout(asked, env.num_nodes, 0, 0, 0, 0, None, "")


@contextlib.contextmanager
def loading_barrier(env: DistEnv, timeout_seconds: float) -> Iterator[Callable[..., None]]:
    """A barrier of all ranks that waits up to `timeout_seconds`, on a gloo group of its own (whatever the
    default backend); gloo's monitored barrier names the ranks that did not arrive. `all_meet(fault)` also hands
    each rank's `StorageFault` (or None) to all, and every rank raises the first as a `StorageError`. Collective."""
    if env.world_size == 1:
        yield raise_first
        return
    timeout = datetime.timedelta(seconds=timeout_seconds)
    group = dist.new_group(backend="gloo", timeout=timeout)

    def all_meet(fault: StorageFault | None = None) -> None:
        dist.monitored_barrier(group=group, timeout=timeout, wait_all_ranks=True)
        faults: list = [None] * env.world_size
        dist.all_gather_object(faults, fault, group=group)
        raise_first(*faults)

    try:
        yield all_meet
    finally:
        dist.destroy_process_group(group)


def raise_first(*faults: StorageFault | None) -> None:
    """The first of the ranks' storage faults as a `StorageError`; nothing when there is none."""
    found = next((fault for fault in faults if fault is not None), None)
    if found is not None:
        raise StorageError(found)


def graph_loader(config: Config, env: DistEnv) -> Callable[[DataConfig], Data]:
    """How the process that loads the graph (a node's local rank 0, or each process) loads it: `load_graph` under
    this job's data root, then what the task makes of it (tasks.prepared_graph: a link task's edge split), so the
    node shares the graph its ranks train on. `own_rows_loader`: the same, with x only the node's own rows."""
    load = own_rows_loader(config, env)
    return lambda data_config: load(data_config, None)


def own_rows_loader(config: Config, env: DistEnv) -> Callable[[DataConfig, dict], Data]:
    """`graph_loader` for data.features=sharded where the kind reads only a node's own rows
    (train/graph/sharing/feature_shards.py): x holds only the rows `owned` names (load_graph's owned=; None: all)."""
    load = late_loader(config.data, env, partial(load_graph, data_dir=env.data_dir))
    return lambda data_config, owned: prepared_graph(config, load(data_config, owned=owned))


def late_loader(config: DataConfig, env: DistEnv, load: Callable[[DataConfig], Data]) -> Callable[[DataConfig], Data]:
    """Testing aid: `load`, data.load_delay_seconds later on node data.load_delay_node (as it is elsewhere)."""
    if config.load_delay_seconds <= 0 or env.node_rank != config.load_delay_node:
        return load

    def late(data_config: DataConfig, **kwargs) -> Data:
        time.sleep(config.load_delay_seconds)
        return load(data_config, **kwargs)

    return late


def settle_gradient_buckets(ddp: DistributedDataParallel, optimizer, num_features: int, device: torch.device,
                            edge_values: dict[str, torch.Tensor] | None = None) -> None:
    """One forward and backward pass on a one-node dummy input before the first real step.

    DDP lays its gradient buckets out anew after the first backward pass (in the order the
    gradients became ready). With 3 or more ranks the all-reduce sums each gradient in an
    order that depends on that layout, so a resumed run, whose first step would still use
    the initial layout, would end some ULPs away from an uninterrupted run. Settling the
    layout on every run, fresh or resumed, gives every real step the same layout. Collective
    (every rank calls it once); no optimizer step, the gradients are dropped. The graph's edge values go
    with it, as zero rows of their width (zero edges), so a model that reads them gets its input. Batch norms
    run in eval mode for it: their batch statistics refuse one row, and the dummy row must not move their running
    statistics (a resumed run's would differ from an uninterrupted run's).
    """
    x = torch.zeros(1, num_features, device=device)
    edge_index = torch.empty(2, 0, dtype=torch.long, device=device)
    edges = {name: torch.zeros(0, *value.shape[1:], device=device) for name, value in (edge_values or {}).items()}
    ddp.train()
    for _name, norm in batch_norms(ddp):
        norm.eval()
    ddp(x, edge_index, **edges).sum().backward()
    ddp.train()
    optimizer.zero_grad(set_to_none=True)


def weights_digest(model: torch.nn.Module) -> str:
    """A SHA-256 over every parameter and buffer, in state-dict order (equal weights, equal digest)."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def run_fit(config: Config, env: DistEnv) -> int:
    """Train under the process group; the exit status (train/errors.py) of this rank."""
    signals = StopSignals.shared().install()  # usually already installed by `python -m train fit`
    signals.rank = env.rank
    leaving = config.dist.exit_timeout_seconds
    with process_group(env, config.dist) as (backend, device), shared_graphs():
        store = default_store()  # kept beyond the process group, for leave_in_order and wait_for_reports
        announce(store, env.rank)  # where it runs: a survivor names the node of a rank that went silent
        code = EXIT_FAILED  # a traceback's status (train/__main__.py), until the run says otherwise
        try:
            code = _run(config, env, backend, device, signals)
        except UserError as exc:  # told once for the job: by this rank, or by the rank that found it first
            signals.quiet = True  # the launcher's SIGTERM to the others is no news
            tell_once(str(exc), env, exc.rank if isinstance(exc, AnotherRanksError) else None)
            code = EXIT_USER_ERROR
        except Exception as exc:
            said = report_failure(exc, env, figures=partial(plan_figures, config, env.num_nodes, env.world_size,
                                                            gpus=device.type == "cuda"))
            if said is None:
                raise  # the failure happened on this rank: its traceback says what
            signals.quiet = True
            print(said[0], file=sys.stderr, flush=True)
            code = EXIT_USER_ERROR if said[1] else EXIT_FAILED
            return code
        finally:  # the status is settled; the teardown that follows (process group, models) can hang
            leave_within(leaving, code, env.rank)
    if code == EXIT_USER_ERROR:  # the process group is gone: a rank waiting on this one fails now and reads why
        wait_for_reports(store, env)
        return code
    return leave_in_order(code, env.rank, env.world_size, store, leaving / 2) if code in AGREED_ENDS else code


def loaded_line(name: str, data: Data) -> str:
    """What the run loaded, in one line (rank 0): a graph of your own is known by these figures, not the config's."""
    form = form_of(data)
    edges = form.structure(data)[1].numel()
    splits = "/".join(f"{form.split_nodes(data, split).numel():,}" for split in ("train", "val", "test"))
    return (f"graph {name}: {form.num_nodes(data):,} nodes, {edges:,} edges, {form.feature_width(data)} features, "
            f"{form.num_classes(data)} classes; train/val/test nodes {splits}")


def recorded_config(config: Config) -> dict:
    """The config as the run directory records it (config.yaml): a loaded graph's without the synthetic generator's
    keys, which it did not read (its own figures: loaded_line)."""
    recorded = config.to_dict()
    kind = DATASETS.get(config.data.name)
    if kind is not None and kind.kind != "generated":
        for key in set(GENERATOR_KEYS) - set(kind.reads):
            recorded["data"].pop(key, None)
    return recorded


@dataclass
class Run:
    """What the steps of one run share: where it writes, the rank's trainer and its checkpoints."""

    config: Config
    env: DistEnv
    out_dir: Path
    trainer: Trainer
    checkpointer: Checkpointer


def _run(config: Config, env: DistEnv, backend: str, device: torch.device, signals: StopSignals) -> int:
    out_dir = run_dir(config, env)
    try:
        run = prepare(config, env, out_dir, backend, device)
        resume(run)
        agreement, result = train(run, signals)
        return stop(run, agreement, result) if result.stopped else finish(run, result)
    except StorageError as exc:  # agreed by every rank (rank0_writes, loading_barrier)
        return storage_stop(exc.fault, env, out_dir)


def storage_stop(fault: StorageFault, env: DistEnv, out_dir: Path) -> int:
    """A file system failed one of the run's files: rank 0 says which, where the run can go on from (the newest
    checkpoint: each is written whole or not at all) and what to do; EXIT_STORAGE on every rank."""
    if env.is_main:
        newest: list[Path] = []
        with contextlib.suppress(OSError):  # a failing file system may not even list the folder
            newest = list_checkpoints(out_dir / CHECKPOINT_DIR)
        checkpoint = str(newest[0]) if newest else None
        print(f"error: {storage_message(fault, str(out_dir), checkpoint)}", file=sys.stderr, flush=True)
    return EXIT_STORAGE


def prepare(config: Config, env: DistEnv, out_dir: Path, backend: str, device: torch.device) -> Run:
    """Say where each rank runs, load the graph, build the trainer and its checkpointer (nothing written yet)."""
    if env.is_main:
        print(f"run dir {out_dir}  world_size {env.world_size}  backend {backend}  device {device}", flush=True)
    # Every rank says where it runs, so a multi-node log shows the placement (and who is missing).
    # ... and which variables gave the rendezvous (enroot's PyTorch hook may set them too).
    print(f"rank {env.rank}/{env.world_size} on {os.uname().nodename} (node {env.node_rank}, "
          f"local rank {env.local_rank}, master {env.master_addr}:{env.master_port} "
          f"from {env.sources.get('master_addr')}/{env.sources.get('master_port')})", flush=True)
    # ... and which Python it runs: inside the image or on the host (bare mode) tells at a glance.
    print(f"rank {env.rank} runs {sys.executable} (torch {torch.__version__})", flush=True)
    if device.type == "cuda":  # before the first CUDA op of the model
        note = set_gpu_numerics(config.trainer.deterministic)
        if env.is_main:
            print(note, flush=True)
    data = obtain_graph(config, env)
    if env.is_main:
        print(loaded_line(config.data.name, data), flush=True)
    trainer = Trainer(config, env, device, data, out_dir)
    cfg = config.trainer
    checkpointer = Checkpointer(out_dir, env, trainer, trainer.rank_state, config=config.to_dict(),
                                fingerprint=graph_fingerprint(data), keep=cfg.keep_checkpoints, resume=cfg.resume,
                                model=trainer.model_description)
    return Run(config, env, out_dir, trainer, checkpointer)


def resume(run: Run) -> None:
    """Resume from a checkpoint if there is one (trainer.resume), then write the run directory. The sinks
    (metrics.jsonl) get the restored epochs from `Trainer.fit`.

    Only now: a refused run (data, checkpoint) leaves no run directory, and no config.yaml over another's.
    """
    env, out_dir, trainer = run.env, run.out_dir, run.trainer
    run.checkpointer.resume()

    def write() -> None:
        with guarded(out_dir):
            out_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out_dir / "config.yaml", yaml.safe_dump(recorded_config(run.config), sort_keys=False))
        if env.job_id and not run.config.output.dir:  # whose directory this is (train/loop/rundir.py)
            write_identity(out_dir, job_identity(env.job_id, env.cluster_name, env.submission_id))

    written_by_rank0(env.is_main, write)
    settle_gradient_buckets(trainer.ddp, trainer.optimizer, trainer.form.feature_width(trainer.data), trainer.device,
                            graph_edge_values(trainer.data))


def train(run: Run, signals: StopSignals) -> tuple[StepAgreement, FitResult]:
    """The epochs, with the per-step vote that checkpoints on schedule and stops all ranks together."""
    cfg, trainer = run.config.trainer, run.trainer
    agreement = StepAgreement(
        signals, rank=run.env.rank, device=trainer.device, optimizer=trainer.optimizer, save=run.checkpointer.save,
        seconds_since_save=run.checkpointer.seconds_since_save, on_stop=trainer.request_stop, epochs=cfg.epochs,
        every_epochs=cfg.checkpoint_every, every_minutes=cfg.checkpoint_every_minutes,
        step_delay=cfg.step_delay_seconds)
    trainer.joinables.append(agreement)
    result = trainer.fit(on_step_end=lambda _trainer, _record: agreement.on_step_end(),
                         on_epoch_end=lambda tr, _record: agreement.on_epoch_end(tr.state.epoch))
    return agreement, result


def stop(run: Run, agreement: StepAgreement, result: FitResult) -> int:
    """Stopped by a signal: checkpoint and say what happens next; EXIT_REQUEUE or EXIT_STOPPED."""
    env = run.env
    signum = agreement.stop_signal
    path = run.checkpointer.save(f"stop signal {signal_name(signum)}")
    code, next_step = stop_outcome(env.restart_count, run.config.trainer.max_restarts, env.job_id is not None,
                                   str(run.out_dir))
    if env.is_main:
        print(f"stopped in epoch {result.epoch} after step {result.step}: {signal_name(signum)}, "
              f"{STOP_SIGNALS[signum]}. Checkpoint {path}; {next_step}.", flush=True)
    return code


def finish(run: Run, result: FitResult) -> int:
    """All epochs done: the last checkpoint, the final weights, summary.json and the report."""
    env, out_dir, model = run.env, run.out_dir, run.trainer.model
    run.checkpointer.save("end of training")  # a no-op when the last epoch's checkpoint is this state
    digests: list = [None] * env.world_size
    dist.all_gather_object(digests, weights_digest(model))  # all ranks must end with the same weights
    summary = {**result.summary, "weights_sha256": digests[0], "weights_same_on_all_ranks": len(set(digests)) == 1}
    written_by_rank0(env.is_main, lambda: write_results(out_dir, model, summary, digests))
    return 0


def write_results(out_dir: Path, model: torch.nn.Module, summary: dict, digests: list[str]) -> None:
    """Rank 0: the final weights, summary.json and the report (curves.png), each line of the log said once."""
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buffer)
    atomic_write(out_dir / "model.pt", buffer.getvalue())  # the final weights, plain torch.load-able
    atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    print(final_line(summary), flush=True)
    same = summary["weights_same_on_all_ranks"]
    print(weights_line(out_dir / "model.pt", digests), file=sys.stdout if same else sys.stderr, flush=True)
    write_report(out_dir)  # curves.png and a summary table; a failure to draw only warns, a storage fault raises


def weights_line(path: Path, digests: list[str]) -> str:
    """Where the final weights are and their SHA-256 (summary.json holds it whole); ranks that differ are a bug."""
    if len(set(digests)) == 1:
        return f"final weights {path} (sha256 {digests[0][:16]}, the same on all {len(digests)} ranks)"
    apart = ", ".join(f"rank {rank} {digest[:16]}" for rank, digest in enumerate(digests) if digest != digests[0])
    return (f"warning: the ranks ended with different weights: rank 0 {digests[0][:16]}, {apart}; "
            f"{path} holds rank 0's. Please report this as a bug.")
