"""Launchers that answer their fields themselves resolve every environment as the data-and-`_Reading` form did.

The old resolution is frozen in tests/harness/distenv_oracle.py (train/cluster/launchers.py and the logic of
distenv.py at 2f4205f). Seeded random environments, each a launch (torchrun, an srun step with or without the
enroot hook, a batch script, variables by hand, Open MPI's mpirun, nothing) then broken at random (a variable
dropped, emptied, malformed, off by one, left over from another launch), go through both: the same `DistEnv`
with the same sources in the same order, or the same refusal word for word, or the same crash.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest

from tests.harness import distenv_oracle as oracle
from train.cluster import distenv
from train.cluster.launchers import Launcher
from train.errors import UserError

SEED = 39_4
FREE_PORT = 45678

# Open MPI's variables, a launcher defined by its table alone: the same class on each side's base.
MPIRUN = {
    "name": "mpirun",
    "variables": {"world_size": ("OMPI_COMM_WORLD_SIZE",), "rank": ("OMPI_COMM_WORLD_RANK",),
                  "local_world_size": ("OMPI_COMM_WORLD_LOCAL_SIZE",),
                  "local_rank": ("OMPI_COMM_WORLD_LOCAL_RANK",), "node_rank": ("OMPI_COMM_WORLD_NODE_RANK",)},
    "detect": lambda self, environ: "OMPI_COMM_WORLD_SIZE" in environ,
}
OLD_LISTS = (oracle.LAUNCHERS, (type("OpenMPI", (oracle.Launcher,), MPIRUN)(), *oracle.LAUNCHERS))
NEW_LISTS = (distenv.LAUNCHERS, (type("OpenMPI", (Launcher,), MPIRUN)(), *distenv.LAUNCHERS))

# ---- the values a variable takes: good ones, and the ways each kind goes wrong -----------------------------
BROKEN_INT = ("", " ", "x", "-1", "0", "1.5", "99999", " 2 ")
VALUES: dict[str, tuple[str, ...]] = {
    "tasks": ("4", "2(x2)", "1,2(x3)", "2(x3),1", "0,2", "2(y3)", "1(x2)", "3(x0)", "", "2(x2),"),
    "hosts": ("n[1-4]", "gpu[007-008]", "n1", "a,b", "n[1-", "1.1.1.1, 1.1.1.2", "n[1-2],c7", "", "a b"),
    "addr": ("n1", "gpu007", "127.0.0.1", "n[1-2]", "a b", "fe80::1%eth0", "$(x)", "", "a,b"),
    "port": ("29500", "0", "70000", "http", "", "65535", "1"),
    "job": ("4242", "55512345_3", "abc", "0001234", "", "7_x", "99"),
    "step": ("0", "1", "batch", "extern", "interactive", "4294967290", "4294967295", "4294967294", "", "x",
             "BATCH"),
    "distribution": ("block", "cyclic", "plane=2", "arbitrary", "*", "block:cyclic", "cyclic:block", "2", "17",
                     "", "pack"),
    "flag": ("True", "false", " true ", "", "1"),
    "text": ("/d", "", " x ", "0,1", "gpu:2"),
}
KIND = {
    "SLURM_TASKS_PER_NODE": "tasks", "SLURM_STEP_TASKS_PER_NODE": "tasks",
    "SLURM_NODELIST": "hosts", "SLURM_JOB_NODELIST": "hosts", "SLURM_STEP_NODELIST": "hosts",
    "SLURM_JOB_NODELIST_HET_GROUP_0": "hosts", "SLURM_JOB_NODELIST_HET_GROUP_1": "hosts",
    "MASTER_ADDR": "addr", "MASTER_PORT": "port", "SLURM_JOB_ID": "job", "SLURM_JOBID": "job",
    "SLURM_STEP_ID": "step", "SLURM_STEPID": "step", "SLURM_DISTRIBUTION": "distribution",
    "TORCHELASTIC_USE_AGENT_STORE": "flag", "TORCHELASTIC_RUN_ID": "job",
    "DATA_DIR": "text", "TMPDIR": "text", "SLURM_TMPDIR": "text", "CUDA_VISIBLE_DEVICES": "text",
    "SLURM_CLUSTER_NAME": "text", "PYG_SUBMISSION_ID": "text", "SLURM_GPUS_ON_NODE": "text",
}
# Every variable either side reads, and the facts beside them: the ones a perturbation may touch.
POOL = tuple(dict.fromkeys((*distenv.CONTRACT_VARS, *(n for launcher in NEW_LISTS[1] for n in launcher.reads()),
                            "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST_HET_GROUP_0", "SLURM_JOB_NODELIST_HET_GROUP_1",
                            "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT",
                            *(name for name in KIND if name not in distenv.CONTRACT_VARS))))


def broken(rng: random.Random, name: str, value: str | None) -> str:
    """Another value for `name`: one of its kind's (good or bad), or an integer off by one or malformed."""
    kind = KIND.get(name)
    if kind is not None:
        return rng.choice(VALUES[kind])
    if value is not None and value.strip().isdigit() and rng.random() < 0.5:
        return str(max(0, int(value) + rng.choice((-2, -1, 1, 2))))
    return rng.choice((*BROKEN_INT, str(rng.randint(0, 9))))


