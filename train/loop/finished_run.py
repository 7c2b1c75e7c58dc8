"""A finished run read back: its config, the model its checkpoints record, and its final weights.

The Python door after training (`train.load_run`), and what `predict` starts from. A run directory holds
`config.yaml` (the run's settings), `model.pt` (the final weights, a plain state dict) and `checkpoints/`, whose
newest intact file records the model's class, constructor arguments and, on a typed graph, the node and edge
types (`ModelSpec.describe`): enough to rebuild the model without the graph.

    >>> from train import load_run
    >>> run = load_run("runs/20261205-120000")
    >>> logits = run.model(x, edge_index)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from train.config import Config, load_config
from train.errors import UserError
from train.graph.typed_meta import HeteroMeta
from train.loop.checkpoint import CHECKPOINT_DIR, find_latest_valid
from train.loop.tasks import Task, task_class
from train.models import resolve

WEIGHTS = "model.pt"
CONFIG = "config.yaml"


@dataclass(frozen=True)
class RunRecord:
    """What a run directory says of its model: the config, the checkpoint's record of the model, the weights."""

    run_dir: Path
    config: Config
    description: dict  # ModelSpec.describe (and a link run's "head"), from the newest intact checkpoint
    weights: dict[str, torch.Tensor] = field(repr=False)

    @property
    def in_channels(self) -> int | None:
        """The input width the model was trained on (None: a typed model, whose widths are per node type)."""
        value = self.description.get("arguments", {}).get("in_channels")
        return value if isinstance(value, int) else None

    @property
    def meta(self) -> dict | None:
        """The typed graph's node and edge types the model was trained on (HeteroMeta.to_dict), or None."""
        return self.description.get("meta")

    def build(self, config: Config, task: Task, width: int) -> nn.Module:
        """The model as the run's task builds it on a graph of input width `width`; refused where the record
        differs (another width, other classes, other types)."""
        spec = resolve(config.model)
        described = task.describe_model(spec, width)
        if described != self.description:
            raise UserError(f"the model this graph would need ({described}) is not the run's ({self.description}): "
                            "predict runs on a graph of the run's shape (the same features, classes and types).")
        return task.build_model(spec, width)

    def standalone(self) -> nn.Module:
        """The model without a graph, from the record alone, with the final weights, in eval mode."""
        spec = resolve(self.config.model)
        arguments = self.description["arguments"]
        meta = HeteroMeta.from_dict(self.meta) if self.meta is not None else None
        model = task_class(self.config.task.name).model_from_record(spec, arguments["in_channels"],
                                                                    arguments["out_channels"], meta, self.description)
        model.load_state_dict(self.weights)
        return model.eval()


def read_record(run_dir: str | Path) -> RunRecord:
    """The record of the run in `run_dir`; `UserError` naming what is missing (no model.pt: the run has not
    finished; no intact checkpoint: the model's class and arguments are unknown)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"RUN={str(run_dir)!r} is not a run directory: give one of runs/ (each run's folder holds "
                        f"{CONFIG}, {WEIGHTS} and {CHECKPOINT_DIR}/).")
    for name in (CONFIG, WEIGHTS):
        if not (run_dir / name).is_file():
            why = "the run has not finished (its final weights are written at the end)" if name == WEIGHTS else \
                "it is not a run directory of this project"
            raise UserError(f"{run_dir} has no {name}: {why}. Give a finished run's directory.")
    found = find_latest_valid(run_dir / CHECKPOINT_DIR, on_invalid=lambda _note: None, quarantine=False)
    if found is None:
        raise UserError(f"{run_dir}/{CHECKPOINT_DIR} holds no intact checkpoint, which records the model's class and "
                        "arguments: predict needs the run's checkpoints folder as the run left it.")
    _path, payload = found
    config = load_config(str(run_dir / CONFIG))
    weights = torch.load(run_dir / WEIGHTS, map_location="cpu", weights_only=True)
    return RunRecord(run_dir, config, payload["model_spec"], weights)


def load_run(run_dir: str | Path) -> tuple[Config, nn.Module]:
    """The run's config and its model with the final weights, ready for `model(x, edge_index)`.

    Args:
        run_dir: a finished run's directory (runs/<id>).

    Returns:
        (config, model): the run's settings, and the model in eval mode on the CPU.
    """
    record = read_record(run_dir)
    return record.config, record.standalone()
