"""`make gpu-check` (`python -m bench.gpu_check`): what a first lent GPU should tell us, in one run.

Checks, each bounded in time and isolated (a failure is recorded, the next check still runs), in the order a lent
GPU must tell first (issue 30's figures, then the checks that passed before):
  env            python, torch, CUDA, GPU, PyG, pyg-lib, NCCL as this interpreter sees them
  sampler        sampled edges/s, fanouts [25, 10], batch 1024: the CPU sampler, Floyd's hops on the GPU, and the
                 fused hops `sampler.device=cuda` uses (goal: 250M edges/s, issue 30), with the fused hops' ops
                 and host syncs per batch (bench/hop_profile.py)
  training       `python -m train fit` on one GPU at the seed's settings with the defaults (configs/reddit.yaml:
                 SAGE 256, [25, 10], batch 1024, 4 loader workers): seeds/s, epoch time, where the time goes,
                 where sampler.device=auto put the graph (goal: 150,000 seeds/s)
  profile        the training check's run for a few steps under torch.profiler (bench/gpu_profile.py): per step,
                 the host's ops and syncs per thread, waits for the device, kernels and the
                 GPU's busy fraction, the busiest ops and kernels
  products       an ogbn-products-sized synthetic graph under configs/ogbn-products.yaml with the defaults: a full
                 epoch (goal 1.0 s) and the exact evaluation of every node (goal 2 s)
  determinism    the training step with trainer.deterministic=true against false, and the ratio that decides
                 its default (bench/gpu_numerics.py)
  feature_dtype  the synthetic config on one GPU with float32 and with bfloat16 features: accuracy beside
                 accuracy, and where sampler.device=auto put the graph
  cuda_tests     the GPU-only tests (`pytest -m gpu`): evaluation exact on the GPU and within near-ties of
                 the CPU, one sampler map on the GPU over many epochs, the CUDA RNG under another layout,
                 a CUDA optimizer state sent on the CPU, deterministic scatter, sampling, timing
  nccl           a single-rank `python -m train fit` over NCCL (tiny config)
  pinned         feature gathering for a batch: gather into pinned memory + non-blocking copy against
                 a pageable gather + copy (GB/s of features delivered to the GPU)
  resume_layout  a checkpoint resumes bit for bit with four GPUs visible or one (one GPU: simulated layouts)
  shared_gpu     two tasks on one GPU: refused at once with the srun line (bench/gpu_forms.py, as the next three)
  late_node      a node loading past the collective timeout, an uneven epoch (2 GPUs)
  dead_rank      a killed rank is named by the survivor within the collective timeout (2 GPUs)
Graph (sampler, pinned, training): Reddit's nodes (232,965) and features (602) with a tenth of its edges
(avg degree 50, ~11.6M), so that the whole check stays under 8 minutes on one GPU with 16 cores. Without
CUDA the checks that need it are skipped with the reason and the others run on the small graph of
`--small` (3,000 nodes), so the script is exercised before any GPU exists in about a minute. Writes one
JSON (the figures, the machine, each check's status) and prints a table. Exit 0 when no check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench.gpu_exchange import check_exchanges
from bench.gpu_forms import (  # noqa: F401 - Skip is this module's too (its checks raise it)
    Skip,
    check_dead_rank,
    check_late_node,
    check_resume_layout,
    check_shared_gpu,
    clean_env,
    need_gpus,
)
from bench.gpu_numerics import check_determinism, check_feature_dtype, placement_line
from bench.gpu_profile import check_profile

ROOT = Path(__file__).resolve().parents[1]
REDDIT_NODES, REDDIT_FEATURES, REDDIT_CLASSES = 232_965, 602, 41
PRODUCTS_NODES, PRODUCTS_FEATURES, PRODUCTS_DEGREE, PRODUCTS_CLASSES = 2_449_029, 100, 25.0, 47
PRODUCTS_TRAIN_FRACTION, PRODUCTS_VAL_FRACTION = 0.08, 0.016  # OGB's split: 196,615 train, 39,323 val
GPU_DEGREE = 50.0  # a tenth of Reddit's 492: the graph builds in seconds, and sampling still subsamples [25, 10]
FANOUTS = [25, 10]


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _need_cuda() -> None:
    need_gpus(1, "")


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a one-process run: no SLURM or launcher variables, this repository importable."""
    return clean_env(extra)


