"""Checkpoints that survive crashes: atomic, checksummed, the last K kept, the newest valid found.

A checkpoint is one file `RUN_DIR/checkpoints/ckpt-eEEEEE-sSSSSSSS.pt` (epoch, then the
furthest step any rank reached in it, so names sort in training order):

    PYGCKPT1 sha256=<64 hex> bytes=<payload length>\\n<payload: torch.save of a dict>

Rank 0 writes it to a temporary file in the same folder, flushes and fsyncs it, renames it
over the final name and fsyncs the folder, so a crash at any moment leaves either the old
set of checkpoints or the new one, never a half-written file under a final name. A file
that is truncated or corrupted anyway (a full disk, a bad copy) fails the length or checksum
test and is skipped with a warning that names it; the one before it is used.

`load_checkpoint(path)` reads one back (weights_only: no code runs while loading).
The payload: what the run's parts hand over (`Checkpointer`: model and optimizer state, epoch,
the metrics history, the seeds of the per-epoch shuffle and of the sampler, and every rank's
step, epoch statistics and RNG states), then the config, the model (class and constructor arguments),
the world size and a fingerprint of the graph, which `check_resumable` compares before anything is loaded.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist

from train.cluster.distenv import DistEnv
from train.config import Config, declared
from train.errors import UserError
from train.files import dir_problem, file_problem
from train.graph.form import form_of, graph_features
from train.graph.sharing.ownership import check_same_layout
from train.graph.sharing.shared_graph import num_edges
from train.loop.rank0_writes import written_by_rank0
from train.storage.faults import StorageError
from train.storage.writes import TMP_PREFIX, atomic_write, guarded

MAGIC = b"PYGCKPT1"
FORMAT_VERSION = 1
CHECKPOINT_DIR = "checkpoints"
NAME_RE = re.compile(r"^ckpt-e(\d{6})-s(\d{8})\.pt$")
CORRUPT_SUFFIX = ".corrupt"
LAYOUT = "feature_layout"  # the fingerprint's key for the features' ownership (None: a copy per node)

# Config keys that change what the model is or what it is trained on: a checkpoint made with
# other values cannot be continued (shapes differ, or the remaining steps would see other
# batches): the model section and each setting declared `same_on_resume` (train/config/sections.py).
# Everything else (epochs, logging, checkpointing, timeouts, lr...) may change.
INCOMPATIBLE_SECTIONS = ("model",)
INCOMPATIBLE_KEYS = tuple(item.key for item in declared(Config) if item.spec.same_on_resume)


class CorruptCheckpoint(Exception):
    """A checkpoint file that is not a complete, intact checkpoint (the message says why)."""


# ---- bytes on disk ------------------------------------------------------------------------------
def encode(payload: dict) -> bytes:
    """The file's bytes: header with checksum and length, then `torch.save(payload)`."""
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    body = buffer.getvalue()
    header = MAGIC + f" sha256={hashlib.sha256(body).hexdigest()} bytes={len(body)}\n".encode()
    return header + body


