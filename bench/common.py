"""What every benchmark shares: the machine's description, result files, tables, local ranks, PSS."""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.localranks import ROOT, LocalRanks, torchrun_env
from train.cluster.distenv import free_port  # also for bench.gpu, which imports it from here

RESULTS = Path(os.environ.get("BENCH_RESULTS") or ROOT / "bench" / "results")  # BENCH_RESULTS: e.g. a test's tmp dir
RESULT_TAG = "BENCH_RESULT "
EXIT_GRACE_S = 120  # after rank 0 has reported, every rank only has to exit


def _first_line_with(path: str, key: str) -> str:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine() -> dict:
    """Enough to tell whether two result files can be compared."""
    import numpy
    import torch
    import torch_geometric
    import torch_geometric.typing

    mem_kib = _first_line_with("/proc/meminfo", "MemTotal").split()
    info = {
        "host": socket.gethostname(),
        "cpu_model": _first_line_with("/proc/cpuinfo", "model name") or platform.processor(),
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(int(mem_kib[0]) / 2**20, 2) if mem_kib else None,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_geometric": torch_geometric.__version__,
        "pyg_lib": bool(torch_geometric.typing.WITH_PYG_LIB),
        "torch_sparse": bool(torch_geometric.typing.WITH_TORCH_SPARSE),
        "numpy": numpy.__version__,
        "torch_threads": torch.get_num_threads(),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "cuda": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                    gpu_count=torch.cuda.device_count(), cuda_version=torch.version.cuda)
    return info


CPU_RANKS = 2  # local CPU ranks of a benchmark on a machine without a GPU (sized for the 2-core machine)


def local_ranks(cuda_devices: int, requested: int = 0) -> tuple[int, str]:
    """(ranks, backend) of a benchmark's local ranks: one per GPU over NCCL where GPUs are visible (`requested`
    of them, when given), else `requested` (or CPU_RANKS) CPU ranks over gloo."""
    if requested < 0:
        raise BenchError(f"--ranks {requested} must be >= 0 (0: one per visible GPU, else {CPU_RANKS} CPU ranks).")
    if cuda_devices > 0:
        if requested > cuda_devices:
            raise BenchError(f"--ranks {requested}: this machine has {cuda_devices} visible GPU(s), one rank each; "
                             f"give at most {cuda_devices} (0: one per GPU).")
        return requested or cuda_devices, "nccl"
    return requested or CPU_RANKS, "gloo"


def machine_summary(info: dict) -> str:
    """The machine a figure was measured on, in one line: its GPUs (name, memory) where the run used them, its
    cores and CPU."""
    cores = f"{info['usable_cores']} cores ({info['cpu_model']})"
    if info.get("cuda"):
        return f"{info['gpu_count']} x {info['gpu']} ({info['gpu_memory_gib']} GiB), {cores}"
    return f"{cores}, no GPU"


def write_result(name: str, payload: dict) -> Path:
    """bench/results/<name>-<time>.json: the figures plus the machine they were measured on."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS / f"{name}-{stamp}.json"
    record = {"bench": name, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(), **payload}
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def table(headers: Sequence[str], rows: Sequence[Sequence]) -> str:
    """A plain fixed-width table (numbers right-aligned)."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [all(_is_number(row[i]) for row in rows) for i in range(len(headers))]

    def fmt(row):
        return "  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric)).rstrip()

    lines = [fmt(cells[0]), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in cells[1:]]
    return "\n".join(lines)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) < 10 else f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def gib(n: float) -> float:
    return n / 2**30


class BenchError(RuntimeError):
    """A benchmark's ranks failed, hung or gave no result: reported as one message, exit status 1."""


def _result_line(output: str) -> str | None:
    return next((line for line in output.splitlines() if line.startswith(RESULT_TAG)), None)


def _wait_for_ranks(ranks: LocalRanks, timeout: float) -> tuple[bool, list[int]]:
    """Wait until rank 0 has reported (its result line, or its end), watching every rank: one that fails (a port
    taken between free_port and its bind, an error) would otherwise leave rank 0 waiting in a collective until the
    timeout. Once rank 0 has reported, every rank, rank 0 too, only has to leave. Returns whether the timeout passed,
    and the ranks that did not leave within EXIT_GRACE_S of the report: hung in their teardown (torch.distributed's
    destructors, now and then on gloo), their stacks dumped into their output, then killed."""
    procs = ranks.procs

    def reported() -> bool:
        return procs[0].poll() is not None or _result_line(ranks.output(0)) is not None

    deadline = time.monotonic() + timeout
    while not reported() and not any(p.poll() for p in procs[1:]):
        if time.monotonic() > deadline:
            return True, []
        time.sleep(0.2)
    if not reported():
        return False, []  # another rank failed first: rank 0 is killed with the rest, its output says where it was
    hung, left_by = [], time.monotonic() + EXIT_GRACE_S
    for rank, proc in enumerate(procs):
        try:
            proc.wait(timeout=max(0.0, left_by - time.monotonic()))
        except subprocess.TimeoutExpired:
            hung.append(rank)
    ranks.abort(hung)
    return False, hung


