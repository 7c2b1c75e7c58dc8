"""The plan sees each built-in's own memory (issue 41 §3, §5): one training step of every built-in on a batch of
1,024-wide features at fanouts [15, 10, 5] and batch 256 (the typed models on a graph with a featureless type),
measured in one fresh process (tests/harness/workers/step_peaks.py: the run's heap gives each step's large tensors
back, and the C heap's arena is trimmed before the measured step, so each model's peak RSS growth is its own),
against the plan's training-batch term (train/plan/terms.py
forward_bytes: what the GPU row prints; the CPU row adds CPU_STEPS_GROWTH for an epoch's heap, measured in
tests/test_plan_measured.py).

The model's term is held to the batch's own nodes and edges per hop: at least the measured peak, at most 1.5 times
it (and 32 MiB, a step's fixed part, for the feature-only MLP, whose batch of 256 rows measures near nothing). The
plan's own estimate of the batch's size (train/plan/hops.py) is held to at least the measured peak."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

MIB = 2**20
WIDE = ["data.num_features=1024", "data.share=process", "sampler.num_neighbors=[15,10,5]", "sampler.batch_size=256",
        "model.num_layers=3", "model.hidden=64", "data.avg_degree=15"]
HOMOGENEOUS = ["sage", "gcn", "gat:heads=4", "gat:heads=4,v2=true,edge_dim=4", "gin", "gine:edge_dim=4", "mlp"]
TYPED = ["rgcn", "rgat:heads=4", "hetero-sage", "hetero-gat:heads=4"]  # hetero-synthetic: venues are featureless
FIXED_SLACK = 32 * MIB


def _measured(config: str, models: list[str], overrides: list[str]) -> dict[str, dict]:
    done = subprocess.run([sys.executable, "-m", "tests.harness.workers.step_peaks", config, *models, "--",
                           *WIDE, *overrides], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {row["model"]: row for row in rows}


@pytest.fixture(scope="module")
def steps() -> dict[str, dict]:
    return {**_measured("synthetic", HOMOGENEOUS, ["data.num_nodes=12000", "data.edge_features=4"]),
            **_measured("hetero-synthetic", TYPED, ["data.num_nodes=6000"])}


@pytest.mark.long  # two processes, eleven models' steps on 1,024-wide batches: about 40 CPU-seconds
@pytest.mark.parametrize("model", HOMOGENEOUS + TYPED)
def test_the_plans_training_term_covers_the_models_step_within_one_and_a_half(steps, model):
    row = steps[model]
    measured, at_batch, planned = row["measured"], row["planned_at_batch"], row["planned"]
    shown = (f"{model}: measured {measured / MIB:.0f} MiB, planned {at_batch / MIB:.0f} MiB for the batch's "
             f"{sum(row['nodes'])} nodes and {sum(row['edges'])} edges, {planned / MIB:.0f} MiB for the plan's "
             f"{sum(row['planned_nodes'])} and {sum(row['planned_edges'])}")
    assert at_batch >= measured, shown
    assert at_batch <= 1.5 * measured + (FIXED_SLACK if model == "mlp" else 0), shown
    assert planned >= measured, shown


def test_a_users_model_is_planned_saying_its_own_intermediates_are_not_read():
    from train.config import load_config
    from train.graph.datasets.loading import dataset_kind
    from train.plan.terms import make_plan

    notes = {}
    for name in ("sage", "torch_geometric.nn.models:GraphSAGE"):  # the built-in, and the same class as a user's
        config = load_config("synthetic", [f"model.name={name}"])
        notes[name] = make_plan(config, dataset_kind(config.data).plan_size(config.data), 1, 1, gpus=False).notes
    assert not any("your own model" in note for note in notes["sage"])
    assert any(note.startswith("model.name=torch_geometric.nn.models:GraphSAGE is your own model: the training batch "
                               "counts its intermediates per edge as SAGEConv's") for note in notes[
        "torch_geometric.nn.models:GraphSAGE"]), notes
