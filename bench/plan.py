"""The memory plan against measurement: each term of `python -m train plan` next to what real ranks hold.

Each case starts real ranks of `python -m train fit` (gloo, CPU; the variables srun sets, several
"nodes" on this machine) under a probe that changes nothing in the run: it reads /proc/self/status
around the run's own steps (loading the graph, building the trainer, each training epoch, each
evaluation). Before a step the probe resets the peak (`/proc/self/clear_refs`, VmHWM := VmRSS), after
it reads the peak, so each step's peak is measured apart; the rank's peak over the run is the largest.

Private and shared memory are told apart: pages of the node-shared graph (/dev/shm, RssShmem) and of
the shared libraries (RssFile) are counted once per node by the plan, so a step's private peak is its
peak growth less what it added of those. The table gives each term as measured (the largest over the
ranks that have it), as planned, and their ratio (planned / measured: at least 1, at most 1.5 is the goal).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import bench_main, free_port, table, write_result

PROBE_DIR = "PLAN_PROBE_DIR"  # where each probed rank writes rank<R>.json
STATUS_KEYS = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem")


def status() -> dict[str, int]:
    """This process's resident set and its parts (bytes), from /proc/self/status."""
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in STATUS_KEYS:
            found[key] = int(rest.split()[0]) * 1024
    return found


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)


@dataclass
class Probe:
    """Per step: RSS before, peak during, and its private part; the run's peak over all steps, and its private
    peak (less the pages of the node-shared graph this rank maps, which the plan counts once per node)."""

    steps: dict[str, dict] = field(default_factory=dict)
    peak_rss: int = 0
    private_peak: int = 0

    def measure(self, name: str, call):
        before = status()
        self.peak_rss = max(self.peak_rss, before["VmHWM"])
        reset_peak()
        try:
            return call()
        finally:
            after = status()
            shared_growth = (after["RssShmem"] + after["RssFile"]) - (before["RssShmem"] + before["RssFile"])
            peak_growth = after["VmHWM"] - before["VmRSS"]
            entry = {"before": before, "after": after, "peak_growth": peak_growth,
                     "private_peak_growth": peak_growth - max(shared_growth, 0),
                     "kept": after["RssAnon"] - before["RssAnon"]}
            old = self.steps.get(name)
            if old is None or entry["private_peak_growth"] > old["private_peak_growth"]:
                self.steps[name] = entry
            self.peak_rss = max(self.peak_rss, after["VmHWM"])
            self.private_peak = max(self.private_peak, after["VmHWM"] - after["RssShmem"])

    def report(self) -> dict:
        from train.heap import applied

        final = status()
        return {"steps": self.steps, "peak_rss": max(self.peak_rss, final["VmHWM"]),
                "private_peak": max(self.private_peak, final["VmHWM"] - final["RssShmem"]), "final": final,
                "heap": applied()}  # the C heap it ran with (train/heap.py)


def install(probe: Probe) -> None:
    """Wrap the run's own steps (the functions run_fit calls) so that each is measured; nothing else changes."""
    import train.loop.run as run_module
    from train.loop.fit import Trainer

    obtain_graph = run_module.obtain_graph
    run_module.obtain_graph = lambda config, env: probe.measure("loading", lambda: obtain_graph(config, env))
    for method, step in (("__init__", "trainer"), ("train_epoch", "training"), ("evaluate", "evaluation")):
        original = getattr(Trainer, method)

        def wrapped(self, *args, _original=original, _step=step, **kwargs):
            return probe.measure(_step, lambda: _original(self, *args, **kwargs))

        setattr(Trainer, method, wrapped)


def probe_main(argv: list[str]) -> None:
    """`python -m bench.plan --probe fit ...`: `python -m train fit ...` with its steps measured."""
    import atexit

    from train.heap import tune_heap

    tune_heap(os.environ)  # as `python -m train` does, before `install` imports torch
    probe = Probe()
    probe.steps["start"] = {"after": status()}
    out = Path(os.environ[PROBE_DIR])

    def write() -> None:
        rank = os.environ.get("SLURM_PROCID") or os.environ.get("RANK") or "0"
        (out / f"rank{rank}.json").write_text(json.dumps(probe.report()))

    atexit.register(write)
    install(probe)
    sys.argv = ["python -m train", *argv]
    from train.__main__ import console_entry

    console_entry()


# ---- running a case: ranks of `fit` on several "nodes" of this machine, and the plan for it ----------

