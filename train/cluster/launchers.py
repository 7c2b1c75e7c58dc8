"""Who started this process: one small class per launcher, tried in `LAUNCHERS` order (the first that detects wins).

A launcher says when it started the process (`detect(environ)`, pure) and answers each field of the
contract itself (the interface and the answers every launcher shares: train/cluster/launcher_base.py).
Under every launcher the container's variables (`EXPLICIT`: WORLD_SIZE, RANK, ..., set by enroot's
PyTorch hook, torchrun or a user) come first. A new launcher is one class here and one entry in
`LAUNCHERS`, with no edit to train/cluster/distenv.py. The order is the documented precedence: torchrun,
an srun step, a batch script or salloc shell, variables set by hand, one local process
(docs/environment.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from train.cluster.envvalues import expand_nodelist, expand_tasks_per_node, parse_int
from train.cluster.hetjob import HET_SIZE_VARS, check_heterogeneous
from train.cluster.jobfacts import read_facts
from train.cluster.launcher_base import (  # noqa: F401 (EXPLICIT, Reading: public here, beside Launcher)
    EXPLICIT,
    JOB_ID_VARS,
    Launcher,
    Reading,
    first,
)
from train.errors import UserError

STEP_ID_VARS = ("SLURM_STEP_ID", "SLURM_STEPID")
SLURM_WORLD_VARS = ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
SLURM_NODES_VARS = ("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
SLURM_TASKS_LIST_VARS = ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
SLURM_NODELIST_VARS = ("SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST")
# The step's own variables, which a batch script or salloc shell never has.
STEP_VARS = ("SLURM_STEP_NUM_TASKS", "SLURM_STEP_NUM_NODES", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE")
# SLURM's own steps that are not srun's: the batch script, the extern and salloc's interactive step
# (by name, or by their ids 0xfffffffa..0xfffffffe as some versions print them).
NON_SRUN_STEPS = {"batch", "extern", "interactive", *(str(n) for n in range(0xFFFFFFFA, 0xFFFFFFFF))}

# field -> SLURM's variables for it (first set wins). `tasks_per_node` is a compressed list ("2(x3),1"),
# `hosts` a node list whose first host is the master, `job_id` gives the port, `distribution` the task order.
SLURM_VARIABLES: dict[str, tuple[str, ...]] = {
    "world_size": SLURM_WORLD_VARS,
    "rank": ("SLURM_PROCID",),
    "num_nodes": SLURM_NODES_VARS,
    "tasks_per_node": SLURM_TASKS_LIST_VARS,
    "local_world_size": ("SLURM_NTASKS_PER_NODE",),  # sbatch's --ntasks-per-node: after the tasks-per-node list
    "node_rank": ("SLURM_NODEID",),
    "local_rank": ("SLURM_LOCALID",),
    "hosts": SLURM_NODELIST_VARS,
    "job_id": JOB_ID_VARS,
    "distribution": ("SLURM_DISTRIBUTION",),
}


def looks_like_a_task(environ: Mapping[str, str]) -> bool:
    """SLURM_PROCID/LOCALID/NODEID above 0: a task of a step (a batch script has 0 for each)."""
    for name in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID"):
        found = first(environ, (name,))
        if found is not None and found[1].isdigit() and int(found[1]) > 0:
            return True
    return False


def in_srun_step(environ: Mapping[str, str]) -> bool:
    """Started by srun: its step id; or, in a hand-made environment without one, the step's own variables;
    or inside a job (SLURM's own step, or a job id) a rank above 0, which only a task of a step has."""
    step = first(environ, STEP_ID_VARS)
    if step is not None and step[1].lower() not in NON_SRUN_STEPS:
        return True
    if step is None and first(environ, STEP_VARS):
        return True
    in_job = step is not None or first(environ, JOB_ID_VARS) is not None
    return in_job and looks_like_a_task(environ)


class Torchrun(Launcher):
    """torchrun (`TORCHELASTIC_RUN_ID`): its own variables only. Under `srun ... torchrun` SLURM's describe the
    tasks that run torchrun, not the processes it starts, so they are not read."""

    name = "torchrun"
    variables = {"num_nodes": ("GROUP_WORLD_SIZE",)}

    def detect(self, environ: Mapping[str, str]) -> bool:
        return "TORCHELASTIC_RUN_ID" in environ

    def agent_store(self, r: Reading) -> bool:
        """torchrun's agent serves the store at MASTER_PORT when TORCHELASTIC_USE_AGENT_STORE=True."""
        return r.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").strip().lower() == "true"

    def job_facts(self, environ: Mapping[str, str]) -> tuple[dict, dict[str, str]]:
        """Outside SLURM, torchrun's own restart count counts."""
        return read_facts(environ, torchrun=True)


class SrunStep(Launcher):
    """A task of an srun step: the step's variables, which hold also on some of the job's nodes and under
    `srun --preserve-env`; EXPLICIT's set beside them (the enroot hook) win but must agree."""

    name = "srun step"
    variables = SLURM_VARIABLES

    def detect(self, environ: Mapping[str, str]) -> bool:
        return in_srun_step(environ)

    def refuse_early(self, environ: Mapping[str, str], command: str) -> None:
        """A step spanning several components of a heterogeneous job (train/cluster/hetjob.py)."""
        check_heterogeneous(environ, is_step=True)

    def agree(self, explicit: tuple[str, int] | None, own: tuple[str, int] | None, what: str) -> None:
        """Both set and different: a leftover from another launch; name both."""
        if explicit is not None and own is not None and explicit[1] != own[1]:
            raise UserError(
                f"{explicit[0]}={explicit[1]} contradicts this srun step's {own[0]}={own[1]} ({what}). "
                f"{explicit[0]} is left over from another launch (exported in the batch script or shell, or "
                "the enroot hook's copy of the job's SLURM_NTASKS under srun --preserve-env); unset it, or "
                "start the processes with torchrun, whose own variables then win."
            )

    def rank_hint(self, environ: Mapping[str, str]) -> str:
        """A rank beyond the step's tasks: in a heterogeneous job, a step across its components."""
        het = first(environ, HET_SIZE_VARS)
        if het:
            return (f"This step spans several components of a heterogeneous job ({het[0]}={het[1]}); train on "
                    "one: srun --het-group=N ...")
        return super().rank_hint(environ)

    def placement_variable(self, field_name: str, launchers_layout: bool) -> str:
        """srun sets SLURM_NODEID and SLURM_LOCALID for every task: name them, whatever gave the layout."""
        return super().placement_variable(field_name, launchers_layout=True)

    def check_master(self, addr: str, environ: Mapping[str, str]) -> None:
        """A node of the job that is not in this step: nobody would listen there."""
        step = first(environ, ("SLURM_STEP_NODELIST",))
        job = first(environ, ("SLURM_JOB_NODELIST", "SLURM_NODELIST"))
        if step is None or job is None:
            return
        step_hosts = expand_nodelist(*step)
        if addr in expand_nodelist(*job) and addr not in step_hosts:
            raise UserError(
                f"MASTER_ADDR={addr} is a node of the job ({job[0]}={job[1]}) but not of this srun step "
                f"({step[0]}={step[1]}): nobody would listen there. Unset MASTER_ADDR (the step's first "
                f"node, {step_hosts[0]}, is then used) or set it to a node of the step."
            )


class BatchShell(Launcher):
    """Inside an allocation but not by srun (a batch script, an salloc shell): one process, on the job's port."""

    name = "allocation without srun"
    variables = {"job_id": JOB_ID_VARS}

    def detect(self, environ: Mapping[str, str]) -> bool:
        in_job = first(environ, STEP_ID_VARS) is not None or first(environ, JOB_ID_VARS) is not None
        return in_job and not in_srun_step(environ)

    def refuse_early(self, environ: Mapping[str, str], command: str) -> None:
        """A lone process claiming the job's several tasks would wait forever for the others."""
        if first(environ, ("WORLD_SIZE",)) is not None:
            return
        claims: tuple[str, int] | None = None
        for name in ("SLURM_NTASKS", "SLURM_NPROCS"):
            found = first(environ, (name,))
            if found is not None:
                claims = (name, parse_int(found[0], found[1], 1))
                break
        if claims is None:
            listed = first(environ, ("SLURM_TASKS_PER_NODE",))
            if listed is not None:
                claims = (listed[0], sum(expand_tasks_per_node(*listed)))
        if claims is None or claims[1] < 2:
            return
        job, step = first(environ, JOB_ID_VARS), first(environ, STEP_ID_VARS)
        step_note = f"{step[0]}={step[1]} is SLURM's own step, not srun's" if step else "no SLURM_STEP_ID"
        where = f"job {job[1]} ({job[0]}={job[1]})" if job else "a job (no SLURM_JOB_ID)"  # SLURM's step alone
        raise UserError(
            f"this process runs inside {where} but was not started by srun ("
            f"{step_note}: a batch script or an salloc shell), and the job has {claims[1]} tasks "
            f"({claims[0]}={environ[claims[0]]}): alone it would wait for {claims[1] - 1} more that never start. "
            f"Start one process per task with: srun {command} (the job's srun options are in "
            "`make srun`), or a single process with: srun --ntasks=1 " + command
        )


class ExplicitVariables(Launcher):
    """No launcher known, but WORLD_SIZE & co. set (by hand, or another launcher), or SLURM-like variables
    without a job (a hand-made environment): what is set is read, nothing is compared."""

    name = "explicit variables"
    variables = SLURM_VARIABLES

    def detect(self, environ: Mapping[str, str]) -> bool:
        return any(name in environ for name in self.reads())


class LocalProcess(Launcher):
    """Nothing set: one local process on 127.0.0.1 and a free port."""

    name = "plain"

    def detect(self, environ: Mapping[str, str]) -> bool:
        return True


# The detection order: the first whose detect() holds started the process.
LAUNCHERS: tuple[Launcher, ...] = (Torchrun(), SrunStep(), BatchShell(), ExplicitVariables(), LocalProcess())


def detect(environ: Mapping[str, str], launchers: tuple[Launcher, ...] = LAUNCHERS) -> Launcher:
    """The launcher that started the process with `environ`: the first of `launchers` that detects it."""
    found = next((launcher for launcher in launchers if launcher.detect(environ)), None)
    if found is None:
        raise ValueError(f"no launcher of {[launcher.name for launcher in launchers]} detects this environment; "
                         "end the list with one that always does (LocalProcess)")
    return found
