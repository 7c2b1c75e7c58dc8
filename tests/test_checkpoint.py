"""Checkpoint files: atomic writes that survive a SIGKILL, checksums, keep-last-K, compatibility."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.harness.checkpoints import payload
from tests.harness.localjob import WORKERS
from train.config import load_config
from train.errors import UserError
from train.loop import checkpoint as ck
from train.loop.rng import set_rng_state

ROOT = Path(__file__).resolve().parents[1]


def test_round_trip_keeps_every_field_and_rng_state():
    original = payload(2, 5, world_size=2)  # takes this process's RNG states
    expected = (torch.rand(3), random.random(), np.random.rand())
    back = ck.decode(ck.encode(original))
    assert torch.equal(back["model"]["w"], original["model"]["w"])
    assert back["history"] == original["history"] and back["config"] == original["config"]
    set_rng_state(back["ranks"][1]["rng"])  # torch, python and numpy draw the same again
    again = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(again[0], expected[0]) and again[1:] == expected[1:]


@pytest.mark.parametrize("damage,reason", [
    (lambda b: b[: len(b) // 2], "truncated"),
    (lambda b: b[:-1] + bytes([b[-1] ^ 0xFF]), "checksum mismatch"),
    (lambda b: b"", "no PYGCKPT1 header"),
    (lambda b: b"PK\x03\x04" + b[4:], "no PYGCKPT1 header"),
])
def test_damaged_files_are_detected(damage, reason):
    with pytest.raises(ck.CorruptCheckpoint, match=reason):
        ck.decode(damage(ck.encode(payload(1))))


def test_names_sort_in_training_order_and_prune_keeps_the_newest(tmp_path):
    for epoch, step in [(1, 0), (0, 7), (2, 0), (1, 3), (10, 0)]:
        ck.save_checkpoint(tmp_path, payload(epoch, step), keep=10)
    names = [p.name for p in ck.list_checkpoints(tmp_path)]
    assert names == [ck.checkpoint_name(*pos) for pos in [(10, 0), (2, 0), (1, 3), (1, 0), (0, 7)]]
    ck.save_checkpoint(tmp_path, payload(11, 0), keep=2)
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == [ck.checkpoint_name(11, 0), ck.checkpoint_name(10, 0)]
    assert not list(tmp_path.glob(f"{ck.TMP_PREFIX}*"))


def test_truncated_newest_is_skipped_with_a_warning_naming_it(tmp_path):
    ck.save_checkpoint(tmp_path, payload(1, value=1.0), keep=3)
    newest = ck.save_checkpoint(tmp_path, payload(2, value=2.0), keep=3)
    newest.write_bytes(newest.read_bytes()[:1000])
    warnings: list[str] = []
    path, found = ck.find_latest_valid(tmp_path, on_invalid=warnings.append)
    assert path.name == ck.checkpoint_name(1, 0) and found["model"]["w"][0, 0] == 1.0
    assert len(warnings) == 1 and str(newest) in warnings[0] and "truncated" in warnings[0]
    assert (tmp_path / (newest.name + ck.CORRUPT_SUFFIX)).is_file()  # kept for inspection, never chosen again
    assert ck.find_latest_valid(tmp_path, on_invalid=warnings.append)[0] == path and len(warnings) == 1


def test_no_valid_checkpoint_gives_none(tmp_path):
    assert ck.find_latest_valid(tmp_path / "missing") is None
    (tmp_path / ck.checkpoint_name(0, 1)).write_bytes(b"garbage")
    assert ck.find_latest_valid(tmp_path, on_invalid=lambda _: None) is None


@pytest.mark.parametrize("where", ["before-rename", "mid-write"])
def test_sigkill_while_writing_leaves_the_previous_checkpoint_valid(tmp_path, where):
    """A real SIGKILL of the writing process: between fsync and rename, or halfway through the bytes."""
    done = subprocess.run([sys.executable, str(WORKERS / "crash_writer.py"), str(tmp_path), where], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert "two written" in done.stdout and "not reached" not in done.stdout
    leftovers = list(tmp_path.glob(f"{ck.TMP_PREFIX}*"))
    assert len(leftovers) == 1  # the crashed write's temporary file, under a name nobody loads
    path, found = ck.find_latest_valid(tmp_path, on_invalid=pytest.fail)
    assert path.name == ck.checkpoint_name(2, 0) and found["model"]["w"][0, 0] == 2.0
    ck.remove_stale_temporaries(tmp_path)
    assert not list(tmp_path.glob(f"{ck.TMP_PREFIX}*"))


# ---- compatibility ---------------------------------------------------------------------------
def test_model_and_data_changes_are_incompatible_others_allowed():
    saved = load_config("tiny").to_dict()
    now = load_config("tiny", ["model.hidden=64", "data.num_nodes=3000", "sampler.batch_size=64",
                               "trainer.epochs=9", "optim.lr=0.5", "trainer.keep_checkpoints=1"]).to_dict()
    incompatible, allowed = ck.config_differences(saved, now)
    assert [d[0] for d in incompatible] == ["data.num_nodes", "model.hidden", "sampler.batch_size"]
    assert [d[0] for d in allowed] == ["optim.lr", "trainer.epochs", "trainer.keep_checkpoints"]


def test_check_resumable_names_every_differing_field(tmp_path):
    saved = payload(1)
    config = load_config("tiny", ["model.hidden=64", "model.name=mlp"]).to_dict()
    with pytest.raises(UserError) as info:
        ck.check_resumable(saved, tmp_path / "x.pt", config, {"num_nodes": 11}, 1)
    text = str(info.value)
    assert "model.hidden: 32 in the checkpoint, 64 now" in text
    assert "model.name: 'sage' in the checkpoint, 'mlp' now" in text
    assert "graph num_nodes: 10 in the checkpoint, 11 now" in text and str(tmp_path / "x.pt") in text


def test_check_resumable_names_the_model_kwargs_and_arguments_that_differ(tmp_path):
    from train.models import resolve

    before = load_config("tiny", ["model.name=gat", "model.kwargs.heads=8"])
    after = load_config("tiny", ["model.name=gat", "model.kwargs.heads=4", "model.kwargs.v2=true"])
    saved = {**payload(1), "config": before.to_dict(), "model_spec": resolve(before.model).describe(16, 4)}
    with pytest.raises(UserError) as info:
        ck.check_resumable(saved, tmp_path / "x.pt", after.to_dict(), {"num_nodes": 10}, 1,
                           resolve(after.model).describe(16, 4))
    text = str(info.value)
    assert "model.kwargs.heads: 8 in the checkpoint, 4 now" in text
    assert "model.kwargs.v2: None in the checkpoint" in text
    assert "model argument heads: 8 in the checkpoint, 4 now" in text
    same = ck.check_resumable(saved, tmp_path / "x.pt", before.to_dict(), {"num_nodes": 10}, 1,
                              resolve(before.model).describe(16, 4))
    assert same == []


def test_world_size_change_only_at_an_epoch_boundary(tmp_path):
    config = load_config("tiny").to_dict()
    notes = ck.check_resumable(payload(2, 0, world_size=4), tmp_path / "a.pt", config, {"num_nodes": 10}, 2)
    assert any("resharding" in n and "4 ranks" in n for n in notes)
    with pytest.raises(UserError, match="saved by 4 ranks in the middle of epoch 2; this run has 2"):
        ck.check_resumable(payload(2, 3, world_size=4), tmp_path / "b.pt", config, {"num_nodes": 10}, 2)
    assert ck.check_resumable(payload(2, 3, world_size=2), tmp_path / "c.pt", config, {"num_nodes": 10}, 2) == []


# ---- the state protocol: Checkpointer asks parts, never a Trainer --------------------------------
class Part:
    """A minimal `Stateful`: what a checkpoint needs of any part of the run."""

    def __init__(self, **state):
        self.state = dict(state)

    def state_dict(self) -> dict:
        return dict(self.state)

    def load_state_dict(self, state: dict) -> None:
        self.state = dict(state)


def test_checkpointer_saves_and_restores_any_parts_that_hand_over_their_state(tmp_path):
    import torch.distributed as dist

    from train.cluster.distenv import resolve

    env = resolve({"SLURM_RESTART_COUNT": "1"}, pick_free_port=lambda: 1)
    config = load_config("tiny").to_dict()
    kwargs = dict(config=config, fingerprint={"num_nodes": 10}, keep=2, resume="auto")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        shared = Part(epoch=2, history=[{"epoch": 0}, {"epoch": 1}], model={"w": torch.ones(2)})
        own = Part(step=5, stats={"seeds": 7})
        saver = ck.Checkpointer(tmp_path, env, shared, own, **kwargs)
        path = saver.save("test")
        assert path.name == ck.checkpoint_name(2, 5) and saver.save("again") == path  # same position: no rewrite
        payload = ck.load_checkpoint(path)
        assert payload["ranks"] == [{"step": 5, "stats": {"seeds": 7}}] and payload["restart_count"] == 1
        assert payload["world_size"] == 1 and payload["config"] == config

        fresh_shared, fresh_own = Part(), Part()
        assert ck.Checkpointer(tmp_path, env, fresh_shared, fresh_own, **kwargs).resume()
        assert fresh_shared.state["epoch"] == 2 and torch.equal(fresh_shared.state["model"]["w"], torch.ones(2))
        assert fresh_own.state == {"step": 5, "stats": {"seeds": 7}}
    finally:
        dist.destroy_process_group()
