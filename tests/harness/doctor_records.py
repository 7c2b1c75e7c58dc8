"""Doctor records for the checks' tests: a `RankRecord` with every field filled, changed where a test says."""
from __future__ import annotations

import dataclasses

from train.cluster.distenv import DistEnv
from train.doctor.records import DataState, Device, Network, RankRecord, RunDir


def minimal_record(**changes) -> RankRecord:
    """One healthy rank 0 alone on node n1; `changes` as `changed` takes them (`device=Device(...)`, `job__rank=1`)."""
    job = DistEnv(world_size=1, rank=0, local_rank=0, local_world_size=1, node_rank=0, num_nodes=1,
                  master_addr="127.0.0.1", master_port=29500)
    record = RankRecord(job=job, host="n1", pid=1, backend="gloo",
                        device=Device(cpus=[0], ncpus=1), network=Network(master_ips=["127.0.0.1"]),
                        data=DataState("synthetic", "generated"), run_dir=RunDir("runs", True),
                        versions={"python": "3"}, config_digest="x")
    return changed(record, **changes)


def changed(record: RankRecord, **changes) -> RankRecord:
    """`record` with fields replaced; `part__field=value` replaces one field of a part (network__gloo_addr=...) or
    one entry of a mapping (versions__torch=...)."""
    parts: dict[str, dict] = {}
    plain = {}
    for path, value in changes.items():
        part, _, leaf = path.partition("__")
        if leaf:
            parts.setdefault(part, {})[leaf] = value
        else:
            plain[path] = value
    for part, fields in parts.items():
        current = plain.get(part, getattr(record, part))
        plain[part] = {**current, **fields} if isinstance(current, dict) else dataclasses.replace(current, **fields)
    return dataclasses.replace(record, **plain)
