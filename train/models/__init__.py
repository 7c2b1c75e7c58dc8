"""The model plug-in: which model `model.name` names, how it is built and checked, and how the loop calls it.

builtin: PyG's own GraphSAGE, GCN, GAT, GIN and MLP (and GINE, and the heterogeneous graphs' models) by name, with
their keyword arguments checked.
user: `package.module:ClassName`, the user's own torch.nn.Module, imported and checked.
spec: one resolved model (class and arguments) for building, checkpoints and the memory plan.
trim: each layer of a PyG BasicGNN computed only for the rows later layers read.
edges: the edges' features and weights a model reads, from a batch or the graph, and edge_dim's check
(and, from a typed batch, its edge_type, node_type and n_id).
hetero: the one adapter between a heterogeneous graph's typed batch and its models (per-type inputs, x_dict and
edge_index_dict, DDP safety, lazy layers shaped before DDP).
relational: rgcn and rgat (PyG's RGCNConv; rgat: R-GAT's layer over nodes, not edges) over edge_type, trimmed per hop.
rgat: R-GAT's layer (PyG's RGATConv's maths without a weight matrix per edge).
heteroconv: hetero-sage and hetero-gat (PyG's HeteroConv of SAGEConv or GATConv per relation; MLPerf's R-GAT).
gine: PyG's GIN with GINEConv layers (model.name=gine).
step: the module DDP wraps, the one place that says how a batch reaches the model's forward.
contract: the checks on a tiny batch that run on every rank before the rendezvous.
layerwise: the exact evaluation's per-layer API.

The loop imports the model from here, its one door.
"""

from train.models.edges import edge_inputs, graph_edge_values, graph_edge_width
from train.models.layerwise import LayerWise, evaluates_exactly, layerwise
from train.models.spec import ModelSpec, build_model, parameter_count, resolve
from train.models.step import ModelStep, batch_norms, hop_counts

__all__ = ["LayerWise", "ModelSpec", "ModelStep", "batch_norms", "build_model", "edge_inputs", "evaluates_exactly",
           "graph_edge_values", "graph_edge_width", "hop_counts", "layerwise", "parameter_count", "resolve"]
