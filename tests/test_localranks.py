"""bench/localranks.py, the one launcher of local ranks (benchmarks, gpu-check, tests): its scrubbed environment,
and real ranks that resolve to their own place whatever the caller's environment holds."""

from __future__ import annotations

import json
import sys

import pytest

from bench.localranks import LAUNCH_VARS, ROOT, LocalRanks, scrubbed_env, srun_env, torchrun_env
from train.cluster.distenv import CONTRACT_VARS, resolve
from train.cluster.launchers import LAUNCHERS

LEFTOVERS = {"SLURM_JOB_ID": "99", "SLURM_STEP_NUM_TASKS": "9", "SLURM_NTASKS_PER_NODE": "4", "WORLD_SIZE": "7",
             "RANK": "5", "GROUP_WORLD_SIZE": "3", "NODE_RANK": "2", "MASTER_ADDR": "elsewhere", "MASTER_PORT": "1",
             "TORCHELASTIC_RUN_ID": "x", "TORCHELASTIC_RESTART_COUNT": "2", "SLURM_RESTART_COUNT": "4"}


def test_no_variable_of_another_launch_is_left():
    env = scrubbed_env({**LEFTOVERS, "HOME": "/home/me", "DATA_DIR": "/data"})
    assert {k: v for k, v in env.items() if k in ("HOME", "DATA_DIR")} == {"HOME": "/home/me", "DATA_DIR": "/data"}
    assert not set(env) & set(LEFTOVERS)
    every_read = {*CONTRACT_VARS, *(name for launcher in LAUNCHERS for name in launcher.reads())}
    assert every_read <= LAUNCH_VARS, "a variable the contract reads would leak from the caller into a rank"


@pytest.mark.parametrize("caller,expected", [
    (None, str(ROOT)),
    ("/opt/site:/my/pkgs", f"{ROOT}:/opt/site:/my/pkgs"),
    (f"/my/pkgs:{ROOT}:", f"{ROOT}:/my/pkgs"),  # the checkout once, first; no empty entry (the cwd)
])
def test_the_checkout_comes_first_and_the_callers_pythonpath_after_it(caller, expected):
    environ = {"PYTHONPATH": caller} if caller is not None else {}
    assert scrubbed_env(environ)["PYTHONPATH"] == expected


def test_extra_variables_set_and_unset_and_threads_are_given_once():
    env = scrubbed_env({"CUDA_VISIBLE_DEVICES": "0,1", "OMP_NUM_THREADS": "8"}, {"CUDA_VISIBLE_DEVICES": None,
                                                                                 "X": "1"}, threads=2)
    assert "CUDA_VISIBLE_DEVICES" not in env and env["X"] == "1" and env["OMP_NUM_THREADS"] == "2"
    assert env["PYTHONUNBUFFERED"] == env["PYTHONFAULTHANDLER"] == "1"


@pytest.mark.parametrize("rank_env,launcher", [
    (lambda rank: srun_env(rank, 4, 2, "4242", 29500), "srun step"),
    (lambda rank: torchrun_env(rank, 4, 2, 29500), "explicit variables"),
])
def test_the_rank_variables_place_every_rank_as_the_contract_reads_them(rank_env, launcher):
    places = [resolve(rank_env(rank)) for rank in range(4)]
    assert [(p.rank, p.node_rank, p.local_rank, p.local_world_size, p.num_nodes) for p in places] == [
        (0, 0, 0, 2, 2), (1, 0, 1, 2, 2), (2, 1, 0, 2, 2), (3, 1, 1, 2, 2)]
    assert {p.launcher for p in places} == {launcher} and {p.master_port for p in places} == {29500}


def test_real_ranks_resolve_their_own_place_despite_the_callers_leftovers(monkeypatch, tmp_path):
    for name, value in LEFTOVERS.items():
        monkeypatch.setenv(name, value)
    with LocalRanks([sys.executable, "-m", "train", "env"], 2, lambda rank: srun_env(rank, 2, 1, "4242", 29500),
                    tmp_path / "logs") as ranks:
        codes = ranks.wait(120)
        outputs = ranks.outputs()
    assert codes == [0, 0], outputs
    resolved = [json.loads(out) for out in outputs]
    assert [(r["rank"], r["world_size"], r["job_id"], r["restart_count"]) for r in resolved] == [
        (0, 2, "4242", 0), (1, 2, "4242", 0)]


def test_a_hung_rank_prints_its_stack_and_is_killed_at_the_timeout(tmp_path):
    code = "import os, time\nif os.environ['RANK'] == '1': time.sleep(60)"
    with LocalRanks([sys.executable, "-c", code], 2, lambda rank: torchrun_env(rank, 2, 1, 1), tmp_path) as ranks:
        codes = ranks.wait(3, dump_stacks=True)
        hung = ranks.output(1)
    assert codes == [0, None]  # None: still running at the timeout
    assert "Fatal Python error: Aborted" in hung and 'File "<string>", line 2' in hung, hung  # where it hung
    assert ranks.procs[1].returncode == -6  # SIGABRT ended it (PYTHONFAULTHANDLER printed the stack first)


def test_a_launch_without_a_logs_folder_cleans_its_own():
    with LocalRanks([sys.executable, "-c", "print('hello')"], 1, lambda rank: {}) as ranks:
        ranks.wait(60)
        assert ranks.output(0) == "hello\n"
        folder = ranks.logs[0].parent
    assert not folder.exists()
