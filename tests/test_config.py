"""Config files and overrides: typed, and every mistake named with what would be valid."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from train.config import available_configs, dump_config, load_config
from train.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", available_configs())
def test_shipped_configs_load(name):
    config = load_config(name)
    assert config.sampler.batch_size > 0


def test_overrides_are_typed():
    config = load_config("synthetic", ["trainer.epochs=3", "sampler.num_neighbors=[4, 3]", "optim.lr=1e-2",
                                      "model.name=mlp", "sampler.pin_memory=false", "optim.weight_decay=0"])
    assert config.trainer.epochs == 3
    assert config.sampler.num_neighbors == [4, 3]
    assert config.optim.lr == pytest.approx(0.01)
    assert config.model.name == "mlp"
    assert config.sampler.pin_memory is False
    assert isinstance(config.optim.weight_decay, float)


@pytest.mark.parametrize("override,must_name,must_list", [
    ("trainer.epochz=3", "trainer.epochz", "epochs"),
    ("trainr.epochs=3", "trainr", "trainer"),
    ("trainer.epochs=abc", "trainer.epochs", "int"),
    ("trainer.epochs=0", "trainer.epochs", "> 0"),
    ("model.name=gnn", "model.name",
     "sage, gcn, gat, gin, gine, mlp, rgcn, rgat, hetero-sage, hetero-gat, or package.module:ClassName"),
    ("model.name=mymodels.gnn:My-GNN", "model.name", "package.module:ClassName"),
    ("model.kwargs=8", "model.kwargs", "mapping"),
    ("model.hidden.size=8", "model.hidden.size", "model.kwargs"),
    ("model.kwargs={1: 2}", "model.kwargs", "argument names"),
    ("dist.backend=mpi", "dist.backend", "gloo"),
    ("sampler.num_neighbors=5", "sampler.num_neighbors", "list"),
    ("sampler.num_neighbors=[5]", "sampler.num_neighbors", "model.num_layers"),
    ("data.share=everywhere", "data.share", "node, process"),
    ("sampler.device=gpu", "sampler.device='gpu'", "auto, cpu, cuda"),
    ("data.feature_dtype=fp8", "data.feature_dtype='fp8'", "float32, bfloat16, float16"),
    ("epochs=3", "epochs=3", "section.key=value"),
    ("trainer.epochs", "trainer.epochs", "section.key=value"),
    ("model.dropout=1.5", "model.dropout", "[0, 1)"),
])
def test_mistakes_are_named(override, must_name, must_list):
    with pytest.raises(UserError) as info:
        load_config("synthetic", [override])
    assert must_name in str(info.value) and must_list in str(info.value)


def test_placement_defaults_auto_with_float32_features_and_takes_the_options():
    config = load_config("synthetic")
    assert (config.sampler.device, config.data.feature_dtype) == ("auto", "float32")
    chosen = load_config("synthetic", ["sampler.device=cuda", "data.feature_dtype=bfloat16"])
    assert (chosen.sampler.device, chosen.data.feature_dtype) == ("cuda", "bfloat16")


def test_model_kwargs_from_yaml_and_the_command_line(tmp_path):
    path = tmp_path / "gat.yaml"
    path.write_text("model:\n  name: gat\n  kwargs:\n    heads: 8\n    jk: cat\n")
    config = load_config(str(path), ["model.kwargs.heads=4", "model.kwargs.act_kwargs={negative_slope: 0.2}"])
    assert config.model.kwargs == {"heads": 4, "jk": "cat", "act_kwargs": {"negative_slope": 0.2}}
    assert load_config(str(path), ["model.kwargs={norm: null}"]).model.kwargs == {"norm": None}
    assert load_config("synthetic", ["model.name=mymodels.gnn:MyGNN"]).model.name == "mymodels.gnn:MyGNN"
    dump_config(config, tmp_path / "again.yaml")
    assert load_config(str(tmp_path / "again.yaml")) == config


def test_config_by_path_and_missing(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("trainer:\n  epochs: 2\n")
    assert load_config(str(path)).trainer.epochs == 2
    with pytest.raises(UserError, match=r"^--config 'nope' is neither a shipped config nor a YAML file; expected a "
                                        r"shipped config's name \(citeseer-link, .*synthetic.*\) or the path of a "
                                        r"YAML file \(.yaml, .yml\)\.$"):
        load_config("nope")
    with pytest.raises(UserError, match="does not exist"):
        load_config(str(tmp_path / "absent.yaml"))
    path.write_text("trainer: [1, 2\n")
    with pytest.raises(UserError, match="not valid YAML"):
        load_config(str(path))


def test_a_bad_config_is_named_by_the_setting_the_user_gave_it_by(tmp_path):
    """make gives CONFIG as --config with --config-knob CONFIG: a user who typed CONFIG=nope reads CONFIG=nope."""
    with pytest.raises(UserError, match=r"^CONFIG='nope' is neither a shipped config nor a YAML file; expected a "
                                        r"shipped config's name \(.*tiny\) or the path of a YAML file"):
        load_config("nope", knob="CONFIG")
    with pytest.raises(UserError, match=r"^config file CONFIG='.*absent.yaml' does not exist\.$"):
        load_config(str(tmp_path / "absent.yaml"), knob="CONFIG")
    with pytest.raises(UserError, match=r"^config file '.*absent.yaml' does not exist\.$"):
        load_config(str(tmp_path / "absent.yaml"))


def test_dump_round_trips(tmp_path):
    config = load_config("tiny", ["trainer.epochs=5"])
    dump_config(config, tmp_path / "config.yaml")
    assert load_config(str(tmp_path / "config.yaml")) == config
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["trainer"]["epochs"] == 5


def test_cli_names_the_bad_key_without_traceback():
    done = subprocess.run(
        [sys.executable, "-m", "train", "fit", "--config", "synthetic", "trainer.epochz=3"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    assert "trainer.epochz" in done.stderr and "epochs" in done.stderr and "keep_checkpoints" in done.stderr
    assert "Traceback" not in done.stderr
