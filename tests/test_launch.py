"""`make run`, `make model-check` and `make doctor` as a user types them (login/launch.py): a bad input is one
error line before any rank starts, a rank's failure comes without torchrun's traceback or banner, CODE_DIR
reaches the model's import, and each rank gets its share of the cores as OMP_NUM_THREADS.
"""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

from login.launch import for_ranks, threads_per_rank
from login.ranks import exit_status
from tests.harness.graph_folder import write_graph_folder
from tests.harness.side_by_side import map_side_by_side
from train.config import available_configs
from train.models.user import search_path

ROOT = Path(__file__).resolve().parents[1]
MODELS = """
    import torch
    from torch_geometric.nn.models import GraphSAGE


    class MySAGE(GraphSAGE):
        '''PyG's GraphSAGE, subclassed: it meets the contract.'''


    class Wide(torch.nn.Module):
        '''Breaks the contract: hidden_channels columns, not out_channels.'''

        def __init__(self, in_channels, hidden_channels, num_layers, out_channels, dropout=0.0):
            super().__init__()
            self.lin = torch.nn.Linear(in_channels, hidden_channels)

        def forward(self, x, edge_index):
            return self.lin(x)
"""
LAUNCHER_NOISE = ("Traceback", "ChildFailedError", "Setting OMP_NUM_THREADS", "*****", "elastic")


@pytest.fixture(scope="module")
def code_dir(tmp_path_factory) -> Path:
    """A folder outside the project with a package `mymodels` (gnn.MySAGE, gnn.Wide)."""
    code = tmp_path_factory.mktemp("code") / "my code"  # a space: every expansion quoted
    (code / "mymodels").mkdir(parents=True)
    (code / "mymodels" / "__init__.py").write_text("")
    (code / "mymodels" / "gnn.py").write_text(textwrap.dedent(MODELS))
    return code