# ---- a launch: consistent variables for one rank of a random layout ------------------------------------------
def layout(rng: random.Random) -> tuple[list[int], int]:
    """Processes per node (even or not) and a rank among them."""
    nodes = rng.choice((1, 1, 2, 2, 3, 4, 5))
    per = rng.randint(1, 4)
    counts = [per] * nodes if rng.random() < 0.6 else [rng.randint(1, 4) for _ in range(nodes)]
    return counts, rng.randrange(sum(counts))


def compress(counts: list[int]) -> str:
    """SLURM's form of a tasks-per-node list: runs grouped as c(xN)."""
    items, i = [], 0
    while i < len(counts):
        run = next((j for j in range(i, len(counts)) if counts[j] != counts[i]), len(counts)) - i
        items.append(f"{counts[i]}(x{run})" if run > 1 else str(counts[i]))
        i += run
    return ",".join(items)


def place(counts: list[int], rank: int) -> tuple[int, int]:
    start = 0
    for node, count in enumerate(counts):
        if rank < start + count:
            return node, rank - start
        start += count
    raise AssertionError(rank)


def explicit(rng: random.Random, counts: list[int], rank: int) -> dict[str, str]:
    """What torchrun, the enroot hook or a user sets: each variable present or not."""
    node, local = place(counts, rank)
    env = {"WORLD_SIZE": str(sum(counts)), "RANK": str(rank), "LOCAL_RANK": str(local),
           "LOCAL_WORLD_SIZE": str(counts[node]), rng.choice(("GROUP_RANK", "NODE_RANK")): str(node),
           "MASTER_ADDR": rng.choice(("n1", "127.0.0.1", "node01")), "MASTER_PORT": str(rng.randint(1024, 65535))}
    return {k: v for k, v in env.items() if rng.random() < 0.9}


def slurm(rng: random.Random, counts: list[int], rank: int, job: bool = True) -> dict[str, str]:
    """What srun gives a task: the job's variables, the step's, each of srun's aliases present or not."""
    node, local = place(counts, rank)
    hosts = f"n[1-{len(counts)}]" if len(counts) > 1 else "n1"
    env = {"SLURM_PROCID": str(rank), "SLURM_LOCALID": str(local), "SLURM_NODEID": str(node),
           "SLURM_NTASKS": str(sum(counts)), "SLURM_NPROCS": str(sum(counts)), "SLURM_NNODES": str(len(counts)),
           "SLURM_TASKS_PER_NODE": compress(counts), "SLURM_NODELIST": hosts, "SLURM_JOB_NODELIST": hosts,
           "SLURM_JOB_NUM_NODES": str(len(counts)), "SLURM_STEP_NUM_TASKS": str(sum(counts)),
           "SLURM_STEP_NUM_NODES": str(len(counts)), "SLURM_STEP_TASKS_PER_NODE": compress(counts),
           "SLURM_STEP_NODELIST": hosts, "SLURM_STEP_ID": rng.choice(("0", "3")),
           "SLURM_NTASKS_PER_NODE": str(counts[0]), "SLURM_DISTRIBUTION": rng.choice(VALUES["distribution"][:6])}
    if job:
        env["SLURM_JOB_ID"] = rng.choice(("4242", "123456789", "55512345_3"))
    return {k: v for k, v in env.items() if rng.random() < 0.85 or k in ("SLURM_PROCID", "SLURM_JOB_ID")}


