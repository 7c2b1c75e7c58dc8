"""The GPU forms of what a first multi-GPU run meets (`make gpu-check` rows; the CPU forms are in `make test`).

Each check runs real `python -m train fit` processes over NCCL (the plain launcher contract: WORLD_SIZE,
RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR/PORT) and raises `Skip` with the reason where
this machine cannot hold its form:
  shared_gpu     two tasks on one GPU: both refused at once (exit 2) with the srun line to use
  resume_layout  a checkpoint written under another GPU layout resumes, bit for bit: on one GPU by
                 rewriting its CUDA RNG part as written on cuda:3 of 4 (and in the list format before),
                 on two GPUs for real (each task sees both, then only its own)
  late_node      two nodes, one loading 25 s past a 10 s collective timeout, shards uneven in steps
                 (the optimizer state synced across ranks): needs 2 GPUs
  dead_rank      SIGKILL of one rank: the other ends within dist.collective_timeout_seconds and names
                 it: needs 2 GPUs
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import free_port
from bench.localranks import LocalRanks, scrubbed_env, torchrun_env

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--config", "tiny", "dist.backend=nccl", "output.progress=lines"]
EXACT = [*TINY, "trainer.deterministic=true"]  # bit for bit on a GPU needs it (docs/training.md)
# tiny with 1709 nodes: 1025 training seeds, 513 and 512 per rank: 5 and 4 steps of 128 (an uneven epoch)
UNEVEN = "data.num_nodes=1709"
ADVICE = "--gpus-per-task=1 --gpu-bind=none"


class Skip(Exception):
    """A check that cannot run here; the message is the reason."""


def gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def device_ids() -> list[str]:
    """The ids for CUDA_VISIBLE_DEVICES of the GPUs visible here, in order (SLURM may have narrowed them)."""
    listed = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return listed or [str(i) for i in range(gpus())]


def need_gpus(count: int, why: str) -> None:
    have = gpus()
    if have == 0:
        raise Skip("no CUDA device visible to this Python (set GPU_PYTHON to a CUDA-enabled interpreter)")
    if have < count:
        raise Skip(f"needs {count} GPUs, {have} visible: {why}")


def clean_env(extra: dict[str, str | None]) -> dict[str, str]:
    """This environment without SLURM or launcher variables, this repository importable, `extra` applied
    (a None value unsets): bench/localranks.py's."""
    return scrubbed_env(os.environ, extra)


class Job(LocalRanks):
    """`python -m train fit ARGS` as `ranks` processes of `nodes` nodes on this machine, each logging to a file."""

    def __init__(self, args: list[str], ranks: int, logs: Path, nodes: int = 1,
                 rank_env: Callable[[int], dict] | None = None):
        port = free_port()
        super().__init__([sys.executable, "-m", "train", "fit", *args], ranks,
                         lambda r: {**torchrun_env(r, ranks, nodes, port), **(rank_env(r) if rank_env else {})},
                         logs)

    def tail(self, chars: int = 1500) -> str:
        return super().tail(chars)


def final_weights(run_dir: Path) -> str:
    """The SHA-256 of a finished run's final weights (summary.json); every rank must have ended with them."""
    summary = json.loads((run_dir / "summary.json").read_text())
    if not summary["weights_same_on_all_ranks"]:
        raise RuntimeError(f"the ranks of {run_dir} ended with different weights (see its log)")
    return summary["weights_sha256"]


def run_job(args: list[str], ranks: int, logs: Path, timeout: float, **kwargs) -> Job:
    """A job that must end with status 0 on every rank within `timeout`."""
    logs.mkdir(parents=True, exist_ok=True)
    job = Job(args, ranks, logs, **kwargs)
    codes = job.wait(timeout)
    if codes != [0] * ranks:
        raise RuntimeError(f"python -m train fit {' '.join(args[-4:])} exited {codes}:\n{job.tail()}")
    return job


# ---- two tasks on one GPU --------------------------------------------------------------------------
def check_shared_gpu(args, budget: float) -> dict:
    need_gpus(1, "")
    forms = {"both_see_gpu_0": {"CUDA_VISIBLE_DEVICES": device_ids()[0]}}  # SLURM's --gpus-per-node=1 with 2 tasks
    if gpus() == 1 and "CUDA_VISIBLE_DEVICES" not in os.environ:
        forms["node_has_one_gpu"] = {"CUDA_VISIBLE_DEVICES": None}  # no binding at all
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, env in forms.items():
            job = Job([*TINY, f"output.dir={tmp}/{name}"], 2, Path(tmp), rank_env=lambda r, e=env: e)
            codes = job.wait(min(budget / len(forms), 90))
            seconds = time.monotonic() - job.started
            if codes != [2, 2] or any(ADVICE not in job.output(r) for r in range(2)):
                raise RuntimeError(f"{name}: expected both ranks refused (exit 2) with the srun line, got {codes}:\n"
                                   f"{job.tail()}")
            result[f"{name}_refused_in_s"] = round(seconds, 1)
        result["message"] = next(line for line in job.output(0).splitlines() if ADVICE in line)[:160]
    return result


