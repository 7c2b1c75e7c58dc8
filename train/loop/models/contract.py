"""The model's contract, checked on every rank before the rendezvous, with nothing written.

`check_model(config)` imports the model, checks model.kwargs against its constructor, builds it for a
tiny stand-in graph and runs the training step's calls on a real sampled batch of it (every row, then
trimmed by the hop counts when model.trim is on): the output must be a float tensor of one row per node
(at least the seeds) and one column per class, and gradients must reach the parameters. Each failure
is one `UserError` naming the model and what is wrong; a user's mistake never shows as a traceback
from inside the first training step on some rank.
"""

from __future__ import annotations

import traceback

import torch
from torch import Tensor

from train.config import ModelConfig
from train.errors import UserError
from train.graph.form import HOMOGENEOUS, GraphForm
from train.graph.sampler import make_node_loader
from train.loop.models.spec import resolve
from train.loop.models.step import ModelStep

FEATURES, CLASSES, NODES, SEEDS, FANOUT = 6, 3, 40, 4, 3  # the stand-in graph: small, every hop non-empty


def tiny_batch(num_layers: int, form: GraphForm = HOMOGENEOUS):
    """A batch as training samples it (seeds, then each hop; hop counts attached) from a random graph of `form`."""
    data = form.tiny(NODES, FEATURES, torch.Generator().manual_seed(0))
    loader = make_node_loader(data, torch.arange(SEEDS), [FANOUT] * num_layers, SEEDS, seed=0,
                              csc=form.structure(data))
    return next(iter(loader))


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


def check_model(config: ModelConfig) -> ModelStep:
    """Raise `UserError` unless the model builds and answers a sampled batch as training will call it."""
    spec = resolve(config)
    name = config.name
    stand_in = f"(on a stand-in graph of {FEATURES} features and {CLASSES} classes)"
    with torch.random.fork_rng(devices=[]):  # leave the process's RNG as it was
        model = spec.build(FEATURES, CLASSES, seed=0, context=stand_in)
        step = ModelStep(model)
        batch = tiny_batch(config.num_layers)
        calls = [("forward(x, edge_index) on a sampled batch", ())]
        if config.trim and step.uses_graph:
            calls.append(("forward with the batch's hop counts (model.trim)",
                          (batch.num_sampled_nodes, batch.num_sampled_edges)))
        if not step.uses_graph:
            calls = [("forward(x) (a feature-only model: its forward takes no edge_index)", ())]
        for what, hops in calls:
            out = _call(name, what, lambda hops=hops: step(batch.x, batch.edge_index, *hops))
            out = check_output(name, out, SEEDS, what)
            if not out.requires_grad:
                raise UserError(f"model.name={name}: {what} returned logits that no gradient flows back from "
                                "(detached, or computed without the model's parameters): nothing to train.")
            _call(name, "backward from the seeds' outputs", lambda out=out: out[:SEEDS].sum().backward())
            if not any(p.grad is not None for p in model.parameters()):
                raise UserError(f"model.name={name}: no gradient reaches the model's parameters from its output: "
                                "nothing to train.")
            model.zero_grad(set_to_none=True)
    return step