def run_probed(config: str, overrides: list[str], ranks: int, nodes: int, timeout: float = 600,
               extra_env: dict[str, str] | None = None) -> list[dict]:
    """Each rank's probe report (rank order) for `fit --config config overrides` on `ranks` ranks, `nodes` nodes;
    `extra_env` adds to (or replaces in) the ranks' environment."""
    from bench.localranks import LocalRanks, srun_env

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="plan-probe-") as tmp:
        argv = ["fit", "--config", config, *overrides, f"output.dir={Path(tmp) / 'run'}", "output.progress=lines"]
        with LocalRanks([sys.executable, "-m", "bench.plan", "--probe", *argv], ranks,
                        lambda rank: srun_env(rank, ranks, nodes, "4343", port),
                        extra_env={"PLAN_PROBE_DIR": tmp, **(extra_env or {})}) as job:
            codes = job.wait(timeout, dump_stacks=True)
            if codes != [0] * ranks:  # None: still running at the timeout (its stack is in the tail)
                raise RuntimeError(f"probed run failed (exit statuses {codes}):\n{job.tail()}")
        return [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(ranks)]


# ---- measured against planned -----------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    name: str
    config: str
    overrides: tuple[str, ...]
    ranks: int
    nodes: int


SIZE_300K = ("data.num_nodes=300000", "data.avg_degree=25", "data.num_features=128", "data.num_classes=16")
SHORT = ("trainer.epochs=1", "trainer.max_steps_per_epoch=4")
CASES = (
    Case("synthetic, 2 nodes x 2 ranks (issue 20)", "synthetic", SHORT, 4, 2),
    Case("300k nodes, 128 features, data.share=node", "synthetic", SIZE_300K + SHORT, 2, 1),
    Case("300k nodes, data.share=process", "synthetic", SIZE_300K + SHORT + ("data.share=process",), 2, 1),
    Case("300k nodes, eval.mode=sampled", "synthetic", SIZE_300K + SHORT + ("eval.mode=sampled",), 2, 1),
)


def planned(case: Case):
    from train.cli.plan_run import graph_size, make_plan
    from train.config import load_config

    config = load_config(case.config, list(case.overrides))
    return make_plan(config, graph_size(config), case.nodes, case.ranks, gpus=False)


def _term(rows: dict[str, int], prefix: str) -> int:
    return sum(v for k, v in rows.items() if k.startswith(prefix))


def compare(case: Case, reports: list[dict], plan) -> list[tuple[str, int, int]]:
    """(term, measured bytes, planned bytes): each step's largest private peak growth over the ranks that have
    it, the runtime before the graph, a rank's private peak, a node's (its ranks' private peaks and the shared
    graph once)."""
    rank_rows, per_node = plan.rows["rank"], case.ranks // case.nodes

    def step(name: str) -> int:
        return max(r["steps"][name]["private_peak_growth"] for r in reports if name in r["steps"])

    shared = plan.rows["node"].get("graph, shared once (/dev/shm or node-local disk)", 0)
    node_peaks = [sum(r["private_peak"] for r in reports[n * per_node:(n + 1) * per_node]) + shared
                  for n in range(case.nodes)]
    return [
        ("runtime before the graph", max(r["steps"]["loading"]["before"]["VmRSS"] for r in reports),
         _term(rank_rows, "runtime")),
        ("loading", step("loading"), _term(rank_rows, "while loading")),
        ("training", step("training"), _term(rank_rows, "training")),
        ("evaluation", step("evaluation"), _term(rank_rows, "evaluation")),
        ("rank peak", max(r["private_peak"] for r in reports), plan.rank_peak),
        ("node peak", max(node_peaks), plan.node_peak),
    ]


def run(args) -> dict:
    from train.plan.terms import MIB

    cases = [c for c in CASES if not args.cases or any(word in c.name for word in args.cases)]
    rows, results = [], []
    for case in cases:
        print(f"plan: {case.name} ({case.ranks} ranks on {case.nodes} node(s)) ...", flush=True)
        reports = run_probed(case.config, list(case.overrides), case.ranks, case.nodes, timeout=args.timeout)
        terms = compare(case, reports, planned(case))
        results.append({"case": case.name, "overrides": case.overrides, "ranks": case.ranks, "nodes": case.nodes,
                        "terms": [{"term": t, "measured_bytes": m, "planned_bytes": p} for t, m, p in terms],
                        "raw": reports})
        rows += [[case.name if i == 0 else "", term, round(m / MIB, 1), round(p / MIB, 1), round(p / max(m, 1), 2)]
                 for i, (term, m, p) in enumerate(terms)]
    print()
    print("The memory plan against real ranks (CPU, gloo): private memory per term, MiB; goal: ratio 1.0-1.5 for "
          "the peaks")
    print(table(["case", "term", "measured MiB", "planned MiB", "planned / measured"], rows))
    path = write_result("plan", {"cases": results})
    print(f"wrote {path}")
    return {"cases": results}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cases", nargs="*", default=[], help="only cases whose name holds one of these words")
    parser.add_argument("--timeout", type=float, default=1800)


def main(argv=None) -> int:
    return bench_main(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--probe"]:
        probe_main(sys.argv[2:])
    else:
        raise SystemExit(main())
