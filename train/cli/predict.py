"""`python -m train predict --run-dir RUN [data.key=value ...] [--out DIR] [--layer K]`: every node's rows of a run."""

from __future__ import annotations

import os
from pathlib import Path

from train.cli.env import command_line
from train.cluster.distenv import resolve
from train.config import Config, load_config
from train.errors import UserError
from train.loop.report import resolve_run
from train.loop.rundir import RUNS, newest_run

# What predict may change of the run's settings: the graph it runs on (the same shape: grown, or a later
# snapshot), how the pass is chunked and placed, and the process group's timeouts. The model, task and
# training settings are the run's.
OVERRIDABLE = ("data.", "sampler.eval_batch_size=", "sampler.device=", "dist.")


def add_arguments(parser) -> None:
    parser.add_argument("--run-dir", default="", metavar="RUN",
                        help="a finished run's directory (runs/<id>), or its id under runs/ (default: the newest run)")
    parser.add_argument("--out", default="", metavar="DIR", help="where the rows go (default: RUN/predictions)")
    parser.add_argument("--layer", type=int, default=None, metavar="K",
                        help="the hidden layer whose rows are the embeddings (default: the last, before the output)")
    parser.add_argument("overrides", nargs="*", metavar="data.key=value",
                        help="another graph of the same shape (data.*), or sampler.eval_batch_size, sampler.device")


def run_path(args) -> Path:
    """The run predict reads: --run-dir as `make report` names a run, else the newest run under runs/."""
    if args.run_dir:
        return resolve_run(args.run_dir)
    newest = newest_run()
    if newest is None:
        raise UserError(f"no run under {RUNS}/ yet: train one first (make run), or name one: make predict RUN=<dir>")
    return newest


def predict_config(args, run: Path) -> Config:
    """The config of `run` (its config.yaml; `run_path`) with the overrides predict allows; others refused by
    name."""
    refused = [item for item in args.overrides if not item.startswith(OVERRIDABLE)]
    if refused:
        raise UserError(f"predict cannot change {', '.join(refused)}: the model, task and training are the run's. "
                        f"It takes data.* (another graph of the same shape), sampler.eval_batch_size, "
                        f"sampler.device and dist.*.")
    path = run / "config.yaml"
    if not path.is_file():
        raise UserError(f"RUN={str(run)!r} holds no config.yaml: give a finished run's directory "
                        "(runs/<id>).")
    return load_config(str(path), args.overrides, "RUN")


def main(args) -> int:
    run = run_path(args)  # once: without --run-dir, the newest run of runs/ as it is now
    config = predict_config(args, run)
    out = Path(args.out) if args.out else run / "predictions"
    env = resolve(os.environ, command=command_line())
    from train.loop.predict import run_predict  # torch and PyG, once the input is known to be good

    manifest = run_predict(config, env, run, out, args.layer)
    if env.is_main:
        for name, meta in manifest["files"].items():
            print(f"wrote {out / name}: {meta['dtype']} {'x'.join(map(str, meta['shape']))}, {meta['holds']}",
                  flush=True)
        print(f"manifest {out / 'manifest.json'}", flush=True)
    return 0
