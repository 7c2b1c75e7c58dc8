"""The built-in models `model.name` names, one row each: the one home of their names and facts.

PyG's GraphSAGE, GCN, GAT, GIN and MLP, by the class name in `torch_geometric.nn.models`, and GINE (PyG's
GIN with GINEConv layers, train/models/gine.py); for heterogeneous graphs (issue 27) RGCN and RGAT (PyG's
RGCNConv, and R-GAT's layer re-written to transform nodes, not edges: train/models/relational.py, rgat.py) and
HeteroConv of SAGEConv or GATConv per relation (train/models/heteroconv.py); with the layer classes BasicGNN
builds, the arguments a model reads itself, the workflow's defaults and the values that cannot train on sampled
batches. Plain data with no import of torch, so that the config check on a login node (train/config/) knows the
names and which models read the graph; train/models/builtin.py builds them and checks their arguments.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Builtin:
    """A built-in model: PyG's class, the layer class BasicGNN builds, and arguments it reads itself."""

    class_name: str  # in `module`
    convs: tuple[str, ...] = ()  # in `conv_module`: the layers whose arguments it passes on
    own: tuple[str, ...] = ()  # arguments its init_conv takes out of **kwargs (not in any signature)
    defaults: dict[str, Any] = field(default_factory=dict)  # the workflow's defaults, overridden by model.kwargs
    refused: dict[str, tuple[Any, str]] = field(default_factory=dict)  # argument -> (value, why it cannot train)
    # Its forward takes edge_index: the answer of train/models/step.py's reads_graph for PyG's class, written
    # here for the config check without torch (tests/test_models.py holds the two equal).
    reads_graph: bool = True
    required: dict[str, str] = field(default_factory=dict)  # argument -> what it must be (no default fits)
    module: str = "torch_geometric.nn.models"  # where class_name is: PyG's models, or the workflow's own
    # Trains on a heterogeneous graph only (it reads node and edge types); the others train on one through PyG's
    # to_hetero, but for the reason `not_to_hetero` gives (train/models/spec.py).
    hetero_only: bool = False
    not_to_hetero: str = ""
    conv_module: str = "torch_geometric.nn.conv"  # where `convs` are: PyG's layers, or the workflow's own

    def model_class(self) -> type:
        """The class `class_name` names in `module`, imported on use (PyG's, or the workflow's own)."""
        return getattr(importlib.import_module(self.module), self.class_name)


SAMPLED_GRAPHS = "every batch is another sampled graph"
BUILTINS: dict[str, Builtin] = {
    "sage": Builtin("GraphSAGE", ("SAGEConv",)),
    "gcn": Builtin("GCN", ("GCNConv",), refused={"cached": (True, f"it keeps the first graph's normalisation; "
                                                                  f"{SAMPLED_GRAPHS}")},
                   not_to_hetero="GCNConv takes one node set, and to_hetero passes each relation its source and "
                                 "destination types' nodes (bipartite message passing)"),
    "gat": Builtin("GAT", ("GATConv", "GATv2Conv"), own=("v2", "heads", "concat", "out_heads")),
    "gin": Builtin("GIN", ("GINConv",)),
    # convs, then a Linear head (jk=last), as the GINE paper and OGB's examples have it: PyG's GIN layout puts the
    # classes through the last conv's MLP, which behind GINEConv's ReLU(x_j + W e) stays at chance (issue 41)
    "gine": Builtin("GINE", ("GINEConv",), module="train.models.gine", defaults={"jk": "last"},
                    required={"edge_dim": "the width of the graph's edge features (edge_attr): every layer adds them "
                                          "to its messages"},
                    not_to_hetero="every layer adds edge features to its messages, and a heterogeneous graph's "
                                  "edges carry their relation only"),
    # PyG's MLP normalises with batch_norm unless told otherwise; the baseline is the plain
    # Linear-ReLU-dropout stack of PyG's examples (model.kwargs.norm=batch_norm brings it back).
    "mlp": Builtin("MLP", defaults={"norm": None}, reads_graph=False),  # on a typed graph too: the seeds' features
    # heterogeneous graphs: PyG's relational layers over (x, edge_index, edge_type), and HeteroConv per relation
    "rgcn": Builtin("RGCN", ("RGCNConv",), module="train.models.relational", hetero_only=True),
    "rgat": Builtin("RGAT", ("NodeWiseRGATConv",), module="train.models.relational", hetero_only=True,
                    conv_module="train.models.rgat"),
    "hetero-sage": Builtin("HeteroSAGE", ("SAGEConv",), module="train.models.heteroconv", hetero_only=True),
    "hetero-gat": Builtin("HeteroGAT", ("GATConv",), module="train.models.heteroconv", hetero_only=True),
}
