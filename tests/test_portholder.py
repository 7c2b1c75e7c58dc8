"""Two jobs on one master port: rank 0 fails at once naming the port and its holder, instead of a hang."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from train.cluster.portholder import port_holder

ROOT = Path(__file__).resolve().parents[1]


def test_port_holder_names_this_process():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        command = ' '.join(open('/proc/self/cmdline').read().split(chr(0))).strip()[:200]
        assert port_holder(port) == f"pid {os.getpid()} ({command})"
    assert port_holder(port) is None


def test_second_job_on_a_held_port_is_refused_naming_port_and_holder(tmp_path):
    """A one-node, two-rank job whose derived port another job's master already holds."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_", "TORCHELASTIC_"))
               and k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
        env.update(PYTHONPATH=str(ROOT), WORLD_SIZE="2", RANK="0", LOCAL_RANK="0", LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        done = subprocess.run([sys.executable, "-m", "train", "fit", "--config", "tiny",
                               f"output.dir={tmp_path / 'run'}", "dist.init_timeout_seconds=60"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"127.0.0.1:{port}" in done.stderr and f"pid {os.getpid()}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
