"""The sampler benchmark's pure parts (ratios, A B A B order, the uniformity check and its power),
a quick run of the whole benchmark without pyg-lib, and the same run against the pyg-lib anchor, built
once per machine for the tests (tests/harness/anchor_cache.py; ~3 min the first time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
import torch

from bench import sampler as bench_sampler
from bench.anchor import anchor_python
from tests.harness.localjob import ROOT

QUICK = ["--sizes", "small", "--scale", "0.1", "--threads", "1,2", "--batches", "2", "--loader-batches", "2",
         "--batch-size", "128", "--rounds", "2", "--warmup", "1"]


def test_rates_and_ratios():
    r = bench_sampler.rates(edges=1000, batches=4, seconds=2.0)
    assert r == {"edges": 1000, "batches": 4, "seconds": 2.0, "edges_per_s": 500.0, "batches_per_s": 2.0}
    anchor = bench_sampler.rates(edges=250, batches=2, seconds=1.0)
    assert bench_sampler.ratio(r, anchor, "edges_per_s") == 2.0
    assert bench_sampler.ratio(r, anchor, "batches_per_s") == 1.0
    assert bench_sampler.ratio(r, None, "edges_per_s") is None  # no anchor, no ratio
    assert bench_sampler.rates(0, 0, 0.0)["edges_per_s"] is None


def test_interleaved_runs_a_b_a_b_and_sums():
    order = []

    def run(name, edges):
        def fn():
            order.append(name)
            return edges, 1, 0.5
        return fn

    out = bench_sampler.interleaved({"a": run("a", 10), "b": run("b", 30)}, rounds=2)
    assert order == ["a", "b", "a", "b"]
    assert out["a"]["edges"] == 20 and out["b"]["edges_per_s"] == 60.0 and out["a"]["batches"] == 2


def test_star_graph_and_subsets_read_back():
    edge_index, num_nodes = bench_sampler.star_graph(stars=2, degree=3)
    assert num_nodes == 8
    assert edge_index.tolist() == [[0, 1, 2, 3, 4, 5], [6, 6, 6, 7, 7, 7]]
    # a sampler output: seeds 6, 7 first, then picked sources; row/col local
    node = torch.tensor([6, 7, 2, 0, 4])
    row, col = torch.tensor([2, 3, 4]), torch.tensor([0, 0, 1])
    assert bench_sampler.draws_to_subsets(node, row, col, 2, 3) == Counter({(0, 2): 1, (1,): 1})


def test_the_uniformity_check_passes_uniform_and_fails_biased_samplers():
    degree, fanout = 6, 2
    subsets = [(a, b) for a in range(degree) for b in range(a + 1, degree)]
    uniform = Counter({s: 200 for s in subsets})
    assert bench_sampler.subset_counts_chisquare(uniform, degree, fanout) == pytest.approx(1.0)
    biased = Counter({s: 200 for s in subsets})
    biased[(0, 1)] += 150  # one pair drawn 1.75x as often
    assert bench_sampler.subset_counts_chisquare(biased, degree, fanout) < 1e-6
    repeats = Counter({s: 200 for s in subsets})
    repeats[(3, 3)] = 1  # a neighbour picked twice: not a subset at all
    assert bench_sampler.subset_counts_chisquare(repeats, degree, fanout) == 0.0


def test_uniformity_on_real_samplers_and_a_biased_one():
    samplers = bench_sampler._uniformity_samplers(with_pyg_lib=False)

    def first_k(seeds, degree=8, fanout=3, stars=400):  # always the first 3 neighbours: biased
        src = torch.stack([(s - stars * degree) * degree + torch.arange(fanout) for s in seeds]).view(-1)
        node = torch.cat([seeds, src])
        return node, torch.arange(seeds.numel(), node.numel()), torch.arange(seeds.numel()).repeat_interleave(fanout)

    samplers["first k"] = first_k
    out = bench_sampler.uniformity(samplers)
    assert out[bench_sampler.PROJECT]["uniform"] and out[bench_sampler.PROJECT]["draws"] == 5600
    assert out["reference (random.sample per node)"]["uniform"]
    assert not out["first k"]["uniform"] and out["first k"]["p_value"] < 1e-6


def _quick_run(python, tmp_path, extra_env=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_RESULTS": str(tmp_path), **(extra_env or {})}
    proc = subprocess.run([str(python), "-m", "bench", "sampler", *QUICK], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (path,) = tmp_path.glob("sampler-*.json")
    return proc.stdout, json.loads(path.read_text())


def _check_measured(result: dict, with_pyg_lib: bool) -> None:
    small = result["graphs"]["small"]
    assert small["nodes"] == 2000 and small["edges"] > 0
    assert set(small["fanouts"]) == {"25x10", "15x10x5"}
    for per_threads in small["fanouts"].values():
        assert set(per_threads) == {"1", "2"}
        for levels in per_threads.values():
            for level in ("sampler", "loader"):
                project = levels[level]["project"]
                assert project["edges_per_s"] > 0 and project["batches_per_s"] > 0 and project["batches"] == 4
                ratio = levels[level]["project_over_pyg_lib"]["edges_per_s"]
                if with_pyg_lib:
                    anchor = levels[level]["pyg-lib"]
                    assert anchor["batches"] == 4
                    assert ratio == pytest.approx(project["edges_per_s"] / anchor["edges_per_s"])
                else:
                    assert "pyg-lib" not in levels[level] and ratio is None
    assert result["uniformity"]["project"]["uniform"]


def test_quick_run_without_the_anchor_says_so_and_measures_the_project(tmp_path):
    out, result = _quick_run(sys.executable, tmp_path, {"BENCH_ANCHOR": "none"})
    assert result["anchor"] == {"pyg_lib": False, "reason": "BENCH_ANCHOR=none: the pyg-lib anchor is switched off"}
    _check_measured(result, with_pyg_lib=False)
    assert "pyg-lib anchor not available (BENCH_ANCHOR=none" in out


def test_quick_run_against_the_pyg_lib_anchor(tmp_path, anchor_venv):
    out, result = _quick_run(sys.executable, tmp_path, {"BENCH_ANCHOR_VENV": str(anchor_venv)})  # re-runs itself there
    assert f"running in the pyg-lib anchor's Python: {anchor_venv / 'bin' / 'python'}" in out
    assert "running in the pyg-lib anchor's Python" in out
    assert result["anchor"]["pyg_lib"] is True and result["machine"]["pyg_lib"] is True
    _check_measured(result, with_pyg_lib=True)
    assert result["uniformity"]["pyg-lib"]["uniform"]


@pytest.mark.parametrize("argv, message", [
    (["--sizes", "small,huge"], "unknown huge; expected some of small, 1m, reddit"),
    (["--threads", "0"], "every count must be >= 1"),
    (["--scale", "-1"], "'-1' must be > 0"),
])
def test_bad_options_are_a_message(argv, message):
    proc = subprocess.run([sys.executable, "-m", "bench", "sampler", *argv], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "BENCH_ANCHOR": "none"}, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def _anchor_sh(*args, env=None):
    return subprocess.run(["bash", str(ROOT / "bench" / "anchor.sh"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


def test_anchor_without_sources_says_why_and_builds_nothing(tmp_path):
    venv = tmp_path / "anchor-venv"
    proc = _anchor_sh(str(venv), env={"PYG_LIB_SRC": str(tmp_path / "nowhere")})
    assert proc.returncode == 3
    assert f"cannot build the pyg-lib anchor: no {tmp_path / 'nowhere'}/build.sh (set PYG_LIB_SRC" in proc.stderr
    assert not venv.exists()


def test_anchor_check_builds_nothing_and_says_when_it_is_not_current(tmp_path):
    venv = tmp_path / "anchor-venv"
    venv.mkdir()
    (venv / ".anchor-hash").write_text("0000000000000000\n")  # built from other sources
    proc = _anchor_sh("--check", str(venv))
    assert proc.returncode == 3 and "is not built for the current sources (make anchor" in proc.stderr
    assert sorted(p.name for p in venv.iterdir()) == [".anchor-hash"]
    python, reason = anchor_python(venv)
    assert python is None and reason.startswith(f"{venv} is not built for the current sources")
