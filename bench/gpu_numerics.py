"""gpu-check's numerics checks: what trainer.deterministic=true costs on the GPU (issue 30 §7), and what
16-bit features (data.feature_dtype) cost in accuracy (§1).

The same training steps (SAGE 256, [25, 10], the seed's settings on gpu-check's graph) are timed in two
processes: one with the switches a `trainer.deterministic=true` run sets before CUDA starts (train/loop/numerics.py:
TF32 off, deterministic algorithms and cuBLAS workspace), one with torch's and the container's own defaults
(`false`). Each process samples its batches first and then times the model step alone (forward, backward, Adam),
the part the switches change. The ratio decides the default: above DEFAULT_LIMIT the default should become false,
and bit-exact resume on a GPU then needs trainer.deterministic=true (docs/training.md).

`python -m bench.gpu_numerics --deterministic true|false ...` is one such process: it prints one JSON line.

`feature_dtype`: the synthetic config trained on one GPU with the default sampler.device=auto, once with float32
features and once with bfloat16: the accuracies side by side, and where auto put the graph (its log line).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.gpu_forms import ROOT, clean_env, need_gpus

DEFAULT_LIMIT = 1.10  # deterministic / fast step time above which trainer.deterministic should default to false
WARM_STEPS = 3


def verdict(ratio: float, limit: float = DEFAULT_LIMIT) -> str:
    """What the measured cost says about trainer.deterministic's default."""
    cost = f"trainer.deterministic=true costs {ratio - 1:+.1%} per training step"
    if ratio > limit:
        return (f"{cost} (over {limit - 1:.0%}): the default should become false; bit-exact resume on a GPU then "
                "needs trainer.deterministic=true")
    return f"{cost} (at most {limit - 1:.0%}): the default stays true"


def measure(nodes: int, features: int, degree: float, batch_size: int, steps: int, device_name: str,
            deterministic: bool) -> dict:
    """Milliseconds per training step on pre-sampled batches, in this process's numerics."""
    import torch
    import torch.nn.functional as F

    from train.config import DataConfig, SamplerConfig, load_config
    from train.graph.datasets.loading import num_classes, synthetic_graph
    from train.graph.sampling.device_plan import plan_sampling
    from train.loop.numerics import set_gpu_numerics
    from train.models import ModelStep, build_model, hop_counts

    device = torch.device(device_name)
    numerics = set_gpu_numerics(deterministic) if device.type == "cuda" else "CPU: numerics as they stand"
    config = load_config("reddit", [f"sampler.batch_size={batch_size}"])
    data = synthetic_graph(DataConfig(num_nodes=nodes, avg_degree=degree, num_features=features, num_classes=41))
    sampling = plan_sampling(data, SamplerConfig(device="cuda" if device.type == "cuda" else "cpu"), device)
    seeds = data.train_idx[torch.randperm(data.train_idx.numel(), generator=torch.Generator().manual_seed(0))]
    batches = []
    for batch in sampling.loader(seeds, config.sampler.num_neighbors, batch_size, seed=1):
        batches.append(sampling.complete(batch, device).to(device))
        if len(batches) == WARM_STEPS + steps:
            break
    step = ModelStep(build_model(config.model, data.num_features, num_classes(data), config.trainer.seed).to(device))
    optimizer = torch.optim.Adam(step.parameters(), lr=config.optim.lr)
    started = 0.0
    for index, batch in enumerate(batches):
        if index == WARM_STEPS:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            started = time.perf_counter()
        optimizer.zero_grad()
        out = step(batch.x, batch.edge_index, *hop_counts(batch, config.model))[: batch.batch_size]
        F.cross_entropy(out, batch.y[: batch.batch_size]).backward()
        optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    timed = len(batches) - WARM_STEPS
    return {"deterministic": deterministic, "steps": timed, "numerics": numerics,
            "step_ms": (time.perf_counter() - started) * 1000 / max(timed, 1)}


