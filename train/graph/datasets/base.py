"""`DatasetKind`: what the package asks of a `data.name`, answered by one class per kind of dataset
(train/graph/datasets/kinds.py: the kinds, and DATASETS, which maps each name to its kind)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING

from train.builtin_tasks import TASKS
from train.config import DataConfig
from train.graph.sizes import GraphSize

if TYPE_CHECKING:  # PyG is imported where a graph is made: the doctor's probe of a synthetic graph needs none
    from torch_geometric.data import Data


def make_data(name: str, root: Path) -> str:
    """The command that prepares dataset `name` into `root` (mk/data.mk)."""
    return f"make data DATASET={name} DATA_DIR={root}"


class DatasetKind(ABC):
    """One dataset (`name`) of one kind: how it loads, what it is, its size without loading it, what the doctor
    sees of it on a node, and whether and how its files are prepared.

    A subclass sets the class attributes below and answers the abstract methods; a new dataset of a known kind is
    one row of DATASETS, a new kind one class (CONTRIBUTING.md, "Adding a dataset"). Every method's `root` is the
    data root (data.root, else DATA_DIR, else ./data), and `data` the run's data section.

    Attributes:
        name: the `data.name` it answers.
        kind: what the kind is called in `describe`.
        loader: whose loading peak the memory plan counts (train/plan/held.py LOADER_PEAK).
        in_data_root: its files live under the data root.
        tasks: the `task.name` values it can be trained for (default: every task of train/builtin_tasks.py);
            node classification needs labels, link prediction edges.
        own_link_split: its graph carries its own link split (a link task keeps it), else the task makes one.
        typed: a heterogeneous graph (None: told by its files, data.name=files).

    Example::

        class Tiny(DatasetKind):
            kind, loader = "generated", "synthetic"

            def describe(self): return "a generated graph, nothing to prepare"
            def folder(self, data, root): return None
            def plan_size(self, data): return GraphSize(nodes=..., edges=..., features=..., classes=...)
            def load(self, data, root): return make_my_graph(data)   # a PyG Data: x, y, edge_index, the split
            def is_prepared(self, data, root): return True
            def probe(self, data, root): return {"name": self.name, "state": "generated", ...}
    """

    name: str
    kind: str
    loader: str
    in_data_root = True
    tasks: tuple[str, ...] = tuple(TASKS)
    own_link_split = False
    typed: bool | None = False
    reads: tuple[str, ...] = ()  # the synthetic generator's data keys a loaded kind reads too (IGBH: num_classes)

    def check(self, data: DataConfig) -> None:
        """What the config must give for this kind beyond its name.

        Args:
            data: the run's data section.

        Raises:
            UserError: naming the missing or wrong setting.
        """

    @abstractmethod
    def describe(self) -> str:
        """Returns: what it is, where its files come from and what prepares them, in one sentence."""

    @abstractmethod
    def folder(self, data: DataConfig, root: Path) -> Path | None:
        """Returns: where its files are under `root` (None: nothing on disk)."""

    @abstractmethod
    def plan_size(self, data: DataConfig) -> GraphSize:
        """Returns: its size for the memory plan, without loading it."""

    @abstractmethod
    def load(self, data: DataConfig, root: Path) -> Data:
        """The graph, from its prepared files (a dataset that needs preparing must be prepared: `prepare`).

        Returns:
            A PyG `Data` (train/graph/form.py): x, y, edge_index and the split as index tensors; a heterogeneous
            graph's typed form (train/graph/typed_graph.py).
        """

    def prepare(self, data: DataConfig, root: Path) -> None:
        """Download and process it into `root` (once, on a login node); nothing for most kinds."""

    @abstractmethod
    def is_prepared(self, data: DataConfig, root: Path) -> bool:
        """Returns: whether a job can load it from `root` without internet (checked before a job is queued)."""

    def unprepared(self, data: DataConfig, root: Path, source: str) -> str:
        """Why it is not prepared under `root` (named by `source`, e.g. DATA_DIR) and how to prepare it."""
        return (f"dataset {self.name!r} is not prepared in {str(root)!r} ({source}): {self.describe()}; "
                f"prepare it on a login node (with internet): {make_data(self.name, root)}")

    @abstractmethod
    def probe(self, data: DataConfig, root: Path) -> dict:
        """What the doctor records of it on a node, never downloading.

        Returns:
            name, root, dir, state (generated, missing, present) and detail; for files found, `counted` (their
            bytes make its size) and `opened`.
        """
