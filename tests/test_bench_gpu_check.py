"""`make gpu-check` (bench/gpu_check.py) runs where no GPU exists: the CUDA checks are skipped with
their reason, the rest measure, and one JSON plus a table come out. Its scheduling (one failing or
slow check never hides the others; the overall budget holds) is tested with stand-in checks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest
import torch

from bench import gpu_check, gpu_imports, gpu_numerics
from tests.harness.localjob import ROOT
from train.config import load_config

CUDA_CHECKS = ("cuda_tests", "nccl", "shared_gpu", "resume_layout", "late_node", "dead_rank", "pinned",
               "determinism", "feature_dtype")
GPU_FORMS = ("shared_gpu", "resume_layout", "late_node")  # two tasks on one GPU, another layout, a late node


def make(*args, env=None, timeout=600):
    clean = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "GPU_PYTHON")}
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env={**clean, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.long  # about 30 s of CPU: beside the cluster's tests (tests/harness/streams.py)
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU behaviour (CUDA parts skipped); a GPU is here")
def test_make_gpu_check_runs_on_cpu_and_writes_one_json(tmp_path):
    out = tmp_path / "check.json"
    proc = make("gpu-check", f"GPU_CHECK_ARGS=--small --json {out}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads(out.read_text())
    checks = record["checks"]
    assert list(checks) == list(gpu_check.CHECKS)
    assert record["ok"] is True and record["small"] is True and record["machine"]["cuda"] is False
    for name in CUDA_CHECKS:
        assert checks[name]["status"] == "skipped" and "no CUDA device" in checks[name]["reason"], checks[name]
    env = checks["env"]
    assert env["status"] == "ok" and env["cuda_available"] is False and env["torch"] == torch.__version__
    sampler = checks["sampler"]
    assert sampler["status"] == "ok" and sampler["cpu_edges_per_s"] > 0 and sampler["cuda"].startswith("skipped")
    assert sampler["nodes"] == 3000 and sampler["edges"] > 0
    training = checks["training"]
    assert training["status"] == "ok" and training["device"].startswith("cpu")
    assert training["seeds_per_second"] > 0 and training["epoch_seconds"] > 0
    assert set(training["phase_seconds"]) >= {"sample", "gather", "copy", "compute", "allreduce", "eval", "other"}
    assert training["eval_seconds"] > 0 and 0 <= training["val_acc"] <= 1
    exchanges = checks["exchanges"]  # over gloo here: the rows the fetch returns are the gather's
    assert exchanges["status"] == "ok" and exchanges["backend"] == "gloo" and exchanges["rows_exact"] is True
    assert exchanges["fetch_mib_per_s"] > 0 and exchanges["all_to_all_mib_per_s"] > 0
    profile = checks["profile"]  # the CPU run profiled: the step's and the prefetching thread's ops, no kernels
    assert profile["status"] == "ok" and profile["steps"] > 0 and profile["prefetch"] == 1, profile
    assert profile["host_ops"]["training"] > 0 and profile["host_ops"]["sampling"] > 0
    assert profile["host_syncs"]["sampling"] > 0 and "kernels" not in profile
    # the printed table: one line per check with its status
    for name, result in checks.items():
        assert any(line.split()[:2] == [name, result["status"]] for line in proc.stdout.splitlines()), name
    assert "gpu-check passed" in proc.stdout and str(out) in proc.stdout
    assert not list(tmp_path.glob(".*.tmp"))
    assert all(name in checks for name in GPU_FORMS)  # the rows README quotes, skipped here with the reason


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU behaviour; a GPU is here")
def test_without_a_gpu_the_graph_is_the_small_one_and_two_gpu_forms_say_so():
    args = gpu_check.parse_args([])
    assert (args.nodes, args.degree, args.features, args.workers) == (3000, 10.0, 16, 0)
    for check in (gpu_check.check_late_node, gpu_check.check_dead_rank, gpu_check.check_shared_gpu):
        with pytest.raises(gpu_check.Skip, match="no CUDA device visible"):
            check(args, 10)


def test_a_two_gpu_form_on_one_gpu_names_what_it_needs_and_where_the_cpu_form_runs(monkeypatch):
    from bench import gpu_forms

    monkeypatch.setattr(gpu_forms, "gpus", lambda: 1)
    with pytest.raises(gpu_check.Skip) as info:
        gpu_check.check_late_node(_args(), 10)
    assert "needs 2 GPUs, 1 visible: NCCL refuses two ranks on one GPU" in str(info.value)
    assert "test_a_node_that_loads_late_keeps_the_others_waiting_not_failing" in str(info.value)


@pytest.mark.parametrize("value, message", [
    ("/no/such/python", "GPU_PYTHON=/no/such/python is not an executable Python"),
    ("/bin/true", "GPU_PYTHON=/bin/true cannot import torch"),
])
def test_a_bad_gpu_python_is_a_message(value, message, tmp_path):
    proc = make("gpu-check", f"GPU_PYTHON={value}", f"GPU_CHECK_ARGS=--small --json {tmp_path / 'x.json'}",
                timeout=60)
    assert proc.returncode != 0 and message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "x.json").exists()


# A Python that finds every module but one: `hostlist` refused by a finder run at start-up (sitecustomize).
BLOCKER = """import sys