def _run(cmd: list[str], timeout: float, **extra_env: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=ROOT, env=_clean_env(**extra_env), capture_output=True, text=True,
                          timeout=max(timeout, 1.0))
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} ... exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-2000:]}")
    return proc


# ---- the checks: each returns its figures, raises Skip with a reason, or fails ---------------------

def check_env(args, budget: float) -> dict:
    import torch
    import torch.distributed as dist
    import torch_geometric
    import torch_geometric.typing

    info = {"python": sys.executable, "python_version": sys.version.split()[0], "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
            "torch_geometric": torch_geometric.__version__, "pyg_lib": bool(torch_geometric.typing.WITH_PYG_LIB),
            "nccl_available": dist.is_available() and dist.is_nccl_available()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_count=torch.cuda.device_count(),
                    gpu_memory_gib=round(props.total_memory / 2**30, 1), capability=f"{props.major}.{props.minor}",
                    float32_matmul_precision=torch.get_float32_matmul_precision(),
                    cuda_matmul_allow_tf32=torch.backends.cuda.matmul.allow_tf32)
    return info


def gpu_test_files(tests_dir: Path = ROOT / "tests") -> list[str]:
    """The test modules that hold GPU tests: only they are collected, so a module whose imports this
    Python lacks (e.g. PIL for the report tests) cannot fail the check."""
    return sorted(str(p.relative_to(ROOT)) for p in tests_dir.glob("test_*.py") if "mark.gpu" in p.read_text())


def check_cuda_tests(args, budget: float) -> dict:
    _need_cuda()
    import importlib.util

    if importlib.util.find_spec("pytest") is None:
        raise Skip(f"pytest is not installed in {sys.executable} (pip install pytest to run the GPU tests)")
    files = gpu_test_files()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", *files],
                          cwd=ROOT, env=_clean_env(), capture_output=True, text=True, timeout=budget)
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    counts = {}
    for part in tail.strip("= ").split(","):
        words = part.split()
        if len(words) >= 2 and words[0].isdigit():
            counts[words[1]] = int(words[0])
    if proc.returncode not in (0, 5):  # 5: nothing collected
        # the whole report goes to the JSON: a failure's cause is often well above pytest's summary
        raise RuntimeError(f"pytest -m gpu exited {proc.returncode}: {tail}\n{proc.stdout[-30000:]}")
    return {"summary": tail, "files": files, **counts}


def check_nccl(args, budget: float) -> dict:
    _need_cuda()
    import torch.distributed as dist

    if not dist.is_nccl_available():
        raise Skip("this torch build has no NCCL")
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        proc = _run([sys.executable, "-m", "train", "fit", "--config", "tiny", "dist.backend=nccl", "trainer.epochs=1",
                     "output.progress=lines", f"output.dir={out}"], budget)
        rows = [json.loads(line) for line in Path(out, "metrics.jsonl").read_text().splitlines()]
    if "backend nccl" not in proc.stdout:
        raise RuntimeError(f"the run did not report backend nccl:\n{proc.stdout[-1500:]}")
    return {"seconds_to_finish": time.perf_counter() - started, "val_acc": rows[-1].get("val_acc")}


def _graph(args):
    """The synthetic graph of the sampler and pinned checks (Reddit's nodes and features unless small), built once."""
    if getattr(args, "_graph", None) is None:
        from train.config import DataConfig
        from train.graph.datasets.loading import synthetic_graph
        from train.graph.typed_csc import build_csc

        started = time.perf_counter()
        data = synthetic_graph(DataConfig(num_nodes=args.nodes, avg_degree=args.degree, num_features=args.features,
                                          num_classes=REDDIT_CLASSES))
        args._graph = data, build_csc(data.edge_index, data.num_nodes), time.perf_counter() - started
    return args._graph


def _sampler(data, csc, device: str, fused: bool = False):
    """The project's sampler on `device`: Floyd's hops (TorchNeighborSampler), or the fused hops that
    sampler.device=cuda uses (FusedNeighborSampler)."""
    from torch_geometric.data import Data

    from train.graph.sampling.samplers import FusedNeighborSampler, TorchNeighborSampler

    placed = tuple(t.to(device) if t is not None else None for t in csc)
    sampler_class = FusedNeighborSampler if fused else TorchNeighborSampler
    return sampler_class(Data(num_nodes=data.num_nodes), FANOUTS, seed=1, csc=placed)


