"""The memory plan's verdict and advice (issue 43 §3, train/plan/advice.py, train/plan/largest.py): a change is
advised only where the plan, made again with it, fits (or clears one of its problems without adding one); what is
already in effect is never advised; the largest term is named; a sampled batch's terms are labelled upper bounds.
On IGBH-full (MLPerf's R-GAT setting), ogbn-papers100M and a synthetic graph, all from their sizes alone."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.harness.localjob import ROOT
from train.cli.plan_run import format_plan, graph_size
from train.config import load_config
from train.plan.advice import Change, Job, advice_words, advise, assess
from train.plan.largest import BOUND, largest_term, largest_words, peak_lines
from train.plan.terms import GIB, make_plan

TIB = 1024 * GIB
IGBH = ("igbh-rgat", ("data.name=igbh-full",))
WIDE = ("synthetic", ("data.num_nodes=2000000", "data.num_features=256"))


def job_of(config, overrides, nodes, ranks, gpus=True, node=None, gpu=None) -> Job:
    loaded = load_config(config, list(overrides))
    return Job(loaded, graph_size(loaded), nodes, ranks, gpus, (node, "the test's node"), (gpu, "the test's GPU"))


def synthetic_between(ranks: int) -> Job:
    """The wide synthetic graph on one node of 4 CPU ranks, whose memory holds `ranks` ranks and no more."""
    config = load_config(WIDE[0], list(WIDE[1]))
    cap = make_plan(config, graph_size(config), 1, ranks, gpus=False).node_peak + 2**20
    return job_of(*WIDE, 1, 4, gpus=False, node=cap)


# Jobs that do not fit, each with what the old advice listed though it was in effect (issue 43 §3's IGBH case)
CASES = {
    "igbh 4 nodes, 2 TiB, 80 GB GPUs": lambda: job_of(*IGBH, 4, 16, node=2 * TIB, gpu=80 * GIB),
    "igbh on CPU sampling, GPUs unknown": lambda: job_of(IGBH[0], IGBH[1] + ("sampler.device=cpu",), 4, 16,
                                                         node=2 * TIB),
    "igbh, a copy per node asked": lambda: job_of(IGBH[0], IGBH[1] + ("data.features=node",), 4, 16, node=2 * TIB),
    "igbh one node": lambda: job_of(*IGBH, 1, 8, node=2 * TIB, gpu=80 * GIB),
    "papers100M, a copy per rank": lambda: job_of("ogbn-papers100M", ("data.share=process",), 1, 4, node=300 * GIB,
                                                  gpu=80 * GIB),
    "papers100M, small GPUs": lambda: job_of("ogbn-papers100M", (), 1, 4, node=300 * GIB, gpu=2 * GIB),
    "papers100M, sampler.device=cuda": lambda: job_of("ogbn-papers100M", ("sampler.device=cuda",), 1, 4,
                                                      node=300 * GIB, gpu=8 * GIB),
    "synthetic, one rank too many": lambda: synthetic_between(3),
}


def every_change(advice) -> list[Change]:
    return advice.fits + advice.together + [c for changes in advice.clears.values() for c in changes]


@pytest.fixture(scope="module", params=sorted(CASES))
def advised(request):
    job = CASES[request.param]()
    now = assess(job)
    return job, now, advise(job, now)


def test_a_job_that_does_not_fit_gets_advice_and_only_changes_that_fit(advised):
    job, now, advice = advised
    assert now.problems, "the case must not fit"
    assert advice.fits or advice.together, advice  # each case has a way to fit
    for change in advice.fits:
        assert not assess(change.applied(job)).problems, change.words(job)
    step = job
    for change in advice.together:
        step = change.applied(step)
    assert not advice.together or not assess(step).problems
    for kind, changes in advice.clears.items():
        for change in changes:
            left = assess(change.applied(job)).problems
            assert kind not in left and set(left) <= set(now.problems), (kind, change.words(job), left)


def test_what_is_in_effect_is_never_advised(advised):
    job, _now, advice = advised
    per_node = -(-job.ranks // job.nodes)
    for change in every_change(advice):
        for key, value in change.settings:
            section, name = key.split(".")
            assert getattr(getattr(job.config, section), name) != value, change.words(job)
        assert change.nodes in (None,) or change.nodes != job.nodes
        assert change.per_node in (None,) or change.per_node != per_node
        assert change.settings or change.nodes or change.per_node
    words = advice_words(job, advice)
    assert words.startswith("What would fit")
    for key in ("data.share", "eval.mode", "sampler.device", "data.features", "data.feature_dtype"):
        section, name = key.split(".")
        assert f"{key}={getattr(getattr(job.config, section), name)}" not in words, words


def test_the_issue_s_igbh_case_advises_more_nodes_not_what_is_set():
    """IGBH-full on 4 nodes of 2 TiB, sampling on the CPU: the old advice was data.share=node, eval.mode=sampled and
    sampler.device=cpu, all in effect. Now: the nodes that fit sharded, checked."""
    job = CASES["igbh on CPU sampling, GPUs unknown"]()
    now = assess(job)
    advice = advise(job, now)
    assert [c.words(job) for c in advice.fits] == [f"NODES={advice.fits[0].nodes} GPUS={4 * advice.fits[0].nodes}"]
    assert advice.fits[0].nodes > 4
    fewer = Change(nodes=advice.fits[0].nodes - 1)
    assert assess(fewer.applied(job)).problems  # the fewest nodes that fit


def test_with_a_copy_per_node_more_nodes_do_not_help_and_sharded_is_said():
    job = CASES["igbh, a copy per node asked"]()
    now = assess(job)
    said = now.problems["node"]
    assert "with a copy of the features on each: every node holds the whole graph, so more nodes do not help" in said
    more = assess(Change(nodes=64).applied(job))
    assert more.plan.node_peak >= now.plan.node_peak  # more nodes, no less on each
    words = advice_words(job, advise(job, now))
    assert "data.features=sharded" in words and "NODES=" in words, words


def test_no_change_that_does_not_fit_is_advised():
    """papers100M on 100 GiB nodes: its loading alone (OGB's files read whole on every node) needs more, so no lever
    fits and none is named."""
    job = job_of("ogbn-papers100M", (), 2, 8, node=100 * GIB, gpu=80 * GIB)
    now = assess(job)
    advice = advise(job, now)
    assert now.problems and not every_change(advice)
    assert advice_words(job, advice).startswith("No change of data.share, data.features, NODES")


def test_the_largest_term_is_named_loading_three_times_the_graph():
    job = CASES["igbh, a copy per node asked"]()
    now = assess(job)
    said = largest_words(now.plan, now.choice, "node")
    assert "is mostly the loading: the rank that loads the graph holds 7,010.4 GiB" in said, said
    assert "3.1 x the graph (2,282.4 GiB)" in said and "3.1 x the graph" in now.problems["node"]
    item, value = largest_term(now.plan, "GPU")
    assert item.startswith("evaluation working set") and value == max(
        v for k, v in now.plan.rows["GPU"].items() if k not in ("in all",) and not k.startswith("allocator"))


def test_training_is_named_where_it_is_the_peak():
    job = job_of("ogbn-papers100M", ("sampler.batch_size=200000", "eval.mode=sampled"), 1, 4, gpus=False)
    now = assess(job)
    said = largest_words(now.plan, now.choice, "node")
    assert "is mostly training: 4 rank(s) x" in said and "a rank's largest term the training batch" in said, said
    assert BOUND in said


def test_a_sampled_batch_s_terms_are_labelled_bounds():
    job = job_of(*IGBH, 4, 16, node=2 * TIB, gpu=80 * GIB)
    now = assess(job)
    table = format_plan(now.plan, job.config).splitlines()
    row = re.compile(r"^(?:per \w+)?\s+(\S.*?)\s{2,}[\d,.]+ [GM]iB  \(bound\)$")
    bounded = {m[1] for line in table if (m := row.match(line))}
    assert bounded == {"training batch", "evaluation: one sampled batch",
                       "training batch: features, activations, gradients", "evaluation working set"}, table
    assert any(line.startswith("(bound): an upper bound, not an estimate") for line in peak_lines(now.plan, now.choice))
    exact = assess(job_of("ogbn-papers100M", (), 2, 8, node=512 * GIB, gpu=80 * GIB)).plan
    assert not any(item.startswith("evaluation") for item in exact.bounds)  # the exact pass is no sampled batch
    assert any(item.startswith("training batch") for item in exact.bounds)


def test_the_cli_prints_the_largest_terms_the_bounds_and_the_checked_advice():
    done = subprocess.run([sys.executable, "-m", "train", "plan", "--config", "igbh-rgat", "--nodes", "4", "--gpus",
                           "16", "--node-memory", "2048", "--gpu-memory", "80", "--", "data.name=igbh-full"],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "PATH": "/bin"}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "largest, per node (sharded): its peak (3,043.0 GiB) is mostly the loading of its own rows" in done.stdout
    assert re.search(r"\n {10}evaluation working set +[\d,.]+ GiB  \(bound\)\n", done.stdout), done.stdout
    error = done.stderr.strip()
    assert error.startswith("error: this plan does not fit: a node needs 3,043.0 GiB") and error.count("\n") == 0
    assert "What would fit (planned as this job is): NODES=8 GPUS=32 with sampler.batch_size=" in error, error
    for in_effect in ("data.share=node", "eval.mode=sampled", "sampler.device=cpu"):
        assert in_effect not in error
    # docs/memory.md shows this very output (make plan's NODE_MEMORY=2T GPU_MEMORY=80G are these flags)
    docs = (ROOT / "docs" / "memory.md").read_text()
    shown = docs.split("ARGS='data.name=igbh-full'`\n(sampling on the CPU")[1].split("```")[1].strip().splitlines()
    assert shown == (done.stdout.strip().splitlines()[-3:] + [error]), shown