def batch(rng: random.Random, counts: list[int]) -> dict[str, str]:
    """A batch script or salloc shell: the job's variables, SLURM's own step or none, ranks 0."""
    env = {k: v for k, v in slurm(rng, counts, 0).items() if not k.startswith("SLURM_STEP_")}
    env.update(SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0")
    if rng.random() < 0.6:
        env["SLURM_STEP_ID"] = rng.choice(("batch", "extern", "interactive", "4294967290", "4294967294"))
    return env


def launch(rng: random.Random) -> dict[str, str]:
    counts, rank = layout(rng)
    kind = rng.choice(("plain", "explicit", "torchrun", "torchrun-in-srun", "srun", "srun-hook", "srun-het",
                       "batch", "slurm-by-hand", "mpirun"))
    if kind == "plain":
        return {}
    if kind == "explicit":
        return explicit(rng, counts, rank)
    if kind.startswith("torchrun"):
        env = {**(slurm(rng, [1] * len(counts), rng.randrange(len(counts))) if kind == "torchrun-in-srun" else {}),
               **explicit(rng, counts, rank), "TORCHELASTIC_RUN_ID": rng.choice(("none", "4242"))}
        if rng.random() < 0.5:
            env["GROUP_WORLD_SIZE"] = str(len(counts))
        if rng.random() < 0.3:
            env["TORCHELASTIC_USE_AGENT_STORE"] = rng.choice(VALUES["flag"])
        return env
    if kind == "srun-hook":  # the hook copies SLURM's values (sometimes the job's, under --preserve-env)
        return {**slurm(rng, counts, rank), **explicit(rng, counts, rank)}
    if kind == "srun-het":
        env = slurm(rng, counts, rank)
        env.update(SLURM_HET_SIZE=rng.choice(("1", "2", "3")), SLURM_JOB_NODELIST_HET_GROUP_0="n[1-2]",
                   SLURM_JOB_NODELIST_HET_GROUP_1=rng.choice(("n[3-5]", "c[1-2]")))
        return env
    if kind == "batch":
        return batch(rng, counts)
    if kind == "slurm-by-hand":
        return {k: v for k, v in slurm(rng, counts, rank, job=False).items() if not k.startswith("SLURM_STEP")}
    node, local = place(counts, rank)
    return {"OMPI_COMM_WORLD_SIZE": str(sum(counts)), "OMPI_COMM_WORLD_RANK": str(rank),
            "OMPI_COMM_WORLD_LOCAL_SIZE": str(counts[node]), "OMPI_COMM_WORLD_LOCAL_RANK": str(local),
            "OMPI_COMM_WORLD_NODE_RANK": str(node), **explicit(rng, counts, rank)}


def environment(rng: random.Random) -> dict[str, str]:
    """A launch, then up to four of its (or any) variables dropped, changed or added."""
    env = launch(rng)
    for _ in range(rng.choice((0, 0, 1, 1, 2, 3, 4))):
        name = rng.choice(tuple(env)) if env and rng.random() < 0.6 else rng.choice(POOL)
        if name in env and rng.random() < 0.3:
            del env[name]
        else:
            env[name] = broken(rng, name, env.get(name))
    return env


# ---- both resolutions -------------------------------------------------------------------------------------
def outcome(resolve: Callable, environ: dict[str, str], launchers) -> tuple:
    """What `resolve` makes of `environ`: the whole DistEnv with its sources in order, or the refusal, or the crash."""
    try:
        env = resolve(environ, pick_free_port=lambda: FREE_PORT, command="python -m train fit x", launchers=launchers)
    except UserError as error:
        return "refused", str(error)
    except Exception as error:  # a crash of the old form must be the new one's too
        return "crashed", type(error).__name__, str(error)
    return "resolved", env.launcher, env.to_dict(), tuple(env.sources.items())


def compare(count: int, seed: int) -> Counter:
    """`count` distinct environments through both; AssertionError at the first that differs."""
    rng, seen, tally = random.Random(seed), set(), Counter()
    while len(seen) < count:
        environ = environment(rng)
        key = hash(tuple(sorted(environ.items())))
        if key in seen:
            continue
        seen.add(key)
        which = rng.random() < 0.3  # with mpirun first in the list, or the shipped list alone
        old = outcome(oracle.resolve, environ, OLD_LISTS[which])
        new = outcome(distenv.resolve, environ, NEW_LISTS[which])
        assert new == old, f"{environ}\nold: {old}\nnew: {new}"
        assert distenv.job_facts(environ) == oracle.job_facts(environ), environ
        assert distenv.detect(environ).name == oracle.detect(environ).name, environ
        tally[old[0], old[1] if old[0] == "resolved" else old[1].split("=")[0].split()[0]] += 1
    return tally


@pytest.mark.parametrize("count", [12_000, pytest.param(120_000, marks=pytest.mark.long)])
def test_every_generated_environment_resolves_as_the_frozen_form_did(count):
    tally = compare(count, SEED)
    resolved = Counter(launcher for (how, launcher), n in tally.items() if how == "resolved" for _ in range(n))
    refused = sum(n for (how, _), n in tally.items() if how == "refused")
    # The environments reach every launcher and both ways out, and the refusals name many different variables.
    assert set(resolved) == {"torchrun", "srun step", "allocation without srun", "explicit variables", "plain",
                             "mpirun"}, resolved
    assert min(resolved.values()) > count // 1000 and refused > count // 5, tally
    assert len({name for (how, name) in tally if how == "refused"}) >= 20, tally