def decode(data: bytes) -> dict:
    """Check the header, length and checksum of a checkpoint file's bytes; load the payload."""
    newline = data.find(b"\n", 0, 256)
    if not data.startswith(MAGIC) or newline < 0:
        raise CorruptCheckpoint("not a checkpoint of this project (no PYGCKPT1 header)")
    match = re.fullmatch(rb"PYGCKPT1 sha256=([0-9a-f]{64}) bytes=(\d+)", data[:newline])
    if match is None:
        raise CorruptCheckpoint("damaged header")
    body = data[newline + 1 :]
    expected = int(match.group(2))
    if len(body) != expected:
        raise CorruptCheckpoint(f"truncated: {len(body)} of {expected} payload bytes")
    if hashlib.sha256(body).hexdigest() != match.group(1).decode():
        raise CorruptCheckpoint("checksum mismatch: the file was changed after it was written")
    try:
        payload = torch.load(io.BytesIO(body), map_location="cpu", weights_only=True)
    except Exception as exc:  # intact bytes that torch cannot read: a foreign or future format
        raise CorruptCheckpoint(f"unreadable payload ({type(exc).__name__}: {exc})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT_VERSION:
        raise CorruptCheckpoint(f"unknown payload format {payload.get('format') if isinstance(payload, dict) else '?'}")
    return payload


# ---- the checkpoint folder ----------------------------------------------------------------------
def checkpoint_name(epoch: int, step: int) -> str:
    return f"ckpt-e{epoch:06d}-s{step:08d}.pt"


def list_checkpoints(directory: Path) -> list[Path]:
    """Checkpoint files in `directory`, newest (furthest in training) first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        match = NAME_RE.match(path.name)
        if match:
            found.append(((int(match.group(1)), int(match.group(2))), path))
    return [path for _, path in sorted(found, reverse=True)]


def prune(directory: Path, keep: int) -> list[Path]:
    """Delete all but the `keep` newest checkpoints; returns what was deleted."""
    removed = list_checkpoints(directory)[keep:]
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


def remove_stale_temporaries(directory: Path) -> None:
    """Temporary files of writers that crashed (only called when no writer runs)."""
    if Path(directory).is_dir():
        for path in Path(directory).glob(f"{TMP_PREFIX}*"):
            path.unlink(missing_ok=True)


def save_checkpoint(directory: Path, payload: dict, keep: int) -> Path:
    """Write `payload` atomically under its name, then keep only the `keep` newest (rank 0 only)."""
    directory = Path(directory)
    path = directory / checkpoint_name(payload["epoch"], payload["position_step"])
    with guarded(path):
        directory.mkdir(parents=True, exist_ok=True)
    atomic_write(path, encode(payload))
    prune(directory, keep)
    return path


def load_checkpoint(path: Path) -> dict:
    """The payload of one checkpoint file; `CorruptCheckpoint` when it is not intact."""
    problem = file_problem(path)  # a directory, a FIFO (a read would block), a link loop, unreadable, empty
    if problem is not None:
        raise CorruptCheckpoint(problem.removeprefix("is "))
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CorruptCheckpoint(f"cannot be read ({exc.strerror})") from None
    return decode(data)


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def find_latest_valid(directory: Path, on_invalid: Callable[[str], None] = warn,
                      quarantine: bool = True) -> tuple[Path, dict] | None:
    """The newest intact checkpoint in `directory` and its payload, or None.

    Each newer file that fails its checks is reported through `on_invalid` (naming it and
    saying why) and, with `quarantine`, renamed to `*.corrupt` so it is neither chosen nor
    counted again, but kept for inspection.
    """
    for path in list_checkpoints(directory):
        try:
            return path, load_checkpoint(path)
        except CorruptCheckpoint as exc:
            note = f"checkpoint {path} is not usable ({exc}); skipping it"
            if quarantine:
                target = path.with_name(path.name + CORRUPT_SUFFIX)
                os.replace(path, target)
                note += f" (renamed to {target.name})"
            on_invalid(note + ", trying the previous one.")
    return None


# ---- compatibility ------------------------------------------------------------------------------
def _flatten(config: dict, prefix: str = "") -> dict[str, Any]:
    """{"model": {"kwargs": {"heads": 8}}} -> {"model.kwargs.heads": 8}: each difference named by its full key."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def model_differences(saved: dict | None, current: dict | None) -> list[tuple]:
    """(field, saved, now) for the model's class and each constructor argument that differs (what
    `ModelSpec.describe` records); none when either side did not record it."""
    if not saved or not current:
        return []
    found = [("model class", saved.get("class"), current.get("class"))] if saved.get("class") != current.get(
        "class") else []
    old, new = _flatten(saved.get("arguments", {})), _flatten(current.get("arguments", {}))
    return found + [(f"model argument {key}", old.get(key), new.get(key)) for key in sorted(set(old) | set(new))
                    if old.get(key) != new.get(key)]


def is_incompatible_key(key: str) -> bool:
    return key.split(".", 1)[0] in INCOMPATIBLE_SECTIONS or key in INCOMPATIBLE_KEYS


def config_differences(saved: dict, current: dict) -> tuple[list[tuple], list[tuple]]:
    """(incompatible, allowed) differences between two `Config.to_dict()`s, as (key, saved, now)."""
    old, new = _flatten(saved), _flatten(current)
    incompatible, allowed = [], []
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            (incompatible if is_incompatible_key(key) else allowed).append((key, old.get(key), new.get(key)))
    return incompatible, allowed


def _listing(differences: list[tuple]) -> str:
    return "; ".join(f"{key}: {before!r} in the checkpoint, {after!r} now" for key, before, after in differences)


def check_resumable(payload: dict, path: Path, config: dict, fingerprint: dict, world_size: int,
                    model: dict | None = None) -> list[str]:
    """Raise `UserError` if the checkpoint cannot continue this run; else return notes to print.

    Refused: other model or data or sampling (the config keys above, or the graph itself),
    and another world size in the middle of an epoch (each rank's position in its shard
    depends on the world size). Another world size at an epoch boundary is resharded: the
    model and optimizer are the same on every rank, the next epoch is split anew.
    """
    incompatible, allowed = config_differences(payload["config"], config)
    incompatible += model_differences(payload.get("model_spec"), model)
    if payload["data"].get(LAYOUT) != fingerprint.get(LAYOUT):
        check_same_layout(payload["data"].get(LAYOUT), fingerprint.get(LAYOUT), f"checkpoint {path}")
    graph = [(f"graph {key}", payload["data"].get(key), value) for key, value in fingerprint.items()
             if payload["data"].get(key) != value]
    if incompatible or graph:
        raise UserError(
            f"checkpoint {path} was made with another model or data and cannot be resumed: "
            f"{_listing(incompatible + graph)}. Use the same values, start afresh with "
            "trainer.resume=never (or another output.dir), or pass another checkpoint as trainer.resume=PATH."
        )
    notes = []
    if allowed:
        notes.append(f"resuming with changed settings (allowed): {_listing(allowed)}")
    saved_world = payload["world_size"]
    if saved_world != world_size:
        if any(rank["step"] for rank in payload["ranks"]):
            raise UserError(
                f"checkpoint {path} was saved by {saved_world} ranks in the middle of epoch {payload['epoch']}; "
                f"this run has {world_size}. A checkpoint inside an epoch can only continue on the same number "
                f"of ranks (each rank's place in its shard depends on it): run on {saved_world} ranks, or pass a "
                "checkpoint saved at an epoch boundary (step 0 in its name) as trainer.resume=PATH."
            )
        notes.append(
            f"resharding: checkpoint saved by {saved_world} ranks at the start of epoch {payload['epoch']}, "
            f"continuing on {world_size} (model and optimizer are replicated; epochs are split anew, so the "
            f"result is not bit-identical to a {saved_world}-rank run)"
        )
    return notes


def describe(path: Path, payload: dict) -> str:
    steps = sorted({rank["step"] for rank in payload["ranks"]})
    where = f"epoch {payload['epoch']} step {steps[0]}" if len(steps) == 1 else \
        f"epoch {payload['epoch']} steps {steps[0]}-{steps[-1]}"
    saved = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(payload.get("saved_at", 0)))
    return f"{path} ({where}, {payload.get('reason', '?')}, saved {saved})"