# ---- another GPU layout on resume -----------------------------------------------------------------
def _rewrite_cuda_rng(checkpoint: Path, as_written: Callable[[dict], object]) -> None:
    """Rewrite the rank's CUDA RNG part of a checkpoint as another layout would have written it."""
    from train.loop import checkpoint as ck

    payload = ck.load_checkpoint(checkpoint)
    for rank in payload["ranks"]:
        rank["rng"]["cuda"] = as_written(rank["rng"]["cuda"])
    checkpoint.write_bytes(ck.encode(payload))


def check_resume_layout(args, budget: float) -> dict:
    need_gpus(1, "")
    from train.loop import checkpoint as ck

    per_run = budget / (7 if gpus() >= 2 else 4)  # the runs below, one after the other
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        run_job([*EXACT, f"output.dir={out}/whole"], 1, out / "logs-whole", per_run)
        whole = final_weights(out / "whole")
        run_job([*EXACT, "trainer.epochs=1", f"output.dir={out}/half"], 1, out / "logs-half", per_run)
        layouts = {"cuda3_of_4": lambda own: {"device": 3, "state": own["state"]},
                   "list_of_4": lambda own: [own["state"]] * 4}  # the format before: one state per visible GPU
        for name, as_written in layouts.items():
            shutil.copytree(out / "half", out / name)
            _rewrite_cuda_rng(ck.list_checkpoints(out / name / ck.CHECKPOINT_DIR)[-1], as_written)
            resumed = run_job([*EXACT, f"output.dir={out}/{name}"], 1, out / f"logs-{name}", per_run)
            if "resuming from" not in resumed.output(0):
                raise RuntimeError(f"{name}: the run did not resume:\n{resumed.tail()}")
            result[f"{name}_bit_exact"] = final_weights(out / name) == whole
        if gpus() >= 2:  # for real: each task sees both GPUs (cuda:LOCAL_RANK), then only its own (cuda:0)
            ids = device_ids()[:2]
            both = {"CUDA_VISIBLE_DEVICES": ",".join(ids)}
            run_job([*EXACT, f"output.dir={out}/whole2"], 2, out / "logs-w2", per_run, rank_env=lambda r: both)
            run_job([*EXACT, "trainer.epochs=1", f"output.dir={out}/two"], 2, out / "logs-t1", per_run,
                    rank_env=lambda r: both)
            run_job([*EXACT, f"output.dir={out}/two"], 2, out / "logs-t2", per_run,
                    rank_env=lambda r: {"CUDA_VISIBLE_DEVICES": ids[r]})
            result["two_gpus_bit_exact"] = final_weights(out / "two") == final_weights(out / "whole2")
    if not all(result.values()):  # trainer.deterministic=true promises it on one GPU model and software
        raise RuntimeError(f"a resumed run did not end with the uninterrupted run's weights: {result}")
    return result


# ---- a late node, an uneven epoch -------------------------------------------------------------------
def check_late_node(args, budget: float) -> dict:
    need_gpus(2, "NCCL refuses two ranks on one GPU (the CPU form: make test, "
                 "tests/test_multiprocess.py::test_a_node_that_loads_late_keeps_the_others_waiting_not_failing)")
    timeout, delay = 10, 25
    with tempfile.TemporaryDirectory() as tmp:
        job = run_job([*TINY, UNEVEN, f"dist.collective_timeout_seconds={timeout}", f"data.load_delay_seconds={delay}",
                       "data.load_delay_node=1", f"output.dir={tmp}/run"], 2, Path(tmp) / "logs", budget, nodes=2,
                      rank_env=lambda r: {"CUDA_VISIBLE_DEVICES": device_ids()[r]})
        final_weights(Path(tmp) / "run")  # raises if the ranks ended with different weights after the uneven epoch
    return {"collective_timeout_s": timeout, "load_delay_s": delay, "seconds": round(time.monotonic() - job.started),
            "uneven_epoch_same_weights": True}


# ---- a dead rank ------------------------------------------------------------------------------------
def check_dead_rank(args, budget: float) -> dict:
    need_gpus(2, "NCCL refuses two ranks on one GPU (the CPU form: make test, tests/test_resume.py)")
    from train.errors import EXIT_FAILED

    timeout = 20
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "logs").mkdir()
        job = Job([*TINY, "trainer.epochs=3", "trainer.log_every=1", "trainer.step_delay_seconds=0.3",
                   f"dist.collective_timeout_seconds={timeout}", f"output.dir={tmp}/run"], 2, Path(tmp) / "logs")
        try:
            job.wait_for(r"^epoch 0 step 3/", 0, budget / 2)
            job.procs[1].send_signal(signal.SIGKILL)
            killed = time.monotonic()
            job.procs[0].wait(timeout=timeout + 60)
            ended = time.monotonic() - killed
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"rank 0 still ran {timeout + 60} s after rank 1 was killed:\n{job.tail()}") from None
        finally:
            job.kill()
        said = next((line for line in job.output(0).splitlines() if "stopping because" in line), "")
    if job.procs[0].returncode != EXIT_FAILED or "rank 1" not in said:
        raise RuntimeError(f"rank 0 exited {job.procs[0].returncode} without naming rank 1:\n{job.tail()}")
    return {"collective_timeout_s": timeout, "survivor_ended_after_s": round(ended, 1), "message": said[:160]}