def _sampler_rate(data, csc, device: str, seeds, batches: int, batch_size: int, fused: bool = False) -> float:
    """Sampled edges/s of `_sampler(...)`, its seeds passed from the host as a loader passes them."""
    import torch
    from torch_geometric.sampler import NodeSamplerInput

    sampler = _sampler(data, csc, device, fused)
    chunks = list(seeds.split(batch_size))[: batches + 2]
    edges, started = 0, 0.0
    for i, batch in enumerate(chunks):
        if i == 2:  # two warm-up batches
            if device == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
        out = sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=batch))
        if i >= 2:
            edges += sum(out.num_sampled_edges)
    if device == "cuda":
        torch.cuda.synchronize()
    return edges / (time.perf_counter() - started)


def check_sampler(args, budget: float) -> dict:
    import torch

    data, csc, built_s = _graph(args)
    gen = torch.Generator().manual_seed(0)
    seeds = data.train_idx[torch.randperm(data.train_idx.numel(), generator=gen)]
    result = {"nodes": data.num_nodes, "edges": data.edge_index.size(1), "graph_build_s": built_s,
              "fanouts": FANOUTS, "batch_size": args.batch_size, "batches": args.batches,
              "cpu_threads": torch.get_num_threads(),
              "cpu_edges_per_s": _sampler_rate(data, csc, "cpu", seeds, args.batches, args.batch_size)}
    if _cuda():
        result["cuda_edges_per_s"] = _sampler_rate(data, csc, "cuda", seeds, args.batches, args.batch_size)
        result["cuda_over_cpu"] = result["cuda_edges_per_s"] / result["cpu_edges_per_s"]
        result["cuda_fused_edges_per_s"] = _sampler_rate(data, csc, "cuda", seeds, args.batches, args.batch_size,
                                                         fused=True)  # what sampler.device=cuda samples with
        result["fused_over_floyd"] = result["cuda_fused_edges_per_s"] / result["cuda_edges_per_s"]
        from bench.hop_profile import hop_profile  # imports torch: not before a check runs

        # what each batch launches and waits for (bench/hop_profile.py): the counts the edges/s stand on
        fused = hop_profile(_sampler(data, csc, "cuda", fused=True), seeds, args.batch_size)
        result.update(fused_ops_per_batch=fused["ops"], fused_host_syncs_per_batch=fused["host_syncs"],
                      fused_cuda_syncs_per_batch=fused["cuda_syncs"])
    else:
        result["cuda"] = "skipped: no CUDA device"
    return result


def check_pinned(args, budget: float) -> dict:
    _need_cuda()
    import torch

    from train.graph.sampling.device_plan import gather_pinned

    data, csc, _ = _graph(args)
    x = data.x
    index = torch.randint(data.num_nodes, (args.gather_rows,))
    rates = {}
    for name in ("pageable", "pinned", "pageable", "pinned"):  # A B A B; the second of each counts
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(args.gather_repeats):
            rows = gather_pinned(x, index) if name == "pinned" else x.index_select(0, index)
            rows.to("cuda", non_blocking=name == "pinned")
        torch.cuda.synchronize()
        moved = args.gather_repeats * index.numel() * x.size(1) * x.element_size()
        rates[name] = moved / (time.perf_counter() - started)
    return {"rows_per_batch": index.numel(), "features": x.size(1), "pageable_gb_per_s": rates["pageable"] / 1e9,
            "pinned_gb_per_s": rates["pinned"] / 1e9, "pinned_over_pageable": rates["pinned"] / rates["pageable"]}


