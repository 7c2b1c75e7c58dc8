"""`make sweep` without a cluster: the grid and its refusals (train/sweep.py, login/sweep.py), the array as sbatch is
given it (a recording stand-in sbatch, as tests/test_jobs.py), the element's line in the job script (stand-in srun),
and `make report SWEEP=` from a few run directories written here. The real cluster: tests/test_sweep_slurm.py."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from login import sweep as login_sweep
from tests.harness import standin_bin
from tests.harness.jobscript import KNOBS, run_job_script
from tests.harness.side_by_side import map_side_by_side
from train.errors import UserError
from train.loop.sweep_report import sweep_report, why_unfinished
from train.sweep import (
    Axis,
    array_size_problem,
    array_spec,
    claim,
    element_dir,
    expand,
    list_file,
    list_link,
    parse_grid,
    point_of,
    read_list,
    recorded_submission,
    split_values,
    submission_of,
    write_list,
)

ROOT = Path(__file__).resolve().parents[1]
GRID = "optim.lr=0.01,0.001 model.name=sage,gat"
REQUEST = ["IMAGE=none", "CONFIG=tiny", "GPUS_PER_TASK=0", "CPUS_PER_TASK=1"]


# ---- the grid ---------------------------------------------------------------------------------------

def test_the_grid_is_the_product_of_the_values_times_the_seeds_each_point_s_seeds_together():
    elements = expand(parse_grid(GRID), 3)
    assert len(elements) == 12
    assert elements[:4] == [("optim.lr=0.01", "model.name=sage", "trainer.seed=0"),
                            ("optim.lr=0.01", "model.name=sage", "trainer.seed=1"),
                            ("optim.lr=0.01", "model.name=sage", "trainer.seed=2"),
                            ("optim.lr=0.01", "model.name=gat", "trainer.seed=0")]
    points = [point_of(e) for e in elements]
    assert len(set(points)) == 4 and all(points.count(p) == 3 for p in points)
    assert [e[-1] for e in elements] == ["trainer.seed=0", "trainer.seed=1", "trainer.seed=2"] * 4
    # every combination once, in the order the keys were given (the first slowest)
    assert sorted(set(points)) == sorted((f"optim.lr={lr}", f"model.name={m}")
                                         for lr in ("0.01", "0.001") for m in ("sage", "gat"))


def test_a_value_may_hold_commas_in_brackets_and_seeds_may_be_the_grid_s_own():
    assert split_values("[10,5],[15,{a: 1, b: 2}],3") == ["[10,5]", "[15,{a: 1, b: 2}]", "3"]
    axes = parse_grid("sampler.num_neighbors=[10,5],[15,10] trainer.seed=7,8")
    assert axes == [Axis("sampler.num_neighbors", ("[10,5]", "[15,10]")), Axis("trainer.seed", ("7", "8"))]
    elements = expand(axes, 1)
    assert elements == [("sampler.num_neighbors=[10,5]", "trainer.seed=7"), ("sampler.num_neighbors=[10,5]",
                         "trainer.seed=8"), ("sampler.num_neighbors=[15,10]", "trainer.seed=7"),
                        ("sampler.num_neighbors=[15,10]", "trainer.seed=8")]
    assert point_of(elements[1]) == ("sampler.num_neighbors=[10,5]",)
    assert expand([], 2) == [("trainer.seed=0",), ("trainer.seed=1",)]  # the config's one point, two seeds


@pytest.mark.parametrize("grid, seeds, words", [
    ("", 1, "the grid is empty"),
    ("   ", 1, "the grid is empty"),
    ("optim.lr", 2, "'optim.lr' is not section.key=value1,value2"),
    ("lr=0.1", 2, "'lr=0.1' is not section.key="),
    ("optim.lr=", 2, "gives optim.lr an empty value (value 1 of 1)"),
    ("optim.lr=0.1,,0.2", 2, "an empty value (value 2 of 3)"),
    ("optim.lr=0.1 optim.lr=0.2", 2, "names optim.lr twice"),
    ("optim.lr=0.1,0.1", 2, "the value '0.1' twice"),
    ("output.dir=a,b", 2, "output.dir is each element's own"),
    ("trainer.seed=1,2", 3, "SWEEP lists trainer.seed and SEEDS=3"),
])
def test_a_grid_that_is_not_one_is_refused_naming_what_is_wrong(grid, seeds, words):
    with pytest.raises(UserError, match=re.escape(words)):
        expand(parse_grid(grid), seeds)


def test_the_array_spec_and_the_cluster_s_max_array_size():
    assert array_spec(8, None) == "0-7" and array_spec(8, 3) == "0-7%3" and array_spec(1, 2) == "0-0%2"
    assert array_size_problem(8, 8) is None and array_size_problem(8, None) is None
    assert "the sweep has 9 elements, more than this cluster's MaxArraySize=8" in array_size_problem(9, 8)
    assert list_link(Path("logs"), "41") == Path("logs/sweep-41.list")


def test_an_element_s_run_directory_is_its_own_and_a_reused_array_id_never_resumes_another_sweep(tmp_path):
    runs = tmp_path / "runs"
    assert element_dir("41", 3, "s1", runs) == runs / "41_3"  # free
    claim(runs / "41_3", "41", 3, "s1")
    assert recorded_submission(runs / "41_3") == "s1"
    assert element_dir("41", 3, "s1", runs) == runs / "41_3"  # a requeue of the same element finds it again
    # the same array id from a later submission (a restarted controller), or a folder that is no element's
    assert element_dir("41", 3, "s2", runs) == runs / "41_3-s2"
    (runs / "41_4").mkdir()
    assert element_dir("41", 4, "s1", runs) == runs / "41_4-s1"
    (tmp_path / "logs").mkdir()
    list_file(tmp_path / "logs", "s9").write_text("a.b=1\n")
    list_link(tmp_path / "logs", "41").symlink_to(list_file(tmp_path / "logs", "s9").name)
    assert submission_of(list_link(tmp_path / "logs", "41")) == "s9"


def test_the_list_file_reads_back_what_was_written(tmp_path):
    elements = expand(parse_grid("sampler.num_neighbors=[10,5],[15,10] model.name=sage,gat"), 2)
    write_list(tmp_path / "x.list", elements)
    assert read_list(tmp_path / "x.list") == elements
    assert len((tmp_path / "x.list").read_text().splitlines()) == 8  # line i: element i, nothing else


# ---- the checks before the queue (login/sweep.py) ---------------------------------------------------

def sweep_check(capsys, *argv: str) -> tuple[int, str, str]:
    code = login_sweep.main(list(argv))
    said = capsys.readouterr()
    return code, said.out, said.err


def test_each_element_is_checked_as_the_config_check_does_and_each_refusal_named_once(capsys, tmp_path):
    listed = tmp_path / "x.list"
    code, out, err = sweep_check(capsys, "--config", "tiny", "--sweep", "optim.lrr=0.1,0.2 model.name=sage,gatx",
                                 "--seeds", "2", "--list-file", str(listed), "--", "trainer.epochs=1")
    assert code == 2 and out == "" and not listed.exists()
    # a key that is not a setting once (not once per element), with the valid keys; the value its setting refuses
    # first where the key is right
    assert err.splitlines() == [
        "SWEEP element 0 (optim.lrr=0.1 model.name=sage trainer.seed=0): unknown config key 'optim.lrr'; valid optim "
        "keys: lr, weight_decay; did you mean optim.lr?"]
    code, _, err = sweep_check(capsys, "--config", "tiny", "--sweep", "optim.lr=0.1,0.2 model.name=sage,gatx",
                               "--seeds", "2")
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith("SWEEP element 2 (optim.lr=0.1 model.name=gatx trainer.seed=0): model.name='gatx' is "
                               "not valid; expected one of: sage, gcn"), lines


def test_what_a_sweep_sets_itself_is_refused_in_args_and_the_array_size_checked(capsys):
    code, _, err = sweep_check(capsys, "--config", "tiny", "--sweep", GRID, "--seeds", "3", "--max-array-size", "10",
                               "--", "output.dir=runs/x", "optim.lr=0.1", "trainer.seed=4")
    assert code == 2
    assert "ARGS sets output.dir=runs/x: each element of a sweep writes its own run directory" in err
    assert "ARGS sets optim.lr=0.1, but SWEEP sweeps it: drop it from ARGS." in err
    assert "ARGS sets trainer.seed=4, but SEEDS sets it (trainer.seed=0..SEEDS-1)" in err
    assert "the sweep has 12 elements, more than this cluster's MaxArraySize=10" in err


def test_values_valid_only_together_are_taken_and_a_clash_is_named_with_its_element(capsys):
    """model.num_layers=3 alone clashes with tiny's two fanouts, and a third fanout alone with its two layers:
    together they are one valid element. Each element's whole config is checked, as the job will load it."""
    code, out, err = sweep_check(capsys, "--config", "tiny", "--sweep", "model.num_layers=3 "
                                 "sampler.num_neighbors=[5,5,5]", "--seeds", "2")
    assert code == 0 and err == ""
    assert "element:1 model.num_layers=3 sampler.num_neighbors=[5,5,5] trainer.seed=1" in out
    code, _, err = sweep_check(capsys, "--config", "tiny", "--sweep", "model.num_layers=2,3 "
                               "sampler.num_neighbors=[5,5],[5,5,5]", "--seeds", "1")
    assert code == 2 and err.splitlines() == [
        "SWEEP element 1 (model.num_layers=2 sampler.num_neighbors=[5,5,5] trainer.seed=0): sampler.num_neighbors=[5, "
        "5, 5] has 3 hops but model.num_layers=2; give one fanout per layer.",
        "SWEEP element 2 (model.num_layers=3 sampler.num_neighbors=[5,5] trainer.seed=0): sampler.num_neighbors=[5, 5] "
        "has 2 hops but model.num_layers=3; give one fanout per layer."]


