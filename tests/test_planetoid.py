"""Real data, real accuracy: Planetoid Cora (public split) from ../shared/data/planetoid, 2 ranks.

The one place where the training loop meets a real graph in the tests. The raw files are
copied into a temporary DATA_DIR in the layout PyG's `Planetoid` reads, so the real loading
and processing code runs (no download). Every built-in model against its paper (GCN: Kipf &
Welling 2017; GAT: Velickovic et al. 2018; GraphSAGE usually 79-82 %, an MLP 55-59 %), mean over
3 seeds, is measured by `make bench BENCH=accuracy` (bench/accuracy.py), whose bounds a test here
asserts; so is link prediction in GAE's setting (train/configs/cora-link.yaml) against Kipf & Welling (2016).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.localjob import ROOT, final_summary, run_local_job
from train.config import DataConfig
from train.errors import UserError
from train.graph.datasets.loading import load_graph
from train.loop.report import summarize

SHARED_CORA = ROOT.parent / "shared" / "data" / "planetoid" / "Cora" / "raw"
PROJECT_PLANETOID = ROOT / "tests" / "data" / "planetoid"  # CiteSeer's raw files, kept in the project
PLANETOID_RAW = {"Cora": SHARED_CORA, "CiteSeer": PROJECT_PLANETOID / "CiteSeer" / "raw"}
needs_cora = pytest.mark.skipif(not SHARED_CORA.is_dir(),
                                reason=f"the Planetoid Cora raw files are not at {SHARED_CORA} (../shared absent)")


@pytest.fixture
def cora_root(tmp_path) -> Path:
    """A DATA_DIR holding Cora's raw files where PyG's Planetoid looks: <root>/Planetoid/Cora/raw."""
    raw = tmp_path / "data" / "Planetoid" / "Cora" / "raw"
    shutil.copytree(SHARED_CORA, raw)
    for path in raw.iterdir():
        path.chmod(0o644)  # the shared copy is read-only; the tests damage their own
    return tmp_path / "data"


def train_cora(tmp_path: Path, root: Path, model: str, *args: str) -> tuple[dict, str]:
    out = tmp_path / f"run-{model}"
    job = run_local_job(["fit", "--config", "cora", f"model.name={model}", f"output.dir={out}",
                         "output.progress=lines", *args], world_size=2, timeout=400, extra_env={"DATA_DIR": str(root)})
    assert job.returncodes == [0, 0], job.outputs[0][-3000:] + job.outputs[1][-3000:]
    return final_summary(out), job.outputs[0]  # both ranks ended with the same weights


def report_accuracy(capsys, model: str, summary: dict) -> None:
    with capsys.disabled():  # shown in CI's log, not only on failure
        print(f"\nCora {model}, 2 ranks: test accuracy {summary['test_acc_at_best_val']:.4f} at the best val "
              f"epoch {summary['best_val_epoch']} (val {summary['best_val_acc']:.4f}); "
              f"final {summary['final_test_acc']:.4f}")


@needs_cora
def test_cora_through_the_cli_on_two_ranks_reports_the_best_validation_epoch(tmp_path, cora_root, capsys):
    """`python -m train fit --config cora` end to end (40 of its 200 epochs: the accuracy over the whole
    schedule is the next test's, for every model)."""
    summary, log = train_cora(tmp_path, cora_root, "sage", "trainer.epochs=40")
    report_accuracy(capsys, "GraphSAGE", summary)
    assert summary["epochs"] == 40 and summary["world_size"] == 2 and summary["dataset"] == "Cora"
    assert summary["test_acc_at_best_val"] >= 0.70, summary  # it learns from the graph (an MLP stays below 0.6)
    rows = [json.loads(line) for line in (tmp_path / "run-sage" / "metrics.jsonl").read_text().splitlines()]
    best = max(rows, key=lambda r: r["val_acc"])
    assert (summary["best_val_epoch"], summary["test_acc_at_best_val"]) == (best["epoch"], best["test_acc"])
    assert f"test acc, best val   {summary['test_acc_at_best_val']:.4f} (epoch {best['epoch']})" in log
    assert (cora_root / "Planetoid" / "Cora" / "processed" / "data.pt").is_file()  # the real processing ran


@needs_cora
@pytest.mark.long
def test_every_builtin_model_reaches_its_published_accuracy_mean_over_three_seeds(cora_root, capsys):
    """GCN, GAT, GraphSAGE and the MLP with their configs (train/configs/cora*.yaml), 3 seeds each, all in one
    process group of 2 ranks (bench/accuracy.py, what `make bench BENCH=accuracy` prints)."""
    from bench.accuracy import MODELS, measure, rows_of

    rows = {r["model"]: r for r in rows_of(measure(list(MODELS), 3, cora_root, ranks=2, timeout=1800))}
    with capsys.disabled():
        for r in rows.values():
            print(f"\nCora {r['model']} ({r['config']}), 2 ranks, 3 seeds: test accuracy at the best val epoch "
                  f"{100 * r['mean']:.1f} +- {100 * r['std']:.1f} % (published {r['published']})")
    for label, bounds in MODELS.items():
        assert rows[label]["seeds"] == 3
        assert bounds.low <= rows[label]["mean"] <= bounds.high, (label, rows[label])
    assert rows["MLP"]["mean"] <= rows["GCN"]["mean"] - 0.15, rows  # the graph is worth 15 points at least


@pytest.mark.long
@pytest.mark.parametrize("label, dataset", [("GAE", "Cora"), ("GAE-CiteSeer", "CiteSeer")])
def test_gae_reaches_the_published_auc_and_ap_mean_over_three_seeds(label, dataset, tmp_path, capsys):
    """cora-link and citeseer-link (GAE's setting) from 3 seeds in one process group of 2 ranks (bench/accuracy.py,
    `--models GAE`) against Kipf & Welling (2016): Cora AUC 91.0, AP 92.0; CiteSeer AUC 89.5, AP 89.9."""
    from bench.accuracy import LINKS, measure, rows_of

    shared = PLANETOID_RAW[dataset]
    if not shared.is_dir():
        pytest.skip(f"the Planetoid {dataset} raw files are not at {shared} (../shared absent)")
    raw = tmp_path / "data" / "Planetoid" / dataset / "raw"
    shutil.copytree(shared, raw)
    (row,) = rows_of(measure([label], 3, tmp_path / "data", ranks=2, timeout=900))
    with capsys.disabled():
        print(f"\n{dataset} GAE ({row['config']}), 2 ranks, 3 seeds: test AUC {100 * row['mean']:.1f} +- "
              f"{100 * row['std']:.1f} %, AP {100 * row['ap_mean']:.1f} % (published {row['published']})")
    bounds = LINKS[label]
    assert row["seeds"] == 3
    assert bounds.low <= row["mean"] <= bounds.high and row["ap_mean"] >= bounds.ap_low, row


@needs_cora
def test_cora_split_is_the_public_one(cora_root):
    data = load_graph(DataConfig(name="Cora", root=str(cora_root)))
    assert (data.num_nodes, data.num_features, int(data.y.max()) + 1) == (2708, 1433, 7)
    assert (data.train_idx.numel(), data.val_idx.numel(), data.test_idx.numel()) == (140, 500, 1000)
    assert data.edge_index.size(1) == 10556


# ---- a damaged or missing raw file is named, with how to prepare the dataset again --------------

def assert_names_file_and_remedy(message: str, path: Path) -> None:
    assert str(path) in message, message
    assert "make data DATASET=Cora" in message and "python -m train data" in message, message


@needs_cora
@pytest.mark.parametrize("name", ["ind.cora.graph", "ind.cora.x", "ind.cora.allx", "ind.cora.test.index"])
def test_truncated_raw_file_is_named(cora_root, name):
    path = cora_root / "Planetoid" / "Cora" / "raw" / name
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(UserError) as info:
        load_graph(DataConfig(name="Cora", root=str(cora_root)))
    assert_names_file_and_remedy(str(info.value), path)
    assert not (cora_root / "Planetoid" / "Cora" / "processed" / "data.pt").exists()  # nothing half-made


@needs_cora
def test_missing_raw_file_offline_is_named(cora_root, monkeypatch):
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # no route out: PyG's re-download fails at once
    path = cora_root / "Planetoid" / "Cora" / "raw" / "ind.cora.graph"
    path.unlink()
    with pytest.raises(UserError) as info:
        load_graph(DataConfig(name="Cora", root=str(cora_root)))
    assert_names_file_and_remedy(str(info.value), path)
    assert "ind.cora.x" not in str(info.value)  # only the missing one


@needs_cora
def test_truncated_processed_file_is_named(cora_root):
    load_graph(DataConfig(name="Cora", root=str(cora_root)))
    processed = cora_root / "Planetoid" / "Cora" / "processed" / "data.pt"
    processed.write_bytes(processed.read_bytes()[:1000])
    with pytest.raises(UserError) as info:
        load_graph(DataConfig(name="Cora", root=str(cora_root)))
    assert_names_file_and_remedy(str(info.value), processed)
    assert "Delete" in str(info.value)


@needs_cora
def test_cli_reports_a_truncated_file_without_a_traceback(cora_root):
    path = cora_root / "Planetoid" / "Cora" / "raw" / "ind.cora.graph"
    path.write_bytes(path.read_bytes()[:100])
    proc = subprocess.run([sys.executable, "-m", "train", "data", "--config", "cora"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "DATA_DIR": str(cora_root),
                                                       "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("error: dataset 'Cora'")
    assert_names_file_and_remedy(proc.stderr, path)


def test_summary_reports_test_accuracy_at_the_best_validation_epoch():
    rows = [{"epoch": 0, "val_acc": 0.70, "test_acc": 0.72}, {"epoch": 1, "val_acc": 0.80, "test_acc": 0.77},
            {"epoch": 2, "val_acc": 0.78, "test_acc": 0.81}]
    s = summarize(rows)
    assert (s["best_val_epoch"], s["test_acc_at_best_val"], s["final_test_acc"]) == (1, 0.77, 0.81)


def test_the_project_s_citeseer_files_are_the_published_bytes():
    """tests/data/planetoid holds CiteSeer's raw files as the Planetoid release has them (SHA256SUMS beside them)."""
    import hashlib

    sums = dict(reversed(line.split()) for line in (PROJECT_PLANETOID / "SHA256SUMS").read_text().splitlines())
    assert len(sums) == 8 and all(name.startswith("CiteSeer/raw/ind.citeseer.") for name in sums)
    for name, digest in sums.items():
        assert hashlib.sha256((PROJECT_PLANETOID / name).read_bytes()).hexdigest() == digest, name
