"""After the run (train/loop/predict.py, train/loop/finished_run.py): `make predict` writes every node's rows on 2
ranks, each rank its own slice of the preallocated files, and they are the trained model's own full-graph
forward; `train.load_run` gives the model back; a bad RUN or override is one error before any rank starts."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import train
from tests.harness import standin_bin
from tests.harness.jobscript import KNOBS
from tests.harness.side_by_side import map_side_by_side
from train.graph.datasets.loading import load_graph
from train.graph.link_split import split_on_loading
from train.graph.typed_meta import graph_meta

ROOT = Path(__file__).resolve().parents[1]
SESSION_VARS = ("PYTHONPATH", "OMP_NUM_THREADS", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")


def make(*words: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in SESSION_VARS}
    return subprocess.run(["make", "--no-print-directory", *words], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


pytestmark = pytest.mark.long


def trained_and_predicted(folder: Path, config: str, args: str) -> Path:
    """`make run CONFIG=config ARGS=args` on 2 ranks into folder/run, then `make predict` of it on 2 ranks."""
    run = folder / "run"
    for words in (("run", f"CONFIG={config}", f"ARGS={args} output.dir={run}"), ("predict", f"RUN={run}")):
        p = make(*words)
        assert p.returncode == 0, p.stdout + p.stderr
    assert f"manifest {run}/predictions/manifest.json" in p.stdout, p.stdout
    return run


@pytest.fixture(scope="module")
def predicted(tmp_path_factory) -> Path:
    """The tiny config's run and its rows."""
    return trained_and_predicted(tmp_path_factory.mktemp("predict"), "tiny", "")


@pytest.fixture(scope="module")
def predicted_typed(tmp_path_factory) -> Path:
    """An R-GCN run of the typed synthetic graph (papers, authors, venues) and its rows."""
    return trained_and_predicted(tmp_path_factory.mktemp("predict-typed"), "hetero-synthetic",
                                 "model.name=rgcn trainer.epochs=1")


@pytest.fixture(scope="module")
def predicted_link(tmp_path_factory) -> Path:
    """A link-prediction run of the tiny graph and its embeddings."""
    return trained_and_predicted(tmp_path_factory.mktemp("predict-link"), "tiny", "task.name=link trainer.epochs=1")


def test_the_rows_are_the_trained_models_full_graph_forward(predicted):
    config, model = train.load_run(predicted)
    data = load_graph(config.data)
    with torch.no_grad():
        logits = model(data.x, data.edge_index)
    out = predicted / "predictions"
    probabilities = np.load(out / "probabilities.npy", mmap_mode="r")
    classes = np.load(out / "classes.npy", mmap_mode="r")
    assert probabilities.shape == (data.num_nodes, logits.size(1)) and classes.shape == (data.num_nodes,)
    assert torch.allclose(torch.from_numpy(np.array(probabilities)), torch.softmax(logits, 1), atol=1e-5)
    assert np.array_equal(classes, logits.argmax(1).numpy())
    # the embeddings: the last hidden layer's rows, which the last conv turns into the logits
    embeddings = torch.from_numpy(np.array(np.load(out / "embeddings.npy", mmap_mode="r")))
    assert embeddings.shape == (data.num_nodes, config.model.hidden)
    with torch.no_grad():
        assert torch.allclose(model.convs[-1](embeddings, data.edge_index), logits, atol=1e-5)


def test_the_predictions_score_the_runs_final_test_accuracy(predicted):
    data = load_graph(train.load_run(predicted)[0].data)
    classes = torch.from_numpy(np.array(np.load(predicted / "predictions" / "classes.npy", mmap_mode="r")))
    accuracy = int((classes[data.test_idx] == data.y[data.test_idx]).sum()) / data.test_idx.numel()
    summary = json.loads((predicted / "summary.json").read_text())
    assert accuracy == pytest.approx(summary["final_test_acc"], abs=1e-9), summary


def test_the_manifest_says_what_each_file_holds(predicted):
    manifest = json.loads((predicted / "predictions" / "manifest.json").read_text())
    assert manifest["run"] == str(predicted) and manifest["rows"] == 2000 and manifest["task"] == "node"
    assert set(manifest["files"]) == {"classes.npy", "probabilities.npy", "embeddings.npy"}
    for name, meta in manifest["files"].items():
        array = np.load(predicted / "predictions" / name, mmap_mode="r")
        assert list(array.shape) == meta["shape"] and str(array.dtype) == meta["dtype"] and meta["holds"], name
    assert manifest["graph_fingerprint"]["num_nodes"] == 2000


@pytest.mark.parametrize(("args", "said"), [
    (["ARGS=model.hidden=8"], "predict cannot change model.hidden=8"),
    (["ARGS=data.num_features=8"], "the graph has 8 input features per node and the run's model was trained on 16"),
    (["ARGS=--layer 3"], "--layer 3 is not a hidden layer of this model: it has 1 (0 to 0"),
])
def test_a_bad_override_is_one_error(predicted, args, said):
    p = make("predict", f"RUN={predicted}", *args)
    errors = [line for line in (p.stdout + p.stderr).splitlines() if line.startswith("error:")]
    assert p.returncode != 0 and len(errors) == 1 and said in errors[0], p.stdout + p.stderr


def test_a_run_without_its_final_weights_is_refused_before_any_rank_starts(tmp_path, predicted):
    (tmp_path / "config.yaml").write_text((predicted / "config.yaml").read_text())
    p = make("predict", f"RUN={tmp_path}")
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.strip().splitlines()[0] == (f"error: {tmp_path} has no model.pt: the run has not finished (its "
                                                "final weights are written at the end). Give a finished run's "
                                                "directory."), p.stderr
    assert "torchrun" not in p.stdout


