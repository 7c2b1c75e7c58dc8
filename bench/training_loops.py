"""What the training benchmark's loops share (bench/training.py, and bench/pyg_anchor.py for PyG's own models):
the graph's settings, the project's timed steps, the race to a target accuracy and the options passed to the ranks."""

from __future__ import annotations

import time


def overrides(args) -> list[str]:
    return [f"data.num_nodes={args.nodes}", f"data.avg_degree={args.degree}", f"data.num_features={args.features}",
            "sampler.num_neighbors=[25,10]", f"sampler.batch_size={args.batch_size}", "model.hidden=256",
            "trainer.epochs=1", "output.progress=lines", "trainer.log_every=1000000"]


def target_overrides(args) -> list[str]:
    return [f"data.num_nodes={args.target_nodes}", f"data.num_features={args.target_features}",
            f"sampler.batch_size={args.target_batch_size}", "sampler.num_neighbors=[25,10]", "model.hidden=256",
            f"trainer.epochs={args.max_epochs}", "output.progress=lines", "trainer.log_every=1000000"]


def project_steps(trainer, epoch: int, steps: int, synchronize=lambda: None) -> tuple[int, float]:
    """`steps` steps of the project's loop after one untimed warm-up step; (seeds, seconds). `synchronize` runs
    before each mark (torch.cuda.synchronize on a GPU, where a step's kernels end after it returns)."""
    marks: list[tuple[float, int]] = []

    def on_step_end(tr, _record) -> bool:
        synchronize()
        marks.append((time.perf_counter(), tr.state.stats.seeds))
        return len(marks) > steps

    trainer.state.step = 0
    trainer.timer.reset()
    trainer.train_epoch(epoch, on_step_end=on_step_end)
    return marks[-1][1] - marks[0][1], marks[-1][0] - marks[0][0]


def slowest(seconds: float, device) -> float:
    """The largest of every rank's `seconds` (collective): DDP ranks finish an epoch together."""
    import torch
    import torch.distributed as dist

    value = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float(value)


def race_to_target(trainer, others: dict, max_epochs: int, target: float, device) -> dict[str, list[dict]]:
    """The project's `train_epoch` and each other loop (name -> (epoch function, model step to evaluate)),
    one after the other, each epoch timed on the slowest rank and evaluated alike, until val_acc >= target
    or max_epochs: {loop: [{epoch, train_seconds, val_acc, ...}]}."""
    import torch.distributed as dist

    from train.loop.evaluate import evaluate
    from train.loop.fit import EpochStats

    curves: dict[str, list[dict]] = {}
    for name in ("project", *others):
        curves[name], elapsed = [], 0.0
        for epoch in range(max_epochs):
            dist.barrier()
            started = time.perf_counter()
            if name == "project":
                trainer.state.step, trainer.state.stats = 0, EpochStats()
                trainer.train_epoch(epoch)
                seconds = time.perf_counter() - started
                accuracy = trainer.evaluate()
            else:
                run_epoch, step = others[name]
                run_epoch(epoch)
                seconds = time.perf_counter() - started
                accuracy = evaluate(step, trainer.data, trainer.config, trainer.env, device, trainer.sampling)
            elapsed += slowest(seconds, device)
            curves[name].append({"epoch": epoch, "train_seconds": elapsed, **accuracy})
            if accuracy["val_acc"] >= target:
                break
    return curves


def first_at_target(curve: list[dict], target: float) -> dict | None:
    """The first epoch whose validation accuracy reached `target`, or None."""
    return next((row for row in curve if row["val_acc"] >= target), None)


def passthrough(args) -> list[str]:
    return ["--nodes", str(args.nodes), "--degree", str(args.degree), "--features", str(args.features),
            "--batch-size", str(args.batch_size), "--steps", str(args.steps), "--rounds", str(args.rounds),
            "--target-acc", str(args.target_acc), "--target-nodes", str(args.target_nodes),
            "--target-features", str(args.target_features), "--target-batch-size", str(args.target_batch_size),
            "--max-epochs", str(args.max_epochs)]