class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name == "hostlist":
            raise ModuleNotFoundError("no module named 'hostlist' (blocked by the test)")


sys.meta_path.insert(0, Blocked())
"""


def test_a_python_lacking_a_package_the_train_package_imports_is_refused_naming_it(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{tmp_path}${{PYTHONPATH:+:$PYTHONPATH}}" '
                      f'exec "{ROOT}/.venv/bin/python" "$@"\n')
    python.chmod(0o755)
    proc = make("gpu-check", f"GPU_PYTHON={python}", f"GPU_CHECK_ARGS=--small --json {tmp_path / 'x.json'}",
                timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "lacks what the train package imports: hostlist (imported by train/cluster/envvalues.py; pip install " \
           "'python-hostlist" in proc.stderr and "Traceback" not in proc.stderr
    assert "torch_geometric" not in proc.stderr and not (tmp_path / "x.json").exists()


def test_the_imports_checked_are_the_packages_load_time_ones_each_a_pyproject_dependency():
    modules = gpu_imports.imported_modules(ROOT / "train")
    assert {"torch", "torch_geometric", "yaml", "hostlist", "numpy"} <= set(modules)
    assert not {"ogb", "matplotlib", "train", "os"} & set(modules)  # optional (imported in a function), ours, stdlib
    requirements = gpu_imports.dependencies((ROOT / "pyproject.toml").read_text())
    assert {m: gpu_imports.distribution_of(m, requirements) for m in ("yaml", "hostlist", "torch")} == {
        "yaml": "pyyaml>=6.0", "hostlist": "python-hostlist>=1.23", "torch": "torch>=2.1"}
    unprovided = [m for m in modules if gpu_imports.distribution_of(m, requirements) is None]
    assert unprovided == [], "imported by train/ but not in pyproject's dependencies"
    lines = gpu_imports.missing(modules, requirements, importable=lambda m: m != "numpy")
    assert lines == [f"numpy (imported by {modules['numpy']}; pip install 'numpy>=1.24')"]


@pytest.mark.parametrize("argv, message", [
    (["--only", "sampler,warp"], "unknown check(s) warp"),
    (["--budget", "0"], "--budget must be > 0"),
    (["--nodes", "-5"], "--nodes must be > 0"),
])
def test_bad_options_exit_2_with_the_valid_values(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        gpu_check.parse_args(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def _args(budget=100.0):
    return gpu_check.parse_args(["--small", "--budget", str(budget)])


def test_a_failing_check_is_recorded_and_the_next_still_runs():
    ran = []

    def broken(args, budget):
        raise ValueError("boom")

    def skipped(args, budget):
        raise gpu_check.Skip("needs a unicorn")

    def fine(args, budget):
        ran.append(budget)
        return {"figure": 1.5}

    def slow(args, budget):
        raise subprocess.TimeoutExpired("cmd", budget)

    results = gpu_check.run_checks(_args(), {"a": broken, "b": skipped, "c": slow, "d": fine}, limits={"d": 7})
    assert results["a"]["status"] == "failed" and results["a"]["reason"] == "ValueError: boom"
    assert "Traceback" in results["a"]["traceback"]
    assert results["b"] == {"status": "skipped", "reason": "needs a unicorn", "seconds": results["b"]["seconds"]}
    assert results["c"]["status"] == "failed" and results["c"]["reason"].startswith("timed out after")
    assert results["d"]["status"] == "ok" and results["d"]["figure"] == 1.5 and ran == [7]  # its own limit
    table = gpu_check.summary_table(results)
    assert "ValueError: boom" in table and "needs a unicorn" in table and "figure=1.5" in table


def test_the_budget_bounds_all_checks_together():
    now = [0.0]

    def takes(seconds):
        def check(args, budget):
            assert budget <= 20 - now[0]  # never more than what is left
            now[0] += seconds
            return {}
        return check

    results = gpu_check.run_checks(_args(budget=20), {"a": takes(12), "b": takes(5), "c": takes(1)},
                                   clock=lambda: now[0])
    assert [results[k]["status"] for k in "abc"] == ["ok", "ok", "skipped"]
    assert "out of time" in results["c"]["reason"]


def test_json_is_written_whole_or_not_at_all(tmp_path):
    path = tmp_path / "deep" / "r.json"
    gpu_check.write_json(path, {"t": time.time()})
    assert json.loads(path.read_text())["t"] > 0 and not list(path.parent.glob(".*.tmp"))


def test_only_modules_with_gpu_tests_are_collected():
    files = gpu_check.gpu_test_files()
    assert "tests/test_timing.py" in files and "tests/test_sampler.py" in files
    assert "tests/test_report.py" not in files  # no GPU test there (and it imports PIL)


# ---- issue 30 §7: what determinism costs; the default follows the figure ------------------------------------
@pytest.mark.parametrize("ratio, default", [(1.04, "the default stays true"), (1.10, "the default stays true"),
                                            (1.31, "the default should become false")])
def test_the_determinism_verdict_follows_the_ratio(ratio, default):
    said = gpu_numerics.verdict(ratio)
    assert default in said and f"{ratio - 1:+.1%}" in said
    assert ("bit-exact resume on a GPU then needs trainer.deterministic=true" in said) == (ratio > 1.10)


def test_the_determinism_worker_times_training_steps_on_presampled_batches():
    """The CPU form of what each of the check's two processes measures (on a GPU: its run's numerics)."""
    measured = gpu_numerics.measure(nodes=600, features=8, degree=6.0, batch_size=64, steps=2, device_name="cpu",
                                    deterministic=True)
    assert measured["steps"] == 2 and measured["step_ms"] > 0 and measured["deterministic"] is True
    command = gpu_numerics._worker_command(gpu_check.parse_args(["--small"]), deterministic=False)
    assert command[1:5] == ["-m", "bench.gpu_numerics", "--deterministic", "false"] and command[-1] == "cuda"


def test_the_feature_dtype_figures_put_accuracy_beside_accuracy_with_where_auto_put_the_graph():
    said = "sampler.device=auto: sampling on cuda:0: the graph structure (0.01 GiB) and features (0.00 GiB) need ..."
    log = f"run dir x  world_size 1  backend nccl  device cuda:0\nrank 0: {said}\nepoch 0 step 1/10 loss 2.0\n"
    assert gpu_numerics.placement_line(log) == said
    assert gpu_numerics.placement_line("no such line") == "rank 0 said nothing about sampler.device=auto"
    runs = {"float32": {"best_val_acc": 0.91, "test_acc_at_best_val": 0.9, "placement": said},
            "bfloat16": {"best_val_acc": 0.9, "test_acc_at_best_val": 0.875, "placement": said}}
    figures = gpu_numerics.feature_dtype_figures(runs)
    assert figures["float32_test_acc"] == 0.9 and figures["bfloat16_val_acc"] == 0.9
    assert figures["bfloat16_minus_float32_test_acc"] == pytest.approx(-0.025)
    assert figures["bfloat16_placement"] == said and "float32_minus_float32_test_acc" not in figures


# ---- the figures the docs quote come from the recorded H200 run --------------------------------------------

H200_RUN = ROOT / "bench" / "figures" / "gpu-check-h200-20261204.json"
# the products run with the evaluation in chunks of 16,384 targets
H200_EVAL_16K = ROOT / "bench" / "figures" / "products-eval16k-h200-20261204.jsonl"


def test_the_docs_list_every_check_in_the_order_gpu_check_runs_them():
    rows = re.findall(r"^\| `(\w+)` \| (?!\d)", (ROOT / "docs" / "doctor.md").read_text(), re.M)
    listed = [name for name in rows if name in gpu_check.CHECKS]
    assert listed[: len(gpu_check.CHECKS)] == list(gpu_check.CHECKS)


def test_the_gpu_figures_quoted_are_the_recorded_runs():
    """README.md and docs/doctor.md quote the H200's figures: each as the JSON of that run holds it."""
    checks = json.loads(H200_RUN.read_text())["checks"]
    assert all(result["status"] in ("ok", "skipped") for result in checks.values())
    sampler, training, products = checks["sampler"], checks["training"], checks["products"]
    readme, doctor = (ROOT / "README.md").read_text(), (ROOT / "docs" / "doctor.md").read_text()
    assert f"train at {training['seeds_per_second']:,.0f} seeds/s" in readme
    assert f"{sampler['cuda_fused_edges_per_s'] / 1e6:.0f}M sampled edges/s" in readme
    assert f"epoch takes {products['full_epoch_seconds_projected']:.2f} s" in readme
    assert f"of its {products['nodes']:,} nodes {products['eval_seconds']:.2f} s" in readme
    determinism, pinned = checks["determinism"], checks["pinned"]
    for quoted in (f"{sampler['cuda_fused_edges_per_s']:,.0f} sampled edges/s",
                   f"{sampler['cuda_edges_per_s']:,.0f} with Floyd's", f"({sampler['fused_over_floyd']:.2f}x)",
                   f"{training['seeds_per_second']:,.0f} seeds/s",
                   f"(a full epoch of 137 steps: {training['full_epoch_seconds_projected']:.2f} s)",
                   f"full epoch of {products['steps_per_epoch_measured']} steps "
                   f"{products['full_epoch_seconds_projected']:.2f} s ({products['seeds_per_second']:,.0f} seeds/s)",
                   f"the exact evaluation {products['eval_seconds']:.2f} s",
                   f"{determinism['fast_step_ms']:.2f} ms per step with `false`, "
                   f"{determinism['deterministic_step_ms']:.2f} ms with `true` "
                   f"({determinism['deterministic_over_fast']:.2f}x",
                   f"test accuracy {checks['feature_dtype']['float32_test_acc']:.3f} with float32",
                   f"{pinned['pinned_gb_per_s']:.1f} GB/s pinned against {pinned['pageable_gb_per_s']:.2f} GB/s "
                   f"pageable ({pinned['pinned_over_pageable']:.2f}x)"):
        assert quoted in doctor, quoted
    assert checks["feature_dtype"]["bfloat16_test_acc"] == checks["feature_dtype"]["float32_test_acc"]
    # the products evaluation in larger chunks: that run's metrics, and the config that now sets them
    rows = [json.loads(line) for line in H200_EVAL_16K.read_text().splitlines()]
    eval_seconds = [row["phase_seconds"]["eval"] for row in rows if row.get("phase_seconds", {}).get("eval")]
    chunk = load_config("ogbn-products").sampler.eval_batch_size
    assert f"(1.63 s with `sampler.eval_batch_size={chunk}`" in doctor and f"{eval_seconds[-1]:.2f}" == "1.63"
    assert f"1.63 s in chunks of {chunk:,}, the config" in readme
    assert checks["resume_layout"]["cuda3_of_4_bit_exact"] and checks["resume_layout"]["list_of_4_bit_exact"]
    # the default follows the figure (issue 30 §7)
    from train.config import TrainerConfig

    assert TrainerConfig().deterministic is (determinism["deterministic_over_fast"] <= gpu_numerics.DEFAULT_LIMIT)