# What the test session's own `make test` exports (a user's shell has none of it): under it, make would say
# make[1] and the ranks would see the checkout's PYTHONPATH.
SESSION_VARS = ("PYTHONPATH", "OMP_NUM_THREADS", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")


def make(*words: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in SESSION_VARS}
    return subprocess.run(["make", "--no-print-directory", *words], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def one_error(p: subprocess.CompletedProcess, target: str = "run") -> str:
    """The one `error:` line of a refused make target (exit status 2: train/errors.py), with no launcher noise."""
    out = p.stdout + p.stderr
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out
    for noise in LAUNCHER_NOISE:
        assert noise not in out, out
    assert not p.stdout, "nothing ran, so nothing was printed on stdout"
    assert re.search(rf"make: \*\*\* \[\S+: {target}\] Error 2$", p.stderr.strip()), p.stderr
    return errors[0]


@pytest.mark.parametrize(("words", "said"), [
    (["ARGS=optim.lr=abc"], "error: optim.lr='abc' must be of type float."),
    (["ARGS=model.name=nonexistent"], "error: model.name='nonexistent' is not valid; expected one of: sage,"),
    (["CONFIG=nope"], "error: CONFIG='nope' is neither a shipped config nor a YAML file; expected a shipped config's "
                      f"name ({', '.join(available_configs())}) or the path of a YAML file (.yaml, .yml)."),
    (["ARGS=trainer.epoch=3"], "error: unknown config key 'trainer.epoch'; valid trainer keys: epochs,"),
    (["ARGS=data.name=Coraa"], "error: data.name='Coraa' is not known; expected one of: synthetic,"),
    (["ARGS=data.name=files"], "error: data.name=files needs data.path:"),  # the kind's own need, not just the name
])
def test_a_bad_input_to_make_run_is_one_error_line_before_any_rank_starts(words, said):
    assert one_error(make("run", *words)).startswith(said)


def test_a_graph_s_path_format_and_shapes_are_checked_before_any_rank_starts(tmp_path):
    """As make submit's plan reads them, from the headers: a missing path, a file that is no graph, a short y;
    and data.name=igbh-full, which has no files at all."""
    short = write_graph_folder(tmp_path / "short", nodes=30, edges=60, features=3, classes=2)
    np.save(short / "y.npy", np.zeros(29, dtype=np.int64))
    (tmp_path / "notes.pt").write_text("not a graph\n")
    cases = [(f"data.name=files data.path={tmp_path / 'nope'}", f"error: data.path='{tmp_path / 'nope'}' does not "
                                                                 "exist here"),
             (f"data.name=files data.path={tmp_path / 'notes.pt'}", f"error: data.path: {tmp_path / 'notes.pt'} is "
                                                                     "not a torch.save file"),
             (f"data.name=files data.path={short}", f"error: data.path={short}: y has shape (29,)"),
             ("data.name=igbh-full", "error: data.name=igbh-full is IGBH-full's published size, for the memory plan")]
    runs = map_side_by_side(lambda args: make("run", "CONFIG=tiny" if "files" in args else "CONFIG=igbh-rgat",
                                              f"ARGS={args}"), [args for args, _ in cases])
    for (args, said), p in zip(cases, runs):
        assert one_error(p).startswith(said), (args, p.stderr)


def test_the_ranks_get_the_config_without_make_s_knob_name():
    assert for_ranks(["--config-knob", "CONFIG", "--config", "tiny", "a.b=1"]) == ["--config", "tiny", "a.b=1"]
    assert for_ranks(["--config=tiny", "--config-knob=CONFIG", "--timeout", "5"]) == ["--config=tiny", "--timeout", "5"]
    assert for_ranks(["--config", "tiny"]) == ["--config", "tiny"]


@pytest.mark.parametrize("target", ["model-check", "doctor"])
def test_make_model_check_and_doctor_name_a_bad_config_by_make_s_config(target):
    line = one_error(make(target, "CONFIG=nope.yaml"), target)
    assert line == "error: config file CONFIG='nope.yaml' does not exist."


def test_the_test_hooks_are_not_listed_among_the_trainers_keys_but_still_taken():
    line = one_error(make("run", "ARGS=trainer.epoch=3"))
    assert "max_restarts" in line and "deterministic" in line
    for hook in ("fail_at_step", "fail_rank", "step_delay_seconds"):
        assert hook not in line
    from train.config import load_config

    assert load_config("tiny", ["trainer.fail_at_step=2", "trainer.fail_rank=1"]).trainer.fail_rank == 1


def test_a_model_that_breaks_the_contract_is_named_once_with_the_sizes_the_check_used(code_dir):
    line = one_error(make("run", f"CODE_DIR={code_dir}", "ARGS=model.name=mymodels.gnn:Wide"))
    assert line.startswith("error: model.name=mymodels.gnn:Wide: forward(x, edge_index) on a sampled batch "
                           "returned a torch.float32 tensor of shape (")
    assert "out_channels=3 columns: the check builds the model for a stand-in graph of 6 features and 3 classes, " \
           "so that it needs no dataset" in line


def test_code_dir_reaches_make_runs_import(code_dir):
    line = one_error(make("run", f"CODE_DIR={code_dir}", "ARGS=model.name=mymodels.gnn:Missing"))
    assert line == ("error: model.name=mymodels.gnn:Missing: mymodels.gnn has no 'Missing'; torch.nn.Module classes "
                    "there: GraphSAGE, MySAGE, Wide.")


def test_without_code_dir_the_import_error_lists_each_folder_once_and_says_how_to_give_it():
    line = one_error(make("run", "ARGS=model.name=mymodels.gnn:MySAGE"))
    assert line.startswith("error: model.name=mymodels.gnn:MySAGE: no module named 'mymodels'; ")
    assert "CODE_DIR=DIR to make (run, model-check, doctor, submit), or as PYTHONPATH=DIR to python -m train" in line
    folders = line.partition("sys.path: ")[2].removesuffix(" ...").split(", ")
    assert folders[0] == str(ROOT) and len(folders) == len(set(folders)), line


def test_search_path_names_each_folder_once(tmp_path, monkeypatch):
    """'' (the working directory of `python -m`), the same folder on PYTHONPATH, a link to it: one entry."""
    link = tmp_path / "link"
    link.symlink_to(ROOT)
    monkeypatch.chdir(ROOT)
    assert search_path(["", str(ROOT), str(link), str(tmp_path), str(tmp_path)]) == [str(ROOT.resolve()),
                                                                                      os.path.realpath(tmp_path)]


def test_make_model_check_imports_from_code_dir_and_writes_nothing(code_dir):
    before = sorted(p.name for p in (ROOT / "runs").iterdir()) if (ROOT / "runs").is_dir() else []
    p = make("model-check", f"CODE_DIR={code_dir}", "CONFIG=tiny", "ARGS=model.name=mymodels.gnn:MySAGE")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("model.name=mymodels.gnn:MySAGE: mymodels.gnn.MySAGE builds and answers a sampled "
                               "batch as training calls it"), p.stdout
    after = sorted(p.name for p in (ROOT / "runs").iterdir()) if (ROOT / "runs").is_dir() else []
    assert after == before


@pytest.mark.parametrize("target", ["run", "doctor", "model-check"])
def test_a_code_dir_that_is_not_a_folder_is_refused(target, tmp_path):
    line = one_error(make(target, f"CODE_DIR={tmp_path / 'nope'}"), target)
    assert line == (f"error: CODE_DIR='{tmp_path / 'nope'}' is not a directory: it is the folder of your own code "
                    "(model.name=package.module:ClassName), put in front of PYTHONPATH.")


def test_a_rank_that_fails_later_ends_make_run_with_its_own_message_and_status(tmp_path):
    """The checks pass; rank 1 then fails at its first step: its message, the launcher's traceback left out."""
    p = make("run", "CONFIG=tiny", f"ARGS=trainer.fail_at_step=0 trainer.fail_rank=1 output.dir={tmp_path / 'run'}")
    out = p.stdout + p.stderr
    assert "RuntimeError: injected failure on rank 1 at step 0" in out
    for noise in ("ChildFailedError", "Setting OMP_NUM_THREADS", "torch/distributed/run.py", "failed (exitcode"):
        assert noise not in out, out
    assert re.search(r"make: \*\*\* \[\S+: run\] Error 1$", p.stderr.strip()), p.stderr  # the rank's status
    threads = threads_per_rank(2, len(os.sched_getaffinity(0)))
    assert p.stdout.startswith(f"OMP_NUM_THREADS={threads} TORCH_CPP_LOG_LEVEL=FATAL .venv/bin/torchrun --standalone "
                               "--nproc-per-node=2 -m train fit --config tiny trainer.fail_at_step=0"), p.stdout


@pytest.mark.parametrize(("nproc", "cores", "threads"), [(2, 16, 8), (3, 16, 5), (2, 2, 1), (4, 2, 1), (0, 4, 4)])
def test_each_rank_gets_its_share_of_the_cores_and_at_least_one(nproc, cores, threads):
    assert threads_per_rank(nproc, cores) == threads


@pytest.mark.parametrize(("exitcode", "status"), [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (-9, 137), (-2, 130)])
def test_a_ranks_exit_code_becomes_the_status_a_shell_reports(exitcode, status):
    assert exit_status(exitcode) == status