def test_a_typed_runs_rows_are_its_target_types_whole_graph_forward(predicted_typed):
    """Row i is the target type's node i (the papers), as the relational model's full-graph forward gives it."""
    config, model = train.load_run(predicted_typed)
    data = load_graph(config.data)
    meta = graph_meta(data)
    start = meta.offsets[meta.target_index]
    papers = torch.arange(start, start + meta.counts[meta.target_index])
    with torch.no_grad():
        logits = model(data.x, data.edge_index, edge_type=data.edge_type, node_type=data.node_type,
                       n_id=torch.arange(data.num_nodes))[papers]
    out = predicted_typed / "predictions"
    probabilities = torch.from_numpy(np.array(np.load(out / "probabilities.npy", mmap_mode="r")))
    assert probabilities.shape == (papers.numel(), 6)
    assert torch.allclose(probabilities, torch.softmax(logits, 1), atol=1e-5)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["rows"] == papers.numel() and manifest["row"] == "row i is node i of the target type"


def test_a_link_runs_embeddings_are_its_encoders_whole_graph_forward(predicted_link):
    """Over the graph the run passed messages on: its training edges (the split made where the graph loads)."""
    config, model = train.load_run(predicted_link)
    data = split_on_loading(load_graph(config.data), config)
    with torch.no_grad():
        expected = model.encoder(data.x, data.edge_index)
    out = predicted_link / "predictions"
    assert sorted(path.name for path in out.iterdir()) == ["embeddings.npy", "manifest.json"]
    embeddings = torch.from_numpy(np.array(np.load(out / "embeddings.npy", mmap_mode="r")))
    assert torch.allclose(embeddings, expected, atol=1e-5)


# ---- predict as a job: make submit MODE=predict RUN=... --------------------------------------------

@pytest.fixture
def predict_job_standin(tmp_path) -> tuple[dict[str, str], Path]:
    """(env, record): a recording sbatch first on PATH (it answers job 4242), and a sinfo that answers nothing."""
    return standin_bin.recording_sbatch(tmp_path, {"sinfo": ""}, dict(os.environ), drop=(*SESSION_VARS, *KNOBS))


JOB = ["IMAGE=none", "GPUS_PER_TASK=0", "CPUS_PER_TASK=1", "NODES=1", "GPUS=2"]


def test_predict_as_a_job_is_checked_planned_and_runs_predict_on_every_task(predicted, predict_job_standin, tmp_path):
    env, record = predict_job_standin
    args = "--layer 0 sampler.eval_batch_size=256"
    dry, real = map_side_by_side(lambda extra: subprocess.run(
        ["make", "--no-print-directory", "submit", "MODE=predict", f"RUN={predicted}", *JOB, f"ARGS={args}",
         f"LOG_DIR={tmp_path / 'logs'}", *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300),
        [["DRY_RUN=1"], []])
    assert dry.returncode == 0 and real.returncode == 0, dry.stderr + real.stderr
    # the memory plan of the run's own config, said to be training's, and predict's line on every task
    assert "memory plan: synthetic (2,000 nodes" in dry.stdout and "the memory plan is the run's training plan" in \
        dry.stderr
    step = next(line for line in dry.stdout.splitlines() if " srun " in line and " -m train " in line)
    assert step.split()[-6:] == ["predict", "--run-dir", str(predicted), "--layer", "0", "sampler.eval_batch_size=256"]
    assert "# MODE=predict: a preemption (SLURM requeues the job) reruns predict from the start" in dry.stdout
    assert re.search(rf"^env .* MODE=predict RUN={re.escape(str(predicted))} .* sbatch ", dry.stdout, re.M)
    assert "Submitted job 4242 (1 nodes, 2 tasks" in real.stdout
    assert record.read_text().count("ARGV ") == 1  # the real one only


@pytest.mark.parametrize(("words", "said"), [
    (["submit", "ARGS=trainer.epochs=3"], "MODE=predict RUN='{run}' ARGS='trainer.epochs=3': predict cannot change "
                                          "trainer.epochs=3"),
    (["submit", "RUN={unfinished}"], "MODE=predict RUN='{unfinished}' ARGS='': {unfinished} has no model.pt: the run "
                                     "has not finished"),
    (["submit", "RUN="], "MODE=predict needs RUN=runs/<id>"),
    (["submit", "ARGS=data.num_features=8"], "ARGS='data.num_features=8': the graph has 8 input features per node "
                                             "and the run's model was trained on 16"),
    (["submit", "DOCTOR=1"], "DOCTOR=1 with MODE=predict: the doctor is a training job's first step"),
    (["sweep", "SWEEP=optim.lr=0.1,0.2"], "MODE=predict with make sweep"),
])
def test_a_bad_predict_job_is_refused_before_anything_is_submitted(predicted, predict_job_standin, tmp_path, words,
                                                                   said):
    env, record = predict_job_standin
    unfinished = tmp_path / "unfinished"
    shutil.copytree(predicted, unfinished, ignore=shutil.ignore_patterns("model.pt", "predictions"))
    given = [w.format(unfinished=unfinished) for w in words]
    p = subprocess.run(["make", "--no-print-directory", given[0], "MODE=predict", f"RUN={predicted}", *JOB, *given[1:]],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stdout + p.stderr
    assert said.format(run=predicted, unfinished=unfinished) in p.stderr, p.stderr
    assert "nothing was submitted." in p.stderr and not record.exists()
