"""A run on your own graph says what it loaded (nodes, edges, features, classes, the split's sizes) and records in
config.yaml none of the synthetic generator's sizes, which it did not read (train/loop/run.py)."""

from __future__ import annotations

import yaml

from tests.harness.graph_folder import write_graph_folder
from tests.harness.localjob import run_local_job
from train.config import load_config
from train.graph.datasets.synthetic import GENERATOR_KEYS
from train.loop.run import recorded_config


def test_a_run_on_your_graph_logs_what_it_loaded_and_records_no_generator_size(tmp_path):
    graph = write_graph_folder(tmp_path / "graph", nodes=60, edges=240, features=5, classes=3)
    out = tmp_path / "run"
    result = run_local_job(["fit", "--config", "tiny", "data.name=files", f"data.path={graph}", "trainer.epochs=1",
                            f"output.dir={out}"], 1)
    assert result.returncodes == [0], "\n".join(result.outputs)
    assert "graph files: 60 nodes, 240 edges, 5 features, 3 classes; train/val/test nodes 36/12/12" in \
        result.outputs[0], result.outputs[0]
    recorded = yaml.safe_load((out / "config.yaml").read_text())["data"]
    assert recorded["path"] == str(graph) and not set(GENERATOR_KEYS) & set(recorded), recorded


def test_a_generated_graph_records_its_sizes_and_igbh_its_classes():
    synthetic = recorded_config(load_config("tiny"))["data"]
    assert set(GENERATOR_KEYS) <= set(synthetic)  # they made the graph
    igbh = recorded_config(load_config("igbh-rgat", ["data.path=/nowhere"]))["data"]
    assert igbh["num_classes"] == 19 and "num_nodes" not in igbh  # IGBH's labels: 19 or 2983 classes
    cora = recorded_config(load_config("cora"))["data"]
    assert "num_classes" not in cora and "avg_degree" not in cora
