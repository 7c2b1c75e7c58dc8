"""The launchers (train/cluster/launchers.py): each detects from its argument alone, the first in the list wins,
and a new launcher is one class in the list, read through the same `resolve`."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from tests.test_distenv import BATCH, CASES, TORCHRUN_UNDER_SRUN, WHOLE_JOB_STEP, fixed_port
from train.cluster.distenv import resolve
from train.cluster.launchers import LAUNCHERS, BatchShell, Launcher, LocalProcess, SrunStep, Torchrun, detect
from train.errors import UserError

ENVIRONMENTS = [pytest.param(environ, id=name) for name, environ, _expected in CASES]


def test_the_detection_order_is_the_documented_precedence():
    assert [launcher.name for launcher in LAUNCHERS] == [
        "torchrun", "srun step", "allocation without srun", "explicit variables", "plain"]
    assert isinstance(LAUNCHERS[-1], LocalProcess), "the last launcher must detect every environment"


@pytest.mark.parametrize("environ", ENVIRONMENTS)
def test_each_detect_reads_only_its_argument_and_changes_nothing(environ, monkeypatch):
    frozen = MappingProxyType(dict(environ))  # a write would raise
    answers = [launcher.detect(frozen) for launcher in LAUNCHERS]
    for name in ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID", "WORLD_SIZE"):
        monkeypatch.setenv(name, "3")  # the process's own environment says otherwise: it must not count
    assert [launcher.detect(frozen) for launcher in LAUNCHERS] == answers
    assert dict(frozen) == environ


@pytest.mark.parametrize("environ", ENVIRONMENTS)
def test_resolve_names_the_first_launcher_that_detects(environ):
    first = next(launcher for launcher in LAUNCHERS if launcher.detect(environ))
    assert resolve(environ, pick_free_port=fixed_port).launcher == first.name == detect(environ).name


def test_torchrun_wins_over_the_srun_step_it_runs_in():
    assert SrunStep().detect(TORCHRUN_UNDER_SRUN) and Torchrun().detect(TORCHRUN_UNDER_SRUN)
    assert detect(TORCHRUN_UNDER_SRUN).name == "torchrun"


@pytest.mark.parametrize("environ,name", [
    ({}, "plain"),
    ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_PORT": "1234"}, "explicit variables"),
    ({"SLURM_NTASKS": "2", "SLURM_PROCID": "1", "MASTER_PORT": "1234"}, "explicit variables"),  # by hand, no job
    (BATCH, "allocation without srun"),
    (WHOLE_JOB_STEP, "srun step"),
])
def test_variables_set_by_hand_are_told_from_a_lone_local_process(environ, name):
    assert detect(environ).name == name


def test_slurms_own_step_without_a_job_id_is_refused_by_name_not_by_a_crash():
    """SLURM_STEP_ID=batch but no SLURM_JOB_ID (a hand-made batch environment) with several tasks."""
    with pytest.raises(UserError, match=r"inside a job \(no SLURM_JOB_ID\).*SLURM_STEP_ID=batch.*SLURM_NTASKS=2"):
        resolve({"SLURM_STEP_ID": "batch", "SLURM_NTASKS": "2"}, pick_free_port=fixed_port)
    assert BatchShell().detect({"SLURM_STEP_ID": "batch"})


class OpenMPI(Launcher):
    """Open MPI's mpirun, as a project would add it: its variables and when it started the process."""

    name = "mpirun"
    variables = {
        "world_size": ("OMPI_COMM_WORLD_SIZE",),
        "rank": ("OMPI_COMM_WORLD_RANK",),
        "local_world_size": ("OMPI_COMM_WORLD_LOCAL_SIZE",),
        "local_rank": ("OMPI_COMM_WORLD_LOCAL_RANK",),
        "node_rank": ("OMPI_COMM_WORLD_NODE_RANK",),
    }

    def detect(self, environ):
        return "OMPI_COMM_WORLD_SIZE" in environ


WITH_MPIRUN = (OpenMPI(), *LAUNCHERS)
MPIRUN_TASK = {"OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
               "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_NODE_RANK": "1",
               "MASTER_ADDR": "node1", "MASTER_PORT": "29400"}


def test_a_new_launcher_is_one_class_in_the_list():
    env = resolve(MPIRUN_TASK, pick_free_port=fixed_port, launchers=WITH_MPIRUN)
    assert (env.launcher, env.world_size, env.rank, env.local_world_size, env.local_rank, env.node_rank,
            env.num_nodes, env.master_addr, env.master_port) == ("mpirun", 8, 5, 4, 1, 1, 2, "node1", 29400)
    assert env.sources["rank"] == "OMPI_COMM_WORLD_RANK"
    assert env.sources["num_nodes"] == "derived from world_size / local_world_size"
    # Without it in the list, the same environment is a lone process with a master set by hand.
    assert resolve(MPIRUN_TASK, pick_free_port=fixed_port).launcher == "explicit variables"


def test_a_new_launcher_keeps_the_contract_rules():
    """The container's variables still come first; the launcher's are checked like every other."""
    env = resolve({**MPIRUN_TASK, "RANK": "6"}, pick_free_port=fixed_port, launchers=WITH_MPIRUN)
    assert (env.rank, env.sources["rank"]) == (6, "RANK")
    with pytest.raises(UserError, match=r"OMPI_COMM_WORLD_RANK='': set but empty"):
        resolve({**MPIRUN_TASK, "OMPI_COMM_WORLD_RANK": ""}, pick_free_port=fixed_port, launchers=WITH_MPIRUN)
    with pytest.raises(UserError, match=r"OMPI_COMM_WORLD_RANK=9 is not a valid rank .*OMPI_COMM_WORLD_SIZE=8"):
        resolve({**MPIRUN_TASK, "OMPI_COMM_WORLD_RANK": "9"}, pick_free_port=fixed_port, launchers=WITH_MPIRUN)
    missing = {k: v for k, v in MPIRUN_TASK.items() if k != "OMPI_COMM_WORLD_RANK"}
    with pytest.raises(UserError, match=r"OMPI_COMM_WORLD_SIZE=8 processes, but OMPI_COMM_WORLD_RANK \(or RANK\)"):
        resolve(missing, pick_free_port=fixed_port, launchers=WITH_MPIRUN)


def test_a_list_without_a_fallback_is_a_programming_error():
    with pytest.raises(ValueError, match="torchrun.*LocalProcess"):
        detect({}, (Torchrun(),))
