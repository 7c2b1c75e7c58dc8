"""After the run: every node's prediction and embedding from a trained run, written as memory-mappable rows.

`python -m train predict --run-dir RUN` (and `make predict RUN=...`) loads the run's graph (or another of the same
shape, through `data.*` overrides), rebuilds the model from the run's checkpoint record, loads `model.pt`, and
runs the exact layer-wise pass (train/loop/evaluate.py `LayerWisePass`) on every rank, as `fit`'s evaluation
does, over all nodes (a typed graph: the target type's). Each rank computes its contiguous share of the nodes and
writes those rows into files that rank 0 preallocated: nothing is gathered on one rank.

What is written (`RUN/predictions/` unless --out), row i = node i:
- node task: `classes.npy` (int64, the argmax; for multi-label targets, absent), `probabilities.npy` (float32
  [N, C]: softmax over the classes, or each task's sigmoid for multi-label targets), `embeddings.npy` (float32
  [N, H]: the last hidden layer, or `--layer K`'s);
- link task: `embeddings.npy`, the encoder's output rows the link head scores;
- `manifest.json`, written last: the run, the graph's fingerprint, and each file's shape, dtype and meaning. A
  folder without it is incomplete (a preempted or failed predict): predict is idempotent and simply reruns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data

from train.builtin_tasks import task_row
from train.cluster.distenv import DistEnv
from train.cluster.procgroup import process_group
from train.config import Config
from train.errors import EXIT_OK, EXIT_USER_ERROR, UserError, exit_status, leave_within
from train.graph.form import form_of
from train.graph.sampling.device_plan import plan_sampling
from train.graph.seeds import rank_shard, shard_sizes
from train.graph.sharing.shared_graph import shared_graphs
from train.graph.typed_meta import HeteroMeta, graph_meta
from train.loop.checkpoint import graph_fingerprint
from train.loop.evaluate import LayerWisePass
from train.loop.finished_run import RunRecord, read_record
from train.loop.rank0_writes import written_by_rank0
from train.loop.run import obtain_graph
from train.loop.tasks import Task, TaskParts, task_for
from train.models import LayerWise, ModelStep, layerwise
from train.storage.writes import atomic_write_text

MANIFEST = "manifest.json"
PREDICTIONS_DIR = "predictions"


@dataclass(frozen=True)
class Output:
    """One file of rows: its name, its width and dtype, and what it holds (the manifest's words)."""

    name: str
    width: int | None  # None: one value per row
    dtype: str
    holds: str


def outputs_for(classifies: bool, multilabel: bool, classes: int, hidden: int, layer: int) -> list[Output]:
    """The files a predict writes: a run that classifies nodes (its model's `classes` outputs) writes its classes
    and probabilities beside the embeddings (`hidden` wide); a run whose seeds are edges, the embeddings alone."""
    embedding = Output("embeddings.npy", hidden, "float32",
                       f"each node's embedding: the rows of hidden layer {layer} (0 is the first)"
                       if classifies else "each node's embedding: the encoder's output, which the link head scores")
    if not classifies:
        return [embedding]
    if multilabel:
        return [Output("probabilities.npy", classes, "float32", "each task's probability (sigmoid of its logit)"),
                embedding]
    return [Output("classes.npy", None, "int64", "each node's predicted class (the argmax of its logits)"),
            Output("probabilities.npy", classes, "float32", "each class's probability (softmax of the logits)"),
            embedding]


def told_once(env: DistEnv, check) -> None:
    """Run `check`, which every rank runs alike on the same graph: rank 0 tells its refusal, the others leave with
    the same status and say nothing, so the refusal is one message however many ranks there are."""
    try:
        check()
    except UserError:
        if env.is_main:
            raise
        raise SystemExit(EXIT_USER_ERROR) from None


def told_once_value(env: DistEnv, build):
    """`build()`'s value, a refusal told once as `told_once` tells it."""
    built = []
    told_once(env, lambda: built.append(build()))
    return built[0]


def check_shape(record: RunRecord, width: int, meta: HeteroMeta | None) -> None:
    """A graph of input `width` and types `meta` has the run's shape: the same input width and node types (its size
    may differ). Asked of the loaded graph by every rank, and of its planned size before a predict job is queued."""
    trained = record.in_channels
    if trained is not None and width != trained:
        raise UserError(f"the graph has {width} input features per node and the run's model was trained on "
                        f"{trained}: predict runs on the run's graph or one of the same shape (same features, "
                        "node and edge types); check the data.* overrides.")
    if record.meta is not None and (meta is None or meta.to_dict() != record.meta):
        raise UserError("the graph's node and edge types differ from the run's: predict runs on a graph with the "
                        "types the model was trained on.")


def check_graph_matches(record: RunRecord, data: Data) -> None:
    """The loaded graph predict runs on has the run's shape (check_shape)."""
    check_shape(record, form_of(data).feature_width(data), graph_meta(data))


class RowFiles:
    """The output files, preallocated by rank 0 as .npy (numpy.lib.format.open_memmap), then each rank's rows
    written in place: a rank opens them read-write as memory maps and fills its slice."""

    def __init__(self, directory: Path, outputs: list[Output], rows: int):
        self.directory, self.outputs, self.rows = directory, outputs, rows

    def preallocate(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / MANIFEST).unlink(missing_ok=True)  # the folder is incomplete until the manifest is back
        for out in self.outputs:
            shape = (self.rows,) if out.width is None else (self.rows, out.width)
            np.lib.format.open_memmap(self.directory / out.name, mode="w+", dtype=out.dtype, shape=shape).flush()

    def write(self, start: int, values: dict[str, torch.Tensor]) -> None:
        for out in self.outputs:
            rows = values[out.name].detach().cpu().numpy().astype(out.dtype, copy=False)
            target = np.load(self.directory / out.name, mmap_mode="r+")
            target[start : start + rows.shape[0]] = rows
            target.flush()
            del target


def row_values(logits: torch.Tensor, embeddings: torch.Tensor, outputs: list[Output],
               multilabel: bool) -> dict[str, torch.Tensor]:
    """Each file's rows of a chunk of nodes, from their logits (None for a link run) and embeddings."""
    values = {"embeddings.npy": embeddings.float()}
    names = {out.name for out in outputs}
    if "probabilities.npy" in names:
        logits = logits.float()
        values["probabilities.npy"] = torch.sigmoid(logits) if multilabel else torch.softmax(logits, dim=1)
    if "classes.npy" in names:
        values["classes.npy"] = logits.argmax(dim=1)
    return values


def classifies_nodes(config: Config) -> bool:
    """Whether the run's task classifies its seed nodes (its model's last layer gives each node's logits), or
    trains on edges (an encoder whose last layer gives the embeddings its head scores)."""
    return task_row(config.task.name).seeds == "nodes"


def predicted_nodes(data: Data) -> Tensor:
    """The nodes predict writes a row for, in row order: every node, or a typed graph's target type's (row i: the
    type's node i)."""
    meta = graph_meta(data)
    if meta is None:
        return torch.arange(form_of(data).num_nodes(data))
    start = meta.offsets[meta.target_index]
    return torch.arange(start, start + meta.counts[meta.target_index])


@dataclass(frozen=True)
class Prepared:
    """The run's model on this graph, and what predict reads of it."""

    task: Task
    api: LayerWise
    layer: int  # the hidden layer whose rows are the embeddings (a node task)


def prepared(config: Config, env: DistEnv, device: torch.device, data: Data, record: RunRecord,
             layer: int | None) -> Prepared:
    """The run's model built for `data` with its final weights, and its layer-wise API; `UserError` where the graph
    is not of the run's shape, the model has no per-layer API, or `layer` is not one of its hidden layers."""
    check_graph_matches(record, data)
    form = form_of(data)
    task = task_for(TaskParts(config, env, device, data, form))
    model = record.build(config, task, form.feature_width(data)).to(device)
    model.load_state_dict(record.weights)
    step = ModelStep(task.encoder(model), 0.0)
    step.eval()
    api, why_not = layerwise(step)
    if api is None:
        raise UserError(f"predict runs the exact layer-wise pass, and this model has no per-layer API ({why_not}); "
                        "docs/models.md says which models have one.")
    hidden_layers = api.num_layers - 1
    chosen = hidden_layers - 1 if layer is None else layer
    if classifies_nodes(config) and not 0 <= chosen < hidden_layers:
        raise UserError(f"--layer {layer} is not a hidden layer of this model: it has {hidden_layers} "
                        f"(0 to {hidden_layers - 1}; the last, {hidden_layers - 1}, is the default).")
    return Prepared(task, api, chosen)


def predict(config: Config, env: DistEnv, device: torch.device, data: Data, record: RunRecord, out_dir: Path,
            layer: int | None = None) -> dict:
    """Write every node's rows into `out_dir` (collective over all ranks); returns the manifest (on every rank)."""
    run = told_once_value(env, lambda: prepared(config, env, device, data, record, layer))
    api, chosen, form = run.api, run.layer, form_of(data)
    node_task = classifies_nodes(config)
    sampling = plan_sampling(run.task.graph, config.sampler, device, feature_dtype=config.data.feature_dtype)
    nodes = predicted_nodes(data)
    total = nodes.numel()
    multilabel = node_task and form.multilabel(data)
    width = api.widths[chosen] if node_task else api.widths[-1]
    outputs = outputs_for(node_task, multilabel, api.widths[-1], width, chosen)
    files = RowFiles(out_dir, outputs, total)
    written_by_rank0(env.is_main, files.preallocate)
    mine = rank_shard(nodes, env.rank, env.world_size)
    start = sum(shard_sizes(total, env.world_size)[: env.rank])
    with torch.no_grad():
        layers = LayerWisePass(api, run.task.graph, config, env, device, sampling,
                               keep_layer=chosen if node_task else None)
        if node_task:
            logits, embeddings = layers.last_rows(mine), layers.kept_rows(mine)
        else:
            logits, embeddings = None, layers.last_rows(mine)
    files.write(start, row_values(logits, embeddings, outputs, multilabel))
    dist.barrier()
    manifest = {"run": str(record.run_dir), "graph_fingerprint": graph_fingerprint(data), "task": config.task.name,
                "rows": total, "row": "row i is node i" + (" of the target type" if record.meta else ""),
                "files": {out.name: {"shape": [total] + ([] if out.width is None else [out.width]),
                                     "dtype": out.dtype, "holds": out.holds} for out in outputs}}
    written_by_rank0(env.is_main, lambda: atomic_write_text(out_dir / MANIFEST, json.dumps(manifest, indent=2) + "\n"))
    return manifest


def run_predict(config: Config, env: DistEnv, run_dir: Path, out_dir: Path, layer: int | None = None) -> dict:
    """`python -m train predict` on this rank: the run's record (a missing model.pt is one message, before the
    rendezvous), the process group, the graph as fit obtains it, then `predict`. Returns the manifest."""
    record = read_record(run_dir)
    with process_group(env, config.dist) as (_backend, device), shared_graphs():
        code = EXIT_OK
        try:
            manifest = predict(config, env, device, obtain_graph(config, env), record, out_dir, layer)
        except BaseException as exc:
            code = exit_status(exc)  # the one train/__main__.py gives it
            raise
        finally:  # the status is settled; the process group's teardown can hang
            leave_within(config.dist.exit_timeout_seconds, code, env.rank)
    return manifest
