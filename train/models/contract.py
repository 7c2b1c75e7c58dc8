"""The model's contract, checked on every rank before the rendezvous, with nothing written.

`check_model(config)` imports the model, checks model.kwargs against its constructor, builds it for a
tiny stand-in graph and runs the training step's calls on a real sampled batch of it (every row, then
trimmed by the hop counts when model.trim is on): the output must be a float tensor of one row per node
(at least the seeds) and one column per class, and gradients must reach the parameters. With
model.kwargs.edge_dim the batch carries edge features of that width, and they must reach the output
(a model that ignores them would leave its edge parameters without gradients: DDP stops). Each failure
is one `UserError` naming the model and what is wrong; a user's mistake never shows as a traceback
from inside the first training step on some rank.

A model of a heterogeneous graph (rgcn, rgat, hetero-*, a user's `forward(x_dict, edge_index_dict)`, or any
model given the graph's `meta`) is checked on a typed batch of the graph's types (models/hetero.py's STAND_IN
when the graph is not known yet): the same checks.
"""

from __future__ import annotations

import traceback

import torch
from torch import Tensor

from train.config import ModelConfig
from train.errors import UserError
from train.graph.form import HOMOGENEOUS, GraphForm
from train.graph.sampling.samplers import make_node_loader
from train.graph.typed_meta import HeteroMeta
from train.models.edges import EDGE_DIM, edge_inputs
from train.models.hetero import STAND_IN, tiny_typed_batch
from train.models.spec import resolve
from train.models.step import ModelStep

FEATURES, CLASSES, NODES, SEEDS, FANOUT = 6, 3, 40, 4, 3  # the stand-in graph: small, every hop non-empty


def tiny_batch(num_layers: int, form: GraphForm = HOMOGENEOUS, edge_dim: int | None = None,
               edge_weight: bool = False):
    """A batch as training samples it (seeds, then each hop; hop counts attached) from a random graph of `form`;
    with random edge features of width `edge_dim` (a leaf that records its gradient) and positive edge weights."""
    generator = torch.Generator().manual_seed(0)
    data = form.tiny(NODES, FEATURES, generator)
    loader = make_node_loader(data, torch.arange(SEEDS), [FANOUT] * num_layers, SEEDS, seed=0,
                              csc=form.structure(data))
    batch = next(iter(loader))
    edges = batch.edge_index.size(1)
    if edge_dim is not None:
        batch.edge_attr = torch.randn(edges, edge_dim, generator=generator).requires_grad_()
    if edge_weight:
        batch.edge_weight = torch.rand(edges, generator=generator) + 0.5
    return batch


def check_reads_edge_features(name: str, edge_dim, edge_attr: Tensor) -> None:
    """model.kwargs.edge_dim set, yet the backward pass never reached the batch's edge features: the model never
    reads them. (Reached with a zero gradient is reading them: a few dead ReLUs on a tiny batch do that.)"""
    if edge_attr.grad is None:
        raise UserError(f"model.kwargs.{EDGE_DIM}={edge_dim} is set, but model.name={name} never reads the edges' "
                        "features (edge_attr: its forward does not take them, or ignores them), so its edge "
                        "parameters would get no gradient; remove model.kwargs.edge_dim, or choose a model that "
                        "reads them (gat, gine, or your own whose forward takes edge_attr).")


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    return f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def _call(name: str, what: str, function):
    try:
        return function()
    except UserError:
        raise
    except Exception as exc:  # the model's own code failed: name the model, the call and the place
        raise UserError(f"model.name={name}: {what} failed: {type(exc).__name__}: {exc}{_where(exc)}") from None


def check_output(name: str, out, rows: int, what: str) -> Tensor:
    if not isinstance(out, Tensor):
        raise UserError(f"model.name={name}: {what} returned a {type(out).__name__}; expected a tensor of logits "
                        f"[nodes, out_channels].")
    if out.dim() != 2 or out.size(0) < rows or out.size(1) != CLASSES or not out.is_floating_point():
        raise UserError(f"model.name={name}: {what} returned a {out.dtype} tensor of shape {tuple(out.shape)}; "
                        f"expected float logits of shape [nodes, out_channels] with at least the {rows} seeds' rows "
                        f"and out_channels={CLASSES} columns: the check builds the model for a stand-in graph of "
                        f"{FEATURES} features and {CLASSES} classes, so that it needs no dataset, and passes "
                        f"out_channels=<the graph's classes>: {CLASSES} here, your graph's classes in training.")
    return out


