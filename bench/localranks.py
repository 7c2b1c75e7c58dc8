"""The one launcher of local ranks: N real processes on this machine, each with a launcher's variables.

The benchmarks, `make gpu-check` and the tests (tests/harness/localjob.py, tests/test_resume.py) all start
their ranks here, from one scrubbed environment: no variable of another launch (SLURM's, torchrun's, the
contract's in train/cluster/distenv.py) leaks into a rank, the checkout is importable first and the caller's
PYTHONPATH still follows it. Each rank's output goes to a file (a chatty rank never blocks on a pipe).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from train.cluster.distenv import CONTRACT_VARS
from train.cluster.launchers import LAUNCHERS

ROOT = Path(__file__).resolve().parents[1]
# Every variable a launcher sets or the contract reads, and SLURM's and torchrun's others (restart counts, scratch).
LAUNCH_PREFIXES = ("SLURM_", "TORCHELASTIC_")
LAUNCH_VARS = frozenset((*CONTRACT_VARS, *(name for launcher in LAUNCHERS for name in launcher.reads())))
ABORT_GRACE_S = 5  # after SIGABRT on a hang, for PYTHONFAULTHANDLER to print every thread's stack


def scrubbed_env(environ: Mapping[str, str], extra: Mapping[str, str | None] = (), threads: int | None = None,
                 root: Path = ROOT) -> dict[str, str]:
    """`environ` without any launcher's variables, `root` first on PYTHONPATH (the caller's entries after it),
    unbuffered output, a stack dump on SIGABRT, OMP_NUM_THREADS=`threads` if given, then `extra` (None unsets)."""
    env = {k: v for k, v in environ.items() if k not in LAUNCH_VARS and not k.startswith(LAUNCH_PREFIXES)}
    caller = [entry for entry in environ.get("PYTHONPATH", "").split(os.pathsep) if entry and entry != str(root)]
    env.update(PYTHONPATH=os.pathsep.join([str(root), *caller]), PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return overridden(env, extra)


def overridden(env: Mapping[str, str], extra: Mapping[str, str | None]) -> dict[str, str]:
    """`env` with `extra` applied: a value sets its variable, None unsets it."""
    out = dict(env)
    for key, value in dict(extra).items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def torchrun_env(rank: int, world_size: int, nodes: int, port: int) -> dict[str, str]:
    """What torchrun (or the container's hook) gives rank `rank` of `world_size` spread evenly over `nodes`."""
    per_node = world_size // nodes
    return {"WORLD_SIZE": str(world_size), "RANK": str(rank), "LOCAL_RANK": str(rank % per_node),
            "LOCAL_WORLD_SIZE": str(per_node), "GROUP_RANK": str(rank // per_node), "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port)}


def srun_env(rank: int, world_size: int, nodes: int, job_id: str, port: int) -> dict[str, str]:
    """What srun exports to task `rank` of a job with `world_size` tasks spread evenly over `nodes`."""
    per_node = world_size // nodes
    return {
        "SLURM_JOB_ID": job_id,
        "SLURM_STEP_ID": "0",  # started by srun: a step (train.cluster.launchers refuses a batch shell claiming tasks)
        "SLURM_NTASKS": str(world_size),
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank % per_node),
        "SLURM_NODEID": str(rank // per_node),
        "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_NTASKS_PER_NODE": str(per_node),
        "SLURM_JOB_NODELIST": f"node[1-{nodes}]" if nodes > 1 else "node1",
        "MASTER_ADDR": "127.0.0.1",  # every "node" is this machine
        "MASTER_PORT": str(port),
    }


class LocalRanks:
    """`argv` started `world_size` times; rank r gets `rank_vars(r)` (called just before it starts; None unsets)
    over the scrubbed environment, and writes to `logs/rank-r.log` (a folder of its own that `close` removes when
    `logs` is None)."""

    def __init__(self, argv: Sequence[str], world_size: int, rank_vars: Callable[[int], Mapping[str, str | None]],
                 logs: Path | None = None, extra_env: Mapping[str, str | None] = (), threads: int | None = None):
        self._own_logs = tempfile.TemporaryDirectory(prefix="local-ranks-") if logs is None else None
        folder = Path(self._own_logs.name) if self._own_logs else logs
        folder.mkdir(parents=True, exist_ok=True)
        base = scrubbed_env(os.environ, extra_env, threads)
        self.logs = [folder / f"rank-{rank}.log" for rank in range(world_size)]
        self.procs: list[subprocess.Popen] = []
        for rank, log in enumerate(self.logs):
            with log.open("w") as out:
                self.procs.append(subprocess.Popen(list(argv), cwd=ROOT, env=overridden(base, rank_vars(rank)),
                                                   stdout=out, stderr=subprocess.STDOUT))
        self.started = time.monotonic()
        self.ended_at: dict[int, float] = {}  # rank -> when `wait` saw it end

    def output(self, rank: int) -> str:
        return self.logs[rank].read_text(errors="replace")

    def outputs(self) -> list[str]:
        return [self.output(rank) for rank in range(len(self.procs))]

    def tail(self, chars: int = 3000) -> str:
        """What each rank printed last, with its exit status so far."""
        return "\n".join(f"--- rank {r} (exit {p.poll()}) ---\n{self.output(r)[-chars:]}" for r, p in
                         enumerate(self.procs))

    def wait_for(self, pattern: str, rank: int = 0, timeout: float = 120) -> None:
        """Until rank `rank` prints a line matching `pattern`; RuntimeError once a rank ended or at `timeout`."""
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.output(rank), re.M):
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"rank {rank} never printed {pattern!r}:\n{self.output(rank)[-3000:]}")
            time.sleep(0.02)

    def signal(self, rank: int, signum: int) -> float:
        """Send `signum` to rank `rank`; the time it was sent (time.monotonic)."""
        self.procs[rank].send_signal(signum)
        return time.monotonic()

    def wait(self, timeout: float, dump_stacks: bool = False) -> list[int | None]:
        """Exit statuses once every rank ended or `timeout` passed (None: still running, then killed; with
        `dump_stacks`, SIGABRT first, so that PYTHONFAULTHANDLER prints where it hung)."""
        deadline = time.monotonic() + timeout
        while len(self.ended_at) < len(self.procs) and time.monotonic() < deadline:
            for rank, proc in enumerate(self.procs):
                if rank not in self.ended_at and proc.poll() is not None:
                    self.ended_at[rank] = time.monotonic()
            time.sleep(0.02)
        codes = [proc.poll() for proc in self.procs]
        if dump_stacks:
            self.abort(range(len(self.procs)))
        self.kill()
        return codes

    def abort(self, ranks: Iterable[int]) -> None:
        """SIGABRT to those of `ranks` still running, so that PYTHONFAULTHANDLER prints where each thread is into
        its log, and up to ABORT_GRACE_S for it to."""
        running = [self.procs[rank] for rank in ranks if self.procs[rank].poll() is None]
        for proc in running:
            proc.send_signal(signal.SIGABRT)
        for proc in running:
            try:
                proc.wait(timeout=ABORT_GRACE_S)
            except subprocess.TimeoutExpired:
                pass

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def close(self) -> None:
        """Kill what still runs and remove the logs folder of its own."""
        self.kill()
        if self._own_logs is not None:
            self._own_logs.cleanup()

    def __enter__(self) -> LocalRanks:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
