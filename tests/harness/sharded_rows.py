"""The graphs and the fetch check of issue 40's bit-for-bit comparison, one home for the local gloo ranks
(tests/test_sharded_features.py) and the srun steps on the test cluster (tests/harness/workers/sharded_rows.py,
tests/test_sharded_slurm.py): a homogeneous synthetic graph of NUM_NODES nodes and a typed one, loaded sharded over
the ranks' nodes, and every row fetched compared with the replicated gather. torch is imported where used, so a test
that only reads the ranks' results does not start it."""

from __future__ import annotations

from dataclasses import replace

from train.cluster.distenv import DistEnv
from train.config import DataConfig, load_config

NUM_NODES = 701  # 701 rows: uneven over 2, 3 and 4 nodes
HOMOGENEOUS = DataConfig(num_nodes=NUM_NODES, num_features=12, num_classes=5, avg_degree=6, features="sharded")


def homogeneous(config: DataConfig):
    """The synthetic graph of `config`, whole (the replicated copy every rank can build alike)."""
    from train.graph.datasets.loading import synthetic_graph

    return synthetic_graph(config)


def typed_config() -> DataConfig:
    """The typed synthetic graph (configs/hetero-synthetic.yaml) at 600 nodes, sharded."""
    return load_config("hetero-synthetic", ["data.num_nodes=600", "data.features=sharded"]).data


def sharded(config: DataConfig, load, env: DistEnv, dtype=None, share_dir: str = ""):
    """The graph of `config` with its features sharded over `env`'s nodes (collective over every rank of the default
    process group), in `dtype` (float32 unless given); `share_dir` kept to be measured where given."""
    import torch

    from train.graph.sharing.feature_layout import LayoutChoice
    from train.graph.sharing.feature_shards import obtain_graph_with_features

    config = replace(config, share_dir=share_dir, share_keep=bool(share_dir))
    return obtain_graph_with_features(config, env, load, LayoutChoice(config.features, "as asked"),
                                      collective_timeout_seconds=60, dtype=dtype or torch.float32)


def fetches(store, whole, rank: int) -> dict:
    """Rank r makes r + 1 fetches of random ids (rank 1's first one empty): a session whose ranks fetch different
    numbers of times, ended together; every row compared bit for bit with the replicated gather `whole`, through
    PyG's FeatureStore door as well. Collective over every rank."""
    import torch

    generator = torch.Generator().manual_seed(rank)
    same, asked = True, 0
    with store.session():
        for number in range(rank + 1):
            count = 0 if number == 0 and rank == 1 else 37 * (number + 1)
            ids = torch.randint(0, whole.size(0), (count,), generator=generator)
            rows = store.rows(ids, torch.device("cpu"))
            same &= rows.dtype == whole.dtype and torch.equal(rows, whole[ids])
            asked += count
        store.release()
    ids = torch.randperm(whole.size(0), generator=generator)[:50]
    with store.session():  # PyG's door: get_tensor, and multi_get_tensor in one round
        one = store.get_tensor(group_name=None, attr_name="x", index=ids)
        two = store.multi_get_tensor([{"group_name": None, "attr_name": "x", "index": ids[:20]},
                                      {"group_name": None, "attr_name": "x", "index": ids[20:]}])
    same &= torch.equal(one, whole[ids]) and torch.equal(torch.cat(two), whole[ids])
    return {"same": bool(same), "asked": asked, "shard_rows": int(store.shard.size(0)),
            "size": list(store.get_tensor_size(group_name=None, attr_name="x"))}


def homogeneous_and_typed(env: DistEnv) -> dict:
    """The rows fetched against the replicated gather, for the homogeneous and the typed graph: {"homogeneous":
    fetches(...), "typed": fetches(...)}. Collective over every rank."""
    from train.graph.datasets.loading import load_graph
    from train.graph.form import graph_features

    plain = sharded(HOMOGENEOUS, homogeneous, env)
    typed = typed_config()
    return {"homogeneous": fetches(graph_features(plain), homogeneous(HOMOGENEOUS).x, env.rank),
            "typed": fetches(graph_features(sharded(typed, load_graph, env)), load_graph(typed).x, env.rank)}