def launch_local_ranks(module: str, args: Sequence[str], nprocs: int, timeout: float,
                       extra_env: dict[str, str] | None = None) -> dict:
    """Start `nprocs` real processes as the local ranks of one node (torchrun's variables, bench/localranks.py)
    and return the JSON that rank 0 prints after RESULT_TAG. `BENCH_T0` is each process's start time."""
    port = free_port()
    threads = max(1, len(os.sched_getaffinity(0)) // nprocs)

    def rank_vars(rank: int) -> dict[str, str]:
        return {**torchrun_env(rank, nprocs, 1, port), "BENCH_T0": repr(time.time())}

    with LocalRanks([sys.executable, "-m", module, *args], nprocs, rank_vars, extra_env=extra_env or {},
                    threads=threads) as ranks:
        try:
            timed_out, hung = _wait_for_ranks(ranks, timeout)
        finally:
            ranks.kill()
        outputs = ranks.outputs()
        procs = ranks.procs
    failed = [r for r, p in enumerate(procs) if p.returncode and r not in hung]
    detail = "\n".join(f"--- rank {r} (exit {p.returncode}) ---\n{o[-3000:]}" for r, (p, o) in
                       enumerate(zip(procs, outputs)))
    if timed_out:
        raise BenchError(f"{module}: rank 0 gave no result within {timeout:g} s; give more with --timeout (a busy "
                         f"machine can be several times slower). What the ranks printed:\n{detail}")
    if failed:
        raise BenchError(f"{module} {' '.join(args)} failed:\n{detail}")
    result = _result_line(outputs[0])
    if result is None:
        raise BenchError(f"{module} printed no result line:\n{outputs[0][-3000:]}")
    if hung:
        stacks = "\n".join(f"--- rank {r} ---\n{outputs[r][-2000:]}" for r in hung)
        print(f"warning: rank(s) {hung} did not exit within {EXIT_GRACE_S} s of rank 0's result (killed; the result "
              f"stands). Where they were:\n{stacks}", file=sys.stderr, flush=True)
    return json.loads(result[len(RESULT_TAG):])


def emit(result: dict) -> None:
    """What a worker (rank 0) hands back to `launch_local_ranks`."""
    print(RESULT_TAG + json.dumps(result), flush=True)


def pss(pid: int | str = "self") -> dict[str, int]:
    """Proportional set size and its parts, in bytes, from /proc/PID/smaps_rollup."""
    wanted = ("Rss", "Pss", "Pss_Anon", "Pss_File", "Pss_Shmem")
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in wanted:
            out[key.lower()] = int(rest.split()[0]) * 1024
    return out


def touch(tensors) -> None:
    """Read every page, so a mapped file counts in full in PSS (and a lazy copy cannot hide)."""
    import torch

    for t in tensors:
        if t is not None and t.numel():
            flat = t.reshape(-1)
            (flat.sum() if flat.is_floating_point() else flat.to(torch.int64).sum()).item()


def bench_main(doc: str, add_arguments, run, argv=None, worker=None) -> int:
    """`main` of a benchmark module: parse the options it knows, ignore the rest, run.

    `python -m bench` passes one option list to all benchmarks, so unknown options are fine.
    A benchmark that starts local ranks gives `worker`: those processes get the hidden
    `--worker` flag, run it, and leave as `python -m train` does.
    """
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args, _unknown = parser.parse_known_args(argv)
    if args.worker and worker is not None:
        from train.__main__ import exit_without_teardown
        from train.heap import tune_heap

        tune_heap(os.environ)  # every worker, the project's or an anchor's, with the heap `python -m train` has
        worker(args)
        exit_without_teardown(0)  # gloo can hang CPython's teardown (see train/__main__.py)
    try:
        run(args)
    except BenchError as exc:  # ranks that failed or hung: their output, not this process's traceback
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0