def _fit(config: str, overrides: list[str], budget: float) -> tuple[list[dict], str]:
    """One rank of `python -m train fit` on this GPU (or the CPU): its metrics rows and its output. A run past the
    budget is stopped and its finished epochs still count; fewer than two epochs is a failure."""
    backend = "nccl" if _cuda() else "gloo"
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen([sys.executable, "-m", "train", "fit", "--config", config, *overrides,
                                 f"dist.backend={backend}", f"output.dir={out}"], cwd=ROOT, env=_clean_env(),
                                stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            code = proc.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
        log.seek(0)
        output = log.read()
        metrics = Path(out, "metrics.jsonl")
        rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.is_file() else []
    if code not in (0, None) or len(rows) < 2:
        why = f"exited {code}" if code is not None else f"stopped after {budget:.0f} s with {len(rows)} epoch(s) done"
        raise RuntimeError(f"python -m train fit {why}:\n{output[-2000:]}")
    return rows, output


def _epoch_figures(rows: list[dict], budget: float, full_steps: int, steps: int) -> dict:
    """Epoch 1 (epoch 0 warms up) and the evaluation of epoch 2, the last."""
    warm = rows[1]
    result = {"steps_per_epoch_measured": steps, "seeds_per_second": warm["seeds_per_second"],
              "epoch_seconds": warm["epoch_seconds"],
              "full_epoch_seconds_projected": warm["epoch_seconds"] * full_steps / max(steps, 1),
              "phase_seconds": warm["phase_seconds"]}
    if len(rows) > 2:
        result.update(eval_seconds=rows[2]["phase_seconds"]["eval"], val_acc=rows[2]["val_acc"])
    else:
        result["eval_seconds"] = f"not finished within {budget:.0f} s"
    return result


def check_training(args, budget: float) -> dict:
    """`python -m train fit` at the seed's settings with the defaults (sampler.device=auto): epoch 0 warms up,
    epoch 1 is measured, epoch 2 adds the evaluation."""
    overrides = ["data.name=synthetic", f"data.num_nodes={args.nodes}", f"data.avg_degree={args.degree}",
                 f"data.num_features={args.features}", f"data.num_classes={REDDIT_CLASSES}",
                 f"sampler.num_workers={args.workers}", f"sampler.batch_size={args.batch_size}",
                 "trainer.epochs=3", f"trainer.eval_every={10**6}", f"trainer.max_steps_per_epoch={args.steps}",
                 "trainer.checkpoint_every=0", "output.progress=lines", f"trainer.log_every={10**6}"]
    rows, output = _fit("reddit", overrides, budget)
    train_seeds = int(args.nodes * 0.6)  # data.train_fraction's default
    full_steps = -(-train_seeds // args.batch_size)
    steps = min(args.steps, full_steps) if args.steps else full_steps
    return {"device": "cuda" if _cuda() else "cpu (no CUDA: the same run on the CPU over gloo)",
            "config": "reddit (seed's settings) on a synthetic graph", "placement": placement_line(output),
            **_epoch_figures(rows, budget, full_steps, steps)}


def check_products(args, budget: float) -> dict:
    """An ogbn-products-sized synthetic graph (2,449,029 nodes, 100 features, average degree 25, OGB's 8 % of
    training seeds) under configs/ogbn-products.yaml (SAGE 3x256, [15, 10, 5], batch 1024) with the defaults:
    full epochs (goal 1.0 s, issue 30 §6) and the exact layer-wise evaluation of every node (goal 2 s, §5)."""
    overrides = ["data.name=synthetic", f"data.num_nodes={args.products_nodes}",
                 f"data.avg_degree={args.products_degree}", f"data.num_features={args.products_features}",
                 f"data.num_classes={PRODUCTS_CLASSES}", f"data.train_fraction={PRODUCTS_TRAIN_FRACTION}",
                 f"data.val_fraction={PRODUCTS_VAL_FRACTION}", f"sampler.num_workers={args.workers}",
                 "trainer.epochs=3", f"trainer.eval_every={10**6}", "trainer.checkpoint_every=0",
                 "output.progress=lines", f"trainer.log_every={10**6}"]
    rows, output = _fit("ogbn-products", overrides, budget)
    full_steps = -(-int(args.products_nodes * PRODUCTS_TRAIN_FRACTION) // 1024)
    return {"config": "ogbn-products on a synthetic graph of its size", "nodes": args.products_nodes,
            "placement": placement_line(output), **_epoch_figures(rows, budget, full_steps, full_steps)}


# In order of what a lent GPU must tell first: the figures issue 30 asks, then the checks that passed before.
CHECKS = {"env": check_env, "sampler": check_sampler, "training": check_training, "profile": check_profile,
          "products": check_products,
          "determinism": check_determinism, "feature_dtype": check_feature_dtype, "cuda_tests": check_cuda_tests,
          "nccl": check_nccl, "exchanges": check_exchanges, "pinned": check_pinned,
          "resume_layout": check_resume_layout,
          "shared_gpu": check_shared_gpu, "late_node": check_late_node, "dead_rank": check_dead_rank}
# Seconds each check may take at most (the overall --budget caps them all together). On one H200 with 16 cores
# the checks that run there (late_node and dead_rank need two GPUs) add up to well under the budget.
LIMITS = {"env": 30, "cuda_tests": 150, "nccl": 60, "exchanges": 60, "shared_gpu": 60, "resume_layout": 120,
          "late_node": 120,
          "dead_rank": 100, "pinned": 30, "sampler": 90, "training": 150, "profile": 60, "products": 120,
          "determinism": 90,
          "feature_dtype": 80}


def run_checks(args, checks=CHECKS, limits=LIMITS, clock=time.monotonic) -> dict:
    """Every check in order, each within min(its limit, what is left of the budget); never raises."""
    deadline = clock() + args.budget
    results = {}
    for name, check in checks.items():
        left = deadline - clock()
        started = clock()
        if left < 5:
            results[name] = {"status": "skipped", "reason": f"out of time (--budget {args.budget:.0f} s spent)"}
            continue
        try:
            figures = check(args, min(limits.get(name, left), left))
            results[name] = {"status": "ok", **figures}
        except Skip as exc:
            results[name] = {"status": "skipped", "reason": str(exc)}
        except subprocess.TimeoutExpired as exc:
            results[name] = {"status": "failed", "reason": f"timed out after {exc.timeout:.0f} s"}
        except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
            results[name] = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}",
                             "traceback": traceback.format_exc()[-3000:]}
        results[name]["seconds"] = round(clock() - started, 2)
        print(f"gpu-check: {name} {results[name]['status']} ({results[name]['seconds']:.1f} s)", flush=True)
    return results


def _brief(result: dict) -> str:
    """The figures of one check in one line (numbers rounded)."""
    if result["status"] != "ok":
        return result.get("reason", "").splitlines()[0][:110]
    parts = []
    for key, value in result.items():
        if key in ("status", "seconds", "traceback", "python") or isinstance(value, (dict, list)):
            continue
        if isinstance(value, float):
            value = f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
        parts.append(f"{key}={value}")
    return ", ".join(parts)


def summary_table(results: dict) -> str:
    from bench.common import table

    return table(["check", "status", "seconds", "figures"],
                 [[name, r["status"], r["seconds"], _brief(r)] for name, r in results.items()])


def write_json(path: Path, record: dict) -> None:
    """Written to a temporary file and renamed: the JSON is complete or absent."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None,
                        help="where to write the result (default bench/results/gpu-check-<time>.json)")
    parser.add_argument("--small", action="store_true",
                        help="a quick run on a small graph (for tests and smoke checks)")
    parser.add_argument("--only", default="", help=f"comma-separated subset of: {', '.join(CHECKS)}")
    parser.add_argument("--budget", type=float, default=460.0,
                        help="seconds for all checks together (default 460: under 8 minutes)")
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--features", type=int, default=None)
    args = parser.parse_args(argv)
    small = args.small or not _cuda()  # without a GPU the figures only exercise the script: keep them quick
    args.nodes = args.nodes or (3000 if small else REDDIT_NODES)
    args.degree = 10.0 if small else GPU_DEGREE
    args.features = args.features or (16 if small else REDDIT_FEATURES)
    args.batch_size = 256 if small else 1024
    args.batches = 4 if small else 20
    args.steps = 3 if small else 60  # training steps per epoch (the epoch is capped; the full one is projected)
    args.workers = 0 if small else 4
    args.products_nodes = args.nodes if small else PRODUCTS_NODES
    args.products_degree = args.degree if small else PRODUCTS_DEGREE
    args.products_features = args.features if small else PRODUCTS_FEATURES
    args.gather_rows, args.gather_repeats = (1000, 2) if small else (200_000, 10)
    if args.only:
        unknown = [c for c in args.only.split(",") if c not in CHECKS]
        if unknown:
            parser.error(f"--only: unknown check(s) {', '.join(unknown)}; valid: {', '.join(CHECKS)}")
    for name in ("nodes", "features"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be > 0, got {getattr(args, name)}")
    if args.budget <= 0:
        parser.error(f"--budget must be > 0 seconds, got {args.budget}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    checks = {k: v for k, v in CHECKS.items() if not args.only or k in args.only.split(",") or k == "env"}
    started = time.perf_counter()
    results = run_checks(args, checks)
    from bench.common import machine

    record = {"bench": "gpu-check", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "seconds": round(time.perf_counter() - started, 1), "small": args.small or not _cuda(),
              "ok": all(r["status"] != "failed" for r in results.values()), "machine": machine(), "checks": results}
    path = args.json or ROOT / "bench" / "results" / f"gpu-check-{time.strftime('%Y%m%d-%H%M%S')}.json"
    write_json(path, record)
    print()
    print(summary_table(results))
    print(f"\ngpu-check {'passed' if record['ok'] else 'FAILED'} in {record['seconds']:.0f} s; wrote {path}")
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