def test_a_valid_sweep_prints_its_array_and_elements_and_writes_its_list(capsys, tmp_path):
    listed = tmp_path / "x.list"
    code, out, err = sweep_check(capsys, "--config", "tiny", "--sweep", GRID, "--seeds", "2", "--max-array-size", "8",
                                 "--max-parallel", "3", "--list-file", str(listed), "--", "trainer.epochs=1")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "array:0-7%3" and len(lines) == 9
    assert lines[1:] == [f"element:{i} {' '.join(e)}" for i, e in enumerate(read_list(listed))]
    assert read_list(listed) == expand(parse_grid(GRID), 2)


# ---- make sweep, with a recording sbatch ------------------------------------------------------------

@pytest.fixture
def sweep_standins(tmp_path):
    """(env, record): sbatch records its call; sinfo answers nothing; scontrol says MaxArraySize=8."""
    return standin_bin.recording_sbatch(tmp_path, {"sinfo": "", "scontrol": "MaxArraySize            = 8\n"
                                                   "MaxJobCount = 10000\n"}, dict(os.environ), drop=KNOBS)


def make(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_dry_run_lists_every_element_with_its_plan_and_the_array_s_sbatch(sweep_standins, tmp_path):
    env, record = sweep_standins
    logs = tmp_path / "logs"
    p = make(env, "sweep", *REQUEST, f"SWEEP={GRID}", "SEEDS=2", "MAX_PARALLEL=3", "ARGS=trainer.epochs=1",
             f"LOG_DIR={logs}", "DRY_RUN=1")
    assert p.returncode == 0, p.stderr
    elements = expand(parse_grid(GRID), 2)
    for index, overrides in enumerate(elements):  # the plan's line of each element, and the list
        assert re.search(rf"^element {index} +{re.escape(' '.join(overrides))}: a rank \S+ MiB, a node ", p.stdout,
                         re.M), p.stdout
        assert f"\n{index} {' '.join(overrides)}\n" in p.stdout
    assert re.search(r"^the largest plan, optim\.lr=\S+ model\.name=\S+:$", p.stdout, re.M)
    line = next(ln for ln in p.stdout.splitlines() if re.match(r"^env .* sbatch ", ln))
    words = shlex.split(line)
    env_words = dict(w.split("=", 1) for w in words[1:words.index("sbatch")])
    assert re.fullmatch(rf"{logs}/sweep-\S+\.list", env_words["PYG_SWEEP_FILE"])
    assert "SWEEP" not in env_words and "SEEDS" not in env_words  # the job reads its line, not the grid
    assert "--array=0-7%3" in words and f"--output={logs}/%x-%A_%a.log" in words
    assert not record.exists() and not logs.exists()


def test_a_sweep_is_submitted_as_one_array_whose_list_the_report_finds(sweep_standins, tmp_path):
    env, record = sweep_standins
    logs = tmp_path / "logs"
    p = make(env, "sweep", *REQUEST, f"SWEEP={GRID}", "SEEDS=2", f"LOG_DIR={logs}")
    assert p.returncode == 0, p.stderr
    assert "Submitted sweep 4242: 8 elements (--array=0-7)" in p.stdout
    assert f"report: make report SWEEP=4242 LOG_DIR={logs}" in p.stdout
    calls = record.read_text()
    assert calls.count("ARGV ") == 1 and "--array=0-7 " in calls and f"--output={logs}/%x-%A_%a.log" in calls
    linked = list_link(logs, "4242")
    assert linked.is_symlink() and read_list(linked) == expand(parse_grid(GRID), 2)
    assert (logs / ".last-submitted").read_text() == f"{logs}/pyg-train-4242_0.log\n"  # make logs: element 0


@pytest.mark.parametrize("target, extra, words", [
    ("sweep", ["SWEEP=optim.lrr=0.1,0.2"], "SWEEP element 0 (optim.lrr=0.1 trainer.seed=0): unknown config key "
                                           "'optim.lrr'"),
    ("sweep", ["SWEEP=optim.lr=0.1,-1"], "SWEEP element 1 (optim.lr=-1 trainer.seed=0): optim.lr=-1.0 must be > 0."),
    ("sweep", ["SWEEP="], "the grid is empty"),
    ("sweep", ["SWEEP=optim.lr=0.1,0.2,0.3", "SEEDS=3"], "the sweep has 9 elements, more than this cluster's "
                                                       "MaxArraySize=8"),
    ("sweep", ["SWEEP=optim.lr=0.1,0.2", "ARGS=output.dir=runs/mine"], "ARGS sets output.dir=runs/mine"),
    ("sweep", ["SWEEP=optim.lr=0.1,0.2", "SEEDS=0"], "SEEDS='0' is not valid"),
    ("sweep", ["SWEEP=optim.lr=0.1,0.2", "DOCTOR=only"], "DOCTOR=only runs the doctor alone"),
    ("submit", ["SWEEP=optim.lr=0.1,0.2"], "SWEEP='optim.lr=0.1,0.2' is make sweep's setting"),
    ("submit", ["SEEDS=3"], "SEEDS='3' is make sweep's setting"),
])
def test_a_bad_sweep_is_refused_before_anything_is_submitted(sweep_standins, tmp_path, target, extra, words):
    env, record = sweep_standins
    p = make(env, target, *REQUEST, f"LOG_DIR={tmp_path / 'logs'}", *extra)
    assert p.returncode == 2, p.stdout + p.stderr
    assert words in p.stderr and f"make {target}: nothing was submitted." in p.stderr, p.stderr
    assert not record.exists() and not (tmp_path / "logs").exists()


# ---- the element in the job script -------------------------------------------------------------

def test_each_element_trains_its_own_line_into_its_own_run_directory(tmp_path):
    listed = tmp_path / "x.list"
    elements = expand(parse_grid(GRID), 2)
    write_list(listed, elements)

    project = tmp_path / "project"  # the job's runs/ is the project's: a copy, so that nothing lands in this one
    project.mkdir()
    for part in ("jobs", "lib", "login", "train"):
        (project / part).symlink_to(ROOT / part)

    def element(index: str):
        (tmp_path / index).mkdir()
        return run_job_script(tmp_path / index, {"IMAGE": "none", "CONFIG": "tiny", "ARGS": "trainer.epochs=1",
                                                 "PYG_SWEEP_FILE": str(listed), "SLURM_ARRAY_JOB_ID": "99",
                                                 "SLURM_ARRAY_TASK_ID": index, "PYG_SUBMISSION_ID": "s1",
                                                 "BARE_PYTHON": str(ROOT / ".venv" / "bin" / "python")}, root=project)
    (job, calls), (beyond, beyond_calls) = map_side_by_side(element, ["5", "8"])
    assert job.returncode == 0, job.stderr
    argv = calls[-1]
    tail = argv[argv.index("fit"):]
    assert tail == ["fit", "--config", "tiny", "trainer.epochs=1", *elements[5], "output.dir=runs/99_5"]
    assert f"sweep element 5 of array 99: {' '.join(elements[5])}; run directory runs/99_5" in job.stdout
    assert recorded_submission(project / "runs" / "99_5") == "s1"  # claimed before training
    assert beyond.returncode != 0 and not beyond_calls
    assert f"the sweep's list file {listed} has no line for element 8 (it has 8)" in beyond.stderr


# ---- make report SWEEP= -------------------------------------------------------------------------

def write_run(run_dir: Path, val: list[float], test: list[float], loss: float, submission: str = "sub") -> None:
    """A finished element: its record (claim), its epochs' rows (metrics.jsonl), summary.json (what fit writes; read
    as 'finished')."""
    array_id, index = run_dir.name.split("-")[0].split("_")
    claim(run_dir, array_id, int(index), submission)
    rows = [{"epoch": e + 1, "loss": loss + 0.1 * (len(val) - e), "val_acc": v, "test_acc": t, "epoch_seconds": 2.0,
             "seeds_per_second": 100.0, "world_size": 1} for e, (v, t) in enumerate(zip(val, test))]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "summary.json").write_text(json.dumps({"epochs": len(rows)}))