# ---- the run's parts ----------------------------------------------------------------------------
class Stateful(Protocol):
    """A part of the run that survives a restart: it hands over its state and takes it back."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


def graph_fingerprint(data) -> dict:
    """What identifies the graph a model was trained on, beyond the config."""
    form = form_of(data)
    store = graph_features(data)
    return {
        "num_nodes": form.num_nodes(data), "num_edges": num_edges(data),
        "num_features": form.feature_width(data), "num_classes": form.num_classes(data),
        **{f"num_{split}": int(form.split_nodes(data, split).numel()) for split in ("train", "val", "test")},
        LAYOUT: store.layout_state() if store is not None else None,  # who owns which feature row (sharded)
    }


def saved_line(path: Path, epoch: int, steps: list[int], reason: str) -> str:
    """The log's line for a saved checkpoint, epochs numbered from 0 as the progress display does.

    The file's name holds the position to continue from (ckpt-e000001-s00000000: epoch 1, step 0), which
    at an epoch's end is the next epoch's start: the line says which epoch is done instead.
    """
    if epoch > 0 and steps == [0]:
        return f"saved checkpoint after epoch {epoch - 1}: {path}"
    return f"saved checkpoint in epoch {epoch} after step {'-'.join(map(str, steps))} ({reason}): {path}"


class Checkpointer:
    """Saving and resuming for one run directory; every method is collective (all ranks call it).

    What is saved comes from two parts: `shared`, what every rank holds alike (model, optimizer,
    epoch, history: rank 0's is written), and `own`, each rank's own (its step in the epoch,
    statistics, RNGs: gathered from all). Their `state_dict()` keys are the payload's; this class
    reads only "epoch" (shared) and "step" (own), which name the file and place it in training.
    """

    def __init__(self, out_dir: Path, env: DistEnv, shared: Stateful, own: Stateful, *, config: dict,
                 fingerprint: dict, keep: int, resume: str, model: dict | None = None):
        self.directory = Path(out_dir) / CHECKPOINT_DIR
        self.env, self.shared, self.own = env, shared, own
        self.config, self.fingerprint, self.keep, self.mode = config, fingerprint, keep, resume
        self.model = model  # the model's class and constructor arguments (ModelSpec.describe)
        self.last_save_time = time.monotonic()
        self.last_position: tuple | None = None
        self.last_path: Path | None = None

    def _say(self, message: str) -> None:
        if self.env.is_main:
            print(message, flush=True)

    def seconds_since_save(self) -> float:
        return time.monotonic() - self.last_save_time

    # -- save
    def save(self, reason: str) -> Path | None:
        """Rank 0 writes the run's state; returns its path (None if nothing changed since the last)."""
        env = self.env
        ranks: list = [None] * env.world_size
        dist.all_gather_object(ranks, self.own.state_dict())
        shared = self.shared.state_dict()  # references, no copies: alike on every rank, rank 0's is written
        position = (shared["epoch"], tuple(r["step"] for r in ranks))
        if position == self.last_position:
            return self.last_path

        def write() -> str:
            payload = {
                "format": FORMAT_VERSION, **shared, "position_step": max(position[1]), "ranks": ranks,
                "config": self.config, "model_spec": self.model, "world_size": env.world_size, "data": self.fingerprint,
                "reason": reason,
                "saved_at": time.time(), "job_id": env.job_id, "restart_count": env.restart_count,
            }
            try:
                return str(save_checkpoint(self.directory, payload, self.keep))
            except OSError as exc:  # not the file system's (train/storage/faults.py): say where
                raise OSError(f"could not write a checkpoint into {self.directory}: {exc}") from None

        # nobody moves on (or exits) before it is on disk; a storage fault ends every rank alike
        saved = written_by_rank0(env.is_main, write)
        self.last_position, self.last_path = position, Path(saved)
        self.last_save_time = time.monotonic()
        self._say(saved_line(self.last_path, position[0], sorted(set(position[1])), reason))
        return self.last_path

    # -- resume
    def _find(self) -> dict:
        """Rank 0: which checkpoint to resume from under trainer.resume, as a message for all."""
        mode = self.mode
        problem = dir_problem(self.directory) if os.path.lexists(self.directory) else None
        if problem is not None:  # else the first save, an epoch from now, would fail
            raise UserError(f"{self.directory} {problem}: checkpoints cannot be written there; move it away.")
        if mode == "never":
            if list_checkpoints(self.directory):
                aside = self.directory.with_name(f"{CHECKPOINT_DIR}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
                os.replace(self.directory, aside)
                return {"note": f"trainer.resume=never: starting afresh; the earlier checkpoints are kept in {aside}"}
            return {}
        if mode == "auto":
            remove_stale_temporaries(self.directory)
            found = find_latest_valid(self.directory)
            if found is None:
                if self.env.restart_count > 0:
                    warn(f"job restart {self.env.restart_count} but no usable checkpoint in "
                         f"{self.directory}: training starts from the beginning")
                return {}
            path, payload = found
        else:
            path = Path(mode)
            if not path.is_file():
                raise UserError(f"trainer.resume={mode!r} is not a file; expected auto, never, or the path of a "
                                f"checkpoint file (e.g. {self.directory}/ckpt-e000002-s00000000.pt).")
            try:
                payload = load_checkpoint(path)
            except CorruptCheckpoint as exc:
                raise UserError(f"trainer.resume={mode!r}: the checkpoint is not usable ({exc}).") from None
        notes = check_resumable(payload, path, self.config, self.fingerprint, self.env.world_size, self.model)
        return {"payload": payload, "path": str(path), "notes": notes}

    def resume(self) -> bool:
        """Continue from a checkpoint as trainer.resume says; True if the run resumed."""
        env = self.env
        message: list = [None]
        if env.is_main:
            try:
                with guarded(self.directory):  # it may rename a damaged checkpoint, or the folder (never)
                    message[0] = self._find()
            except UserError as exc:
                message[0] = {"error": str(exc)}
            except StorageError as exc:
                message[0] = {"storage": exc.fault}
        dist.broadcast_object_list(message, src=0)
        found = message[0]
        if "error" in found:
            raise UserError(found["error"])
        if "storage" in found:
            raise StorageError(found["storage"])
        if "note" in found:
            self._say(found["note"])
        if "payload" not in found:
            return False
        payload = found["payload"]
        self.shared.load_state_dict(payload)  # model and optimizer are replicated: every rank loads them
        if payload["world_size"] == env.world_size:
            self.own.load_state_dict(payload["ranks"][env.rank])
        # else resharded at an epoch boundary (check_resumable refused anything else): a fresh epoch start
        for note in found["notes"]:
            self._say(note)
        restarts = env.restart_count
        told = restarts > 0 or env.sources.get("restart_count") == "SLURM_RESTART_COUNT"  # SLURM's, even 0
        self._say(f"resuming from {describe(Path(found['path']), payload)}"
                  + (f"; job {env.job_id} restart {restarts}" if told else ""))
        if payload["world_size"] == env.world_size and Path(found["path"]).parent == self.directory:
            # saving the same position again would only rewrite this file
            self.last_position = (payload["epoch"], tuple(r["step"] for r in payload["ranks"]))
            self.last_path = Path(found["path"])
        return True
