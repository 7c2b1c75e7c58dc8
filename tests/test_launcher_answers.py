"""Each launcher answers its fields itself (train/cluster/launcher_base.py): a launcher with other semantics is one
class and one entry in the detection order, and train/cluster/distenv.py knows nothing of any launcher's kind."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.test_distenv import TORCHRUN_UNDER_SRUN, WHOLE_JOB_STEP, fixed_port
from train.cluster import distenv
from train.cluster.envvalues import PORT_BASE, PORT_SPAN, port_for_job
from train.cluster.launcher_base import ANSWERS, EXPLICIT, Launcher, Reading
from train.cluster.launchers import LAUNCHERS, SrunStep, Torchrun
from train.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
F58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"  # Flux's job ids, as `flux jobs` prints them


def f58(number: int) -> str:
    """Flux's f58 form of a job id (the test's own encoder, against which the launcher's decoding is checked)."""
    digits = ""
    while True:
        number, digit = divmod(number, 58)
        digits = F58[digit] + digits
        if not number:
            return "ƒ" + digits


class Flux(Launcher):
    """Flux's job shell, as a project would add it. Its semantics differ from SLURM's in three answers:
    its job id is f58 ("ƒ2zjDhKiJ"), not a number, and gives the port; the job is Flux's, not SLURM's;
    and it sets no node rank nor a count per node: its tasks fill the nodes evenly, in blocks."""

    name = "flux"
    variables = {"world_size": ("FLUX_JOB_SIZE",), "rank": ("FLUX_TASK_RANK",), "local_rank": ("FLUX_TASK_LOCAL_ID",),
                 "num_nodes": ("FLUX_JOB_NNODES",), "job_id": ("FLUX_JOB_ID",)}

    def detect(self, environ):
        return "FLUX_TASK_RANK" in environ

    def num_nodes(self, r: Reading) -> int:
        nodes = super().num_nodes(r)
        if r.local_count is None and r.values["world_size"] % nodes == 0:  # evenly: the layout is known
            evenly = r.values["world_size"] // nodes
            r.local_count = r.take("local_world_size", evenly, "FLUX_JOB_SIZE / FLUX_JOB_NNODES")
        return nodes

    def job_id(self, r: Reading) -> str | None:
        found = r.first(("FLUX_JOB_ID",))
        return None if found is None else r.take("job_id", found[1], found[0])

    def main_port(self, r: Reading) -> int:
        job = r.first(("FLUX_JOB_ID",))
        if r.first(EXPLICIT["master_port"]) or r.values["world_size"] == 1 or job is None:
            return super().main_port(r)
        digits = job[1].removeprefix("ƒ").removeprefix("f")
        if not digits or any(c not in F58 for c in digits):
            raise UserError(f"{job[0]}={job[1]!r} is not a Flux job id; expected its f58 form, e.g. 'ƒ2zjDhKiJ'.")
        number = 0
        for c in digits:
            number = number * 58 + F58.index(c)
        return r.take("master_port", port_for_job(str(number), job[0]), f"{PORT_BASE} + {job[0]} mod {PORT_SPAN}")


WITH_FLUX = (Flux(), *LAUNCHERS)
JOB = 1_234_567_890_123
FLUX_TASK = {"FLUX_JOB_SIZE": "8", "FLUX_TASK_RANK": "5", "FLUX_TASK_LOCAL_ID": "1", "FLUX_JOB_NNODES": "2",
             "FLUX_JOB_ID": f58(JOB), "MASTER_ADDR": "node1"}


def test_a_launcher_with_other_semantics_is_one_class_and_one_entry():
    env = distenv.resolve(FLUX_TASK, pick_free_port=fixed_port, launchers=WITH_FLUX)
    assert (env.launcher, env.world_size, env.rank, env.num_nodes, env.local_world_size, env.node_rank,
            env.local_rank, env.master_addr) == ("flux", 8, 5, 2, 4, 1, 1, "node1")
    assert (env.job_id, env.master_port) == (f58(JOB), PORT_BASE + JOB % PORT_SPAN)
    assert env.sources["rank"] == "FLUX_TASK_RANK"
    assert env.sources["local_world_size"] == "FLUX_JOB_SIZE / FLUX_JOB_NNODES"
    assert env.sources["node_rank"] == ("derived from FLUX_TASK_RANK and FLUX_JOB_SIZE / FLUX_JOB_NNODES=4 on each "
                                        "node, in blocks")
    assert env.sources["master_port"] == f"{PORT_BASE} + FLUX_JOB_ID mod {PORT_SPAN}"
    # Without the class in the list, the same environment is one process with a master set by hand.
    assert distenv.resolve(FLUX_TASK, pick_free_port=fixed_port).launcher == "explicit variables"


def test_the_new_launcher_keeps_the_contract_rules():
    """The container's variables still come first, and its own are refused by name like any other."""
    hooked = {**FLUX_TASK, "RANK": "4", "LOCAL_RANK": "0", "MASTER_PORT": "29500"}
    env = distenv.resolve(hooked, pick_free_port=fixed_port, launchers=WITH_FLUX)
    assert (env.rank, env.sources["rank"], env.node_rank, env.local_rank) == (4, "RANK", 1, 0)
    assert (env.master_port, env.sources["master_port"]) == (29500, "MASTER_PORT")
    refusals = [
        ({"FLUX_TASK_RANK": ""}, r"FLUX_TASK_RANK='': set but empty"),
        ({"FLUX_TASK_RANK": "8"}, r"FLUX_TASK_RANK=8 is not a valid rank .*FLUX_JOB_SIZE=8"),
        ({"FLUX_TASK_LOCAL_ID": "2"}, r"FLUX_TASK_LOCAL_ID=2 does not fit .*rank 5 is local rank 1 of node 1"),
        ({"FLUX_JOB_ID": "ƒ0Il"}, r"FLUX_JOB_ID='ƒ0Il' is not a Flux job id"),
        ({"FLUX_JOB_SIZE": "7", "FLUX_TASK_RANK": "3"}, r"GROUP_RANK is not set, and nothing says how many of the 7"),
    ]
    for change, message in refusals:
        with pytest.raises(UserError, match=message):
            distenv.resolve({**FLUX_TASK, **change}, pick_free_port=fixed_port, launchers=WITH_FLUX)


def test_a_launcher_answers_its_fields_alone_as_resolve_does():
    """Like Lightning's ClusterEnvironment, a launcher is asked directly: world_size(), global_rank(), ..."""
    for environ, launcher in ((WHOLE_JOB_STEP, SrunStep()), (TORCHRUN_UNDER_SRUN, Torchrun())):
        reading = launcher.answer(environ, fixed_port)
        env = distenv.resolve(environ, pick_free_port=fixed_port)
        assert {name: getattr(env, name) for name, _ in ANSWERS} == reading.values
        assert {name: env.sources[name] for name in reading.sources} == reading.sources


def test_distenv_reads_no_launcher_kind():
    """distenv.py asks the launcher only through its methods (and its name): no flag, no class, no branch on kind."""
    tree = ast.parse((ROOT / "train/cluster/distenv.py").read_text())
    asked = {node.attr for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "launcher"}
    assert asked and all(callable(getattr(Launcher, attr)) for attr in asked - {"name"}), asked
    kinds = {type(launcher).__name__ for launcher in LAUNCHERS} - {"LocalProcess"}  # LocalProcess: DistEnv's default
    named = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert not kinds & named, kinds & named
    calls = {getattr(node.func, "id", "") for node in ast.walk(tree) if isinstance(node, ast.Call)}
    assert "isinstance" not in calls and "hasattr" not in calls and "getattr" not in calls, calls