@pytest.fixture
def written_sweep(tmp_path):
    """A sweep of 3 points x 2 seeds as its elements left it: two points whole, one element failed and one that
    has not started."""
    logs, runs = tmp_path / "logs", tmp_path / "runs"
    logs.mkdir()
    elements = expand(parse_grid("model.name=sage,gat,gcn"), 2)
    write_list(list_file(logs, "sub"), elements)
    list_link(logs, "77").symlink_to(list_file(logs, "sub").name)
    write_run(runs / "77_0", [0.70, 0.80], [0.69, 0.79], 0.50)  # sage: val 0.80, 0.84
    write_run(runs / "77_1", [0.84, 0.82], [0.81, 0.80], 0.40)
    write_run(runs / "77_2", [0.90], [0.88], 0.30)  # gat: val 0.90, 0.86 -> best
    write_run(runs / "77_3", [0.10], [0.10], 9.00, submission="older")  # an older sweep's: not read
    write_run(runs / "77_3-sub", [0.86], [0.85], 0.35)
    write_run(runs / "77_4", [0.60], [0.58], 0.90)  # gcn: one of two
    (logs / "pyg-train-77_5.log").write_text(
        "job 12 on n1: 1 tasks\ntraining step:\n0: epoch 1 step 1/5 loss 1.2\n"
        "0: error: data.path='/x' does not exist\nsrun: error: n1: task 0: Exited with exit code 2\n"
        "training step exited with status 2\n")
    return logs, runs