def _worker_command(args, deterministic: bool) -> list[str]:
    return [sys.executable, "-m", "bench.gpu_numerics", "--deterministic", str(deterministic).lower(),
            "--nodes", str(args.nodes), "--features", str(args.features), "--degree", str(args.degree),
            "--batch-size", str(args.batch_size), "--steps", str(args.batches), "--device", "cuda"]


def check_determinism(args, budget: float) -> dict:
    """Both settings, each in its own process with the environment its run would have; the ratio and the verdict."""
    need_gpus(1, "")
    from train.loop.numerics import numerics_env

    steps = {}
    for deterministic in (False, True):  # each run's own environment: `fit` exports numerics_env's before CUDA starts
        env = clean_env(numerics_env(deterministic, clean_env({})))
        proc = subprocess.run(_worker_command(args, deterministic), cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=max(budget / 2, 1.0))
        if proc.returncode != 0:
            raise RuntimeError(f"trainer.deterministic={str(deterministic).lower()} exited {proc.returncode}:\n"
                               f"{(proc.stdout + proc.stderr)[-2000:]}")
        steps[deterministic] = json.loads(proc.stdout.strip().splitlines()[-1])
    ratio = steps[True]["step_ms"] / steps[False]["step_ms"]
    return {"deterministic_step_ms": steps[True]["step_ms"], "fast_step_ms": steps[False]["step_ms"],
            "deterministic_over_fast": ratio, "steps_each": steps[True]["steps"], "verdict": verdict(ratio),
            "numerics": {"true": steps[True]["numerics"], "false": steps[False]["numerics"]}}


FEATURE_DTYPES = ("float32", "bfloat16")
FEATURE_RUN = ["--config", "synthetic", "trainer.epochs=3", "dist.backend=nccl", "output.progress=lines",
               "trainer.checkpoint_every=0"]


def placement_line(output: str) -> str:
    """Rank 0's line saying where sampler.device=auto put the graph and why (train/loop/fit.py)."""
    found = re.search(r"^rank 0: (sampler\.device=auto: .*)$", output, re.M)
    return found.group(1) if found else "rank 0 said nothing about sampler.device=auto"


def feature_dtype_figures(runs: dict[str, dict]) -> dict:
    """Each feature dtype's accuracies and placement, and each 16-bit one's difference from float32."""
    out: dict = {}
    for dtype, run in runs.items():
        out[f"{dtype}_val_acc"], out[f"{dtype}_test_acc"] = run["best_val_acc"], run["test_acc_at_best_val"]
        out[f"{dtype}_placement"] = run["placement"]
    for dtype in runs:
        if dtype != "float32" and "float32" in runs:
            out[f"{dtype}_minus_float32_test_acc"] = (runs[dtype]["test_acc_at_best_val"]
                                                      - runs["float32"]["test_acc_at_best_val"])
    return out


def check_feature_dtype(args, budget: float) -> dict:
    """The synthetic config on one GPU, float32 against bfloat16 features, from the same seed."""
    need_gpus(1, "")
    runs = {}
    for dtype in FEATURE_DTYPES:
        with tempfile.TemporaryDirectory() as out:
            proc = subprocess.run([sys.executable, "-m", "train", "fit", *FEATURE_RUN, f"data.feature_dtype={dtype}",
                                   f"output.dir={out}"], cwd=ROOT, env=clean_env({}), capture_output=True, text=True,
                                  timeout=max(budget / len(FEATURE_DTYPES), 1.0))
            if proc.returncode != 0:
                raise RuntimeError(f"data.feature_dtype={dtype}: fit exited {proc.returncode}:\n"
                                   f"{(proc.stdout + proc.stderr)[-2000:]}")
            summary = json.loads(Path(out, "summary.json").read_text())
        runs[dtype] = {**summary, "placement": placement_line(proc.stdout)}
    return feature_dtype_figures(runs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deterministic", choices=("true", "false"), required=True)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--features", type=int, required=True)
    parser.add_argument("--degree", type=float, required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.nodes, args.features, args.degree, args.batch_size, args.steps, args.device,
                             args.deterministic == "true")), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
