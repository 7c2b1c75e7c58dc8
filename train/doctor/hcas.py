"""What links this node has for NCCL between nodes, read where the kernel shows them (sysfs, /dev): a side effect at
the edge; train/doctor/links.py judges it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from train.doctor.records import Hca, Links


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def probe_links(environ: Mapping[str, str], iface: str | None, sys_root: Path = Path("/sys"),
                dev_root: Path = Path("/dev")) -> Links:
    """What NCCL could use between nodes, as this rank sees it (train/doctor/links.py judges it): the node's active
    InfiniBand/RoCE ports and their rate (sysfs, visible in a container too), whether the HCAs' device files are in
    the container (/dev/infiniband), the speed of the interface that reaches the master, and the NCCL settings that
    steer the choice."""
    hcas = []
    for port in sorted((sys_root / "class" / "infiniband").glob("*/ports/*")):
        rate = re.match(r"([\d.]+) Gb/sec", _read(port / "rate"))
        if "ACTIVE" in _read(port / "state") and rate:
            hcas.append(Hca(f"{port.parent.parent.name}:{port.name}", float(rate.group(1))))
    speed = _read(sys_root / "class" / "net" / iface / "speed") if iface else ""
    return Links(hcas=hcas, devices=(dev_root / "infiniband").is_dir(), iface=iface,
                 iface_mbps=int(speed) if speed.isdigit() and int(speed) > 0 else None,  # -1: no link
                 nccl_net=environ.get("NCCL_NET"), ib_hca=environ.get("NCCL_IB_HCA"),
                 ib_disable=environ.get("NCCL_IB_DISABLE") == "1")