def test_the_report_is_each_point_s_mean_and_std_over_its_seeds_best_first(written_sweep, capsys):
    logs, runs = written_sweep
    path = sweep_report("77", logs, runs)
    out = capsys.readouterr().out
    table = out.splitlines()
    assert table[0].startswith("sweep 77: 6 elements, 3 points x 2 seeds; mean ± std over each point's seeds")
    assert table[1].split() == ["point", "runs", "val", "accuracy", "test", "accuracy", "final", "loss", "s/epoch"]
    rows = [line.split() for line in table[2:5]]
    # best first by the mean best-validation accuracy: gat (0.88), sage (0.82), gcn (0.60, one run)
    assert [r[:3] for r in rows] == [["P1", "model.name=gat", "2/2"], ["P2", "model.name=sage", "2/2"],
                                     ["P3", "model.name=gcn", "1/2"]]
    assert rows[0][3:6] == ["0.8800", "±", "0.0283"]  # val: mean of 0.90 and 0.86, stdev 0.0283
    assert rows[0][6:9] == ["0.8650", "±", "0.0212"]  # test at the best val epoch: 0.88, 0.85
    assert rows[1][3:9] == ["0.8200", "±", "0.0283", "0.8000", "±", "0.0141"]  # best epochs: 0.80/0.79, 0.84/0.81
    assert rows[2][3:6] == ["0.6000", "±", "-"] and rows[2][-3:] == ["2.00", "±", "-"]
    assert "1 of 6 elements have no summary:" in out
    assert ("element 5 (model.name=gcn trainer.seed=1): failed: its training step exited with status 2: "
            "0: error: data.path='/x' does not exist") in out  # the rank's own words, not srun's after them
    assert path == runs / "sweep-77-compare.png" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_element_without_a_summary_says_why_from_its_log(tmp_path):
    run_dir = tmp_path / "runs" / "1_0"
    assert why_unfinished(None, run_dir) == "no log yet: pending, or not started (squeue shows it)"
    log = tmp_path / "a.log"
    log.write_text("training step:\n0: epoch 1 step 3/5 loss 0.9\n")
    assert why_unfinished(log, run_dir) == ("running, or ended before its training step did (its log's last word: "
                                            "0: epoch 1 step 3/5 loss 0.9)")
    cancelled = "slurmstepd-n1: error: *** JOB 7 ON n1 CANCELLED AT 2026-12-05T15:44:15 ***"
    log.write_text(f"0: epoch 1 step 6/10\n{cancelled}\n0: rank 0: received SIGTERM; stopping after the current step\n"
                   "0: stopped in epoch 1 after step 7: SIGTERM, sent by scancel\n"
                   "srun: error: n1: task 0: Exited with exit code 3\ntraining step exited with status 3\n")
    assert why_unfinished(log, run_dir) == f"failed: its training step exited with status 3: {cancelled}"