def check_model(config: ModelConfig, meta: HeteroMeta | None = None) -> ModelStep:
    """Check the model's contract: it builds and answers a sampled batch as training will call it.

    A model satisfies it when it is a `torch.nn.Module` whose constructor takes `in_channels`, `hidden_channels`,
    `num_layers`, `out_channels` and `dropout` by name (then `model.kwargs`), as PyG's `BasicGNN` models do, and
    whose `forward(x, edge_index[, edge_attr][, edge_weight][, num_sampled_nodes_per_hop,
    num_sampled_edges_per_hop])` returns float logits of one row per node (at least the seeds, first) and one
    column per class, from which gradients reach its parameters (docs/models.md, "Your own model"). A `forward`
    without `edge_index` is fed the features alone (PyG's MLP); a heterogeneous graph's model takes
    `forward(x_dict, edge_index_dict)`.

    Args:
        config: the run's model section (`model.name`, `model.kwargs`, `model.num_layers`, `model.trim`).
        meta: the heterogeneous graph's types, when known; None for a homogeneous graph (a model that trains on
            typed graphs only is then checked on models/hetero.py's STAND_IN).

    Returns:
        The `ModelStep` of the model built on the stand-in graph: how the run will call it.

    Raises:
        UserError: naming the model and what is wrong (its import, an argument, its output, its gradients).

    Example::

        >>> from train.config import load_config
        >>> step = check_model(load_config("tiny", ["model.name=mymodels.gnn:MyGNN"]).model)
    """
    spec = resolve(config)
    name = config.name
    edge_dim = spec.kwargs.get(EDGE_DIM)
    meta = meta or (STAND_IN if spec.hetero_only else None)
    features = FEATURES if meta is None else max(meta.widths)
    stand_in = (f"(on a stand-in graph of {FEATURES} features and {CLASSES} classes)" if meta is None else
                f"(on a stand-in graph of the node types {', '.join(meta.node_types)} and {CLASSES} classes)")
    with torch.random.fork_rng(devices=[]):  # leave the process's RNG as it was
        model = spec.build(features, CLASSES, seed=0, context=stand_in, meta=meta)
        step = ModelStep(model)
        if meta is None:
            batch = tiny_batch(config.num_layers, edge_dim=edge_dim if isinstance(edge_dim, int) else None,
                               edge_weight="edge_weight" in step.edge_arguments)
        else:
            batch = tiny_typed_batch(meta, config.num_layers, SEEDS, FANOUT)
        edges = edge_inputs(batch)
        calls = [("forward(x_dict, edge_index_dict) on a typed batch" if spec.takes_dicts else
                  "forward(x, edge_index) on a sampled batch", ())]
        if config.trim and step.uses_graph:
            calls.append(("forward with the batch's hop counts (model.trim)",
                          (batch.num_sampled_nodes, batch.num_sampled_edges)))
        if not step.uses_graph:
            calls = [("forward(x) (a feature-only model: its forward takes no edge_index)", ())]
        for what, hops in calls:
            out = _call(name, what, lambda hops=hops: step(batch.x, batch.edge_index, *hops, **edges))
            out = check_output(name, out, SEEDS, what)
            if not out.requires_grad:
                raise UserError(f"model.name={name}: {what} returned logits that no gradient flows back from "
                                "(detached, or computed without the model's parameters): nothing to train.")
            _call(name, "backward from the seeds' outputs", lambda out=out: out[:SEEDS].sum().backward())
            if not any(p.grad is not None for p in model.parameters()):
                raise UserError(f"model.name={name}: no gradient reaches the model's parameters from its output: "
                                "nothing to train.")
            if "edge_attr" in edges:
                check_reads_edge_features(name, edge_dim, edges["edge_attr"])
                edges["edge_attr"].grad = None
            model.zero_grad(set_to_none=True)
    return step

