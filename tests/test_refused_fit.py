"""A refused `fit` leaves nothing behind and never a traceback.

Each bad input runs the real CLI (one process) and must end with exit status 2, a message that
names the value, no traceback, no run directory (no config.yaml), and an existing run directory
left byte for byte as it was.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from train.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
TINY = ["fit", "--config", "tiny", "data.num_nodes=600", "trainer.epochs=1"]


def fit(*args: str, cwd: Path, environ: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_", "TORCHELASTIC_", "DATA_DIR"))
           and k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1", **(environ or {}))
    return subprocess.run([sys.executable, "-m", "train", *TINY, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180)


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under `folder` (relative path -> sha256), to show nothing changed."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A finished tiny run (sage) with its checkpoint, to resume from or into."""
    work = tmp_path_factory.mktemp("finished")
    done = fit(f"output.dir={work / 'run'}", cwd=work)
    assert done.returncode == 0, done.stdout + done.stderr
    return work / "run"


def checkpoint_of(run: Path) -> Path:
    (path, *_) = sorted((run / "checkpoints").glob("ckpt-*.pt"))
    return path


def make_case(name: str, work: Path, finished: Path) -> tuple[list[str], list[str]]:
    """(fit arguments, strings the message must contain) for the case `name`, preparing files in `work`."""
    run = str(work / "run")
    if name == "unknown-dataset":
        return [f"output.dir={run}", "data.name=nosuch"], ["data.name='nosuch'", "synthetic"]
    if name == "resume-missing-file":
        return [f"output.dir={run}", f"trainer.resume={work}/nope.pt"], [f"trainer.resume='{work}/nope.pt'"]
    if name == "resume-garbage-file":
        (work / "garbage.pt").write_bytes(b"this is not a checkpoint\n" * 10)
        return [f"output.dir={run}", f"trainer.resume={work}/garbage.pt"], [f"{work}/garbage.pt", "not usable"]
    if name == "resume-truncated-file":
        data = checkpoint_of(finished).read_bytes()
        (work / "truncated.pt").write_bytes(data[: len(data) // 2])
        return [f"output.dir={run}", f"trainer.resume={work}/truncated.pt"], [f"{work}/truncated.pt", "not usable"]
    if name == "resume-empty-file":
        (work / "empty.pt").write_bytes(b"")
        return [f"output.dir={run}", f"trainer.resume={work}/empty.pt"], [f"{work}/empty.pt"]
    if name == "resume-a-directory":
        return [f"output.dir={run}", f"trainer.resume={work}"], [f"trainer.resume='{work}'"]
    if name.startswith("model-") or name in ("resume-incompatible-checkpoint", "resume-other-model-kwargs"):
        return model_case(name, work, finished)
    if name == "output-dir-is-a-file":
        (work / "file").write_text("x")
        return [f"output.dir={work}/file"], [f"output.dir='{work}/file'", "is a file"]
    if name == "output-dir-under-a-file":
        (work / "file").write_text("x")
        return [f"output.dir={work}/file/run"], [f"output.dir='{work}/file/run'", f"'{work}/file' is a file"]
    if name == "data-root-is-a-file":
        (work / "datafile").write_text("x")
        return [f"output.dir={run}", f"data.root={work}/datafile"], [f"data.root='{work}/datafile'"]
    if name.startswith("lr-"):
        value = name[3:].replace("minus", "-")
        return [f"output.dir={run}", f"optim.lr={value}"], ["optim.lr="]
    raise AssertionError(name)


def model_case(name: str, work: Path, finished: Path) -> tuple[list[str], list[str]]:
    """The cases of a bad model (train/models/contract.py) and of resuming another model's checkpoint."""
    run = str(work / "run")
    if name == "resume-incompatible-checkpoint":
        return ([f"output.dir={run}", "model.name=mlp", f"trainer.resume={checkpoint_of(finished)}"],
                ["model.name", "'sage' in the checkpoint", "'mlp' now"])
    if name == "resume-other-model-kwargs":
        return ([f"output.dir={run}", "model.kwargs.aggr=max", f"trainer.resume={checkpoint_of(finished)}"],
                ["model.kwargs.aggr: None in the checkpoint, 'max' now", "model argument aggr"])
    if name == "model-unknown-kwarg":
        return [f"output.dir={run}", "model.name=gat", "model.kwargs.head=8"], ["model.kwargs.head", "heads"]
    if name == "model-import-fails":  # the user's module is in the working directory (on sys.path with -m)
        (work / "badmodels.py").write_text("import torch\nraise RuntimeError('needs a GPU')\n")
        return [f"output.dir={run}", "model.name=badmodels:Net"], ["model.name=badmodels:Net", "needs a GPU"]
    if name == "model-wrong-output":
        (work / "shapemodels.py").write_text(
            "import torch\nclass Net(torch.nn.Module):\n"
            "    def __init__(self, in_channels, hidden_channels, num_layers, out_channels, dropout):\n"
            "        super().__init__()\n        self.lin = torch.nn.Linear(in_channels, out_channels + 1)\n"
            "    def forward(self, x, edge_index):\n        return self.lin(x)\n")
        return [f"output.dir={run}", "model.name=shapemodels:Net"], ["model.name=shapemodels:Net", "out_channels=3"]
    raise AssertionError(name)


CASES = ["unknown-dataset", "resume-missing-file", "resume-garbage-file", "resume-truncated-file",
         "resume-empty-file", "resume-a-directory", "resume-incompatible-checkpoint", "resume-other-model-kwargs",
         "model-unknown-kwarg", "model-import-fails", "model-wrong-output", "output-dir-is-a-file",
         "output-dir-under-a-file", "data-root-is-a-file", "lr-0", "lr-minus1", "lr-nan", "lr-.nan", "lr-inf",
         "lr-minus.inf", "lr-abc"]


@pytest.mark.parametrize("name", CASES)
def test_refused_fit_leaves_nothing_behind(name, tmp_path, finished_run):
    args, named = make_case(name, tmp_path, finished_run)
    before = snapshot(tmp_path)
    done = fit(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    for text in named:
        assert text in done.stderr, (text, done.stderr)
    assert not (tmp_path / "run").exists(), "a refused run created its run directory"
    assert not (tmp_path / "runs").exists()
    assert snapshot(tmp_path) == before, "a refused run changed files"


def test_resuming_another_model_into_an_existing_run_leaves_it_intact(tmp_path, finished_run):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    before = snapshot(run)
    done = fit(f"output.dir={run}", "model.name=mlp", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "model.name" in done.stderr and "Traceback" not in done.stderr
    assert snapshot(run) == before, "the refused run rewrote the existing run's files"


def preflight_as_the_user(run_dir: str) -> None:
    """What `python -m train fit` checks before anything is written (train/cli/fit.py), in this process."""
    from train.cli.preflight import check_fit
    from train.cluster.distenv import resolve
    from train.config import load_config

    check_fit(load_config("tiny", [f"output.dir={run_dir}", "data.num_nodes=600"]), resolve({}))


def test_read_only_output_parent_is_refused(tmp_path):
    if os.geteuid() != 0:  # the whole command, as this user
        parent = tmp_path / "ro"
        parent.mkdir()
        parent.chmod(0o555)
        try:
            done = fit(f"output.dir={parent}/run", cwd=tmp_path)
        finally:
            parent.chmod(0o755)
        assert done.returncode == 2 and "read-only" in done.stderr and not (parent / "run").exists()
        return
    # root writes into read-only directories: the same check, run as another user of this machine, in a
    # forked child (a new interpreter cannot start as that user: the venv lives under /root)
    from tests.harness.users import VICTIM, call_as, ensure_user, sticky_dir

    user = ensure_user(VICTIM)
    # here first, into a writable folder: it passes, and loads every module the check imports (the child,
    # as the user, could not read them from the venv under /root)
    preflight_as_the_user(str(tmp_path / "run"))
    parent = sticky_dir("pyg-train-ro-") / "ro"
    parent.mkdir(mode=0o555)  # root's, read-only to the user
    try:
        with pytest.raises(UserError, match=r"output\.dir=.*cannot be written: .* is read-only for this user"):
            call_as(user, preflight_as_the_user, str(parent / "run"), timeout=60)
        assert not (parent / "run").exists()
    finally:
        shutil.rmtree(parent.parent)


def test_first_run_under_torchrun_prints_no_error_line(tmp_path):
    """`make run`'s torchrun: rank 0 joins torchrun's agent store instead of failing to bind its port."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_", "TORCHELASTIC_"))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run([str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc-per-node=2",
                           "-m", "train", *TINY, f"output.dir={tmp_path / 'run'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "final test accuracy" in out
    errors = [line for line in out.splitlines() if line.startswith("[E") or "failed to bind" in line
              or "error" in line.lower()]
    assert not errors, errors