def test_make_report_names_a_sweep_that_is_not_there_and_an_id_that_is_a_grid(written_sweep):
    logs, _ = written_sweep
    env = {k: v for k, v in os.environ.items() if k not in KNOBS}
    missing, grid = map_side_by_side(lambda sweep: make(env, "report", f"SWEEP={sweep}", f"LOG_DIR={logs}"),
                                     ["78", "optim.lr=0.1,0.2"])
    assert missing.returncode == 2 and not missing.stdout
    assert f"SWEEP=78: no sweep list {logs}/sweep-78.list" in missing.stderr and "Sweeps there: 77." in missing.stderr
    assert grid.returncode == 2 and "SWEEP='optim.lr=0.1,0.2' is not a job array's id" in grid.stderr


def test_seeds_of_the_grid_s_own_are_each_checked_and_generated_ones_once_per_point(capsys):
    code, _, err = sweep_check(capsys, "--config", "tiny", "--sweep", "trainer.seed=1,abc", "--seeds", "1")
    assert code == 2 and err.startswith("SWEEP element 1 (trainer.seed=abc): trainer.seed='abc' must be of type int")
    code, out, _ = sweep_check(capsys, "--config", "tiny", "--sweep", "", "--seeds", "1000")
    assert code == 0 and out.splitlines()[0] == "array:0-999" and out.splitlines()[-1] == "element:999 trainer.seed=999"
