"""The config's sections and every setting, each declared once: type, default, allowed values or range, doc.

A setting is one line, `key: type = setting(default, doc, choices=... | above=... | at_least=...)`
(train/config/setting.py); the checks (train/config/checks.py), `python -m train fit --help` and the docs read
it there. CONTRIBUTING.md ("Adding a config setting") shows the steps.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from train.builtin_models import BUILTINS
from train.builtin_tasks import TASKS
from train.config.setting import Switch, setting

# The models `model.name` names: PyG's GraphSAGE, GCN, GAT, GIN, GINE, MLP (their table: train/builtin_models.py);
# any other name must be `package.module:ClassName`, the user's own torch.nn.Module (README: "Your own model").
BUILTIN_MODELS: tuple[str, ...] = tuple(BUILTINS)
USER_MODEL_RE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


@dataclass(frozen=True)
class DataConfig:
    name: str = setting("synthetic", "the dataset: synthetic | files | Reddit, Cora, ogbn-products, ... "
                        "(train/graph/datasets/kinds.py DATASETS)", same_on_resume=True)
    root: str = setting("", "where datasets live: '' -> $DATA_DIR, else ./data")
    path: str = setting("", "data.name=files: a folder of arrays or a saved PyG Data (.pt), see "
                        "train/graph/datasets/graph_files.py")
    share: str = setting("node", "node: one copy per node in shared memory; process: each rank loads its own",
                         choices=("node", "process"))
    features: str = setting("auto", "node: each node holds every feature row; sharded: each node its own rows, "
                            "the others fetched by all-to-all; auto: decided from the node's memory "
                            "(train/graph/sharing/feature_layout.py)", choices=("auto", "node", "sharded"))
    share_dir: str = setting("", "'' -> /dev/shm, else node-local disk ($SLURM_TMPDIR, $TMPDIR, /tmp) when it is "
                             "too small")
    share_keep: bool = setting(False, "keep the shared files until exit, to inspect them; else unlink once all "
                               "ranks map them")
    load_timeout_seconds: float = setting(3600.0, "how long ranks wait for the others to load the graph (all "
                                          "nodes)", above=0)
    load_delay_seconds: float = setting(0.0, "testing aid: node `load_delay_node` loads the graph this much later",
                                        at_least=0)
    load_delay_node: int = setting(0, "testing aid: the node that loads late (data.load_delay_seconds)", at_least=0)
    normalize_features: bool = setting(False, "scale each node's features to sum 1 (PyG's NormalizeFeatures; "
                                       "Planetoid's)", same_on_resume=True)
    feature_dtype: str = setting(
        "float32", "how the features placed on the GPU are stored (sampler.device auto/cuda): bfloat16 or float16 "
        "halve their memory and the bandwidth of every gather; the model still computes in float32 "
        "(train/models/step.py)", choices=("float32", "bfloat16", "float16"))
    target_node_type: str = setting("", "a heterogeneous graph's type classified ('': the dataset's own; "
                                    "docs/data.md)")
    featureless: str = setting("zeros", "a type without x: zeros (the model's embedding) or degree "
                               "(log(1 + in-degree))", choices=("zeros", "degree"))
    # the synthetic graph: a stochastic block model with noisy class-dependent features
    num_nodes: int = setting(20000, "synthetic graph: its nodes", above=0, same_on_resume=True)
    num_classes: int = setting(8, "synthetic graph: its classes (blocks)", above=0, same_on_resume=True)
    num_features: int = setting(32, "synthetic graph: features per node", above=0, same_on_resume=True)
    avg_degree: float = setting(12.0, "synthetic graph: mean edges per node", same_on_resume=True)
    homophily: float = setting(0.8, "synthetic graph: fraction of a node's edges that stay inside its class",
                               same_on_resume=True)
    feature_signal: float = setting(0.3, "synthetic graph: class-centroid strength relative to unit noise",
                                    same_on_resume=True)
    edge_features: int = setting(
        0, "synthetic graph, > 0: each edge gets this many features, a noisy signal of its target's class "
        "(data.edge_signal against unit noise), for a model that reads edge features (configs/synthetic-edges.yaml)",
        at_least=0)
    edge_signal: float = setting(1.0, "synthetic graph: the edge features' signal against unit noise")
    train_fraction: float = setting(0.6, "generated graphs: the training nodes' fraction", same_on_resume=True)
    val_fraction: float = setting(0.2, "generated graphs: the validation nodes' fraction (the rest is test)",
                                  same_on_resume=True)
    seed: int = setting(0, "the seed the generated graphs (synthetic, hetero-synthetic) are made from",
                        same_on_resume=True)


@dataclass(frozen=True)
class SamplerConfig:
    num_neighbors: list[int] = setting([25, 10], "the training fanouts, one per layer (-1: every neighbour)",
                                       same_on_resume=True)
    batch_size: int = setting(1024, "seeds per training batch (nodes, or a link task's edges)", above=0,
                              same_on_resume=True)
    eval_batch_size: int = setting(2048, "seeds per evaluation batch, and the exact pass's chunk of targets",
                                   above=0)
    device: str = setting(
        "auto", "auto: on a GPU when the graph's structure and features fit there beside the training and "
        "evaluation working sets (train/graph/sampling/device_plan.py), else the CPU; cuda: the structure on the "
        "GPU whenever it fits; cpu", choices=("auto", "cpu", "cuda"))
    num_workers: int = setting(0, "the loader's worker processes (CPU sampling)", at_least=0)
    pin_memory: bool = setting(True, "pin batches in host memory; only used when training on CUDA with features "
                               "on the host")
    prefetch: int = setting(
        1, "batches sampled, gathered and copied ahead on a thread while the step computes "
        "(train/loop/prefetch.py); the same weights as 0 (serially); not with PyG's native sampler in this process "
        "(num_workers 0)", at_least=0)


@dataclass(frozen=True)
class ModelConfig:
    name: str = setting("sage", "a built-in (train/builtin_models.py) | package.module:ClassName (checked by "
                        "train/config/checks.py)")
    hidden: int = setting(256, "the hidden layers' width", above=0)
    num_layers: int = setting(2, "message-passing layers (one fanout each)", above=0)
    dropout: float = setting(0.5, "dropout between layers", at_least=0, below=1)
    input_dropout: float = setting(
        0.0, "dropout on the input features, before the first layer, as the Planetoid papers train GCN and GAT "
        "(PyG's BasicGNN drops only between layers); applied by the workflow to any model's input; 0: off",
        at_least=0, below=1)
    kwargs: dict[str, Any] = setting(
        {}, "more constructor arguments of the model, by name (GAT's heads, edge_dim, jk, ...): a mapping in YAML, "
        "or model.kwargs.heads=8 on the command line; each is checked against the model's own before the rendezvous")
    trim: bool = setting(
        True, "each layer computes only the rows later layers read (the batch's hop counts): the seeds' outputs are "
        "the same as computing every sampled node, at a fraction of the work; false: every row")


@dataclass(frozen=True)
class OptimConfig:
    lr: float = setting(0.001, "Adam's learning rate", above=0)
    weight_decay: float = setting(0.0, "Adam's weight decay", at_least=0)


@dataclass(frozen=True)
class TrainerConfig:
    epochs: int = setting(20, "passes over the training seeds", above=0)
    seed: int = setting(12345, "the run's seed: weights, shuffles, samples, dropout", same_on_resume=True)
    eval_every: int = setting(1, "epochs between evaluations", above=0)
    log_every: int = setting(20, "steps between plain log lines when stdout is not a terminal", above=0)
    max_steps_per_epoch: int = setting(0, "steps per epoch at most (0: the whole shard)", at_least=0)
    resume: str = setting("auto", "auto | never | PATH to a checkpoint file")
    keep_checkpoints: int = setting(3, "checkpoints kept (the oldest removed)", above=0)
    checkpoint_every: int = setting(1, "epochs between checkpoints (0: only at the end / on signal)", at_least=0)
    checkpoint_every_minutes: float = setting(0.0, "also checkpoint at a step boundary after this long (0: off)",
                                              at_least=0)
    max_restarts: int = setting(3, "requeues after a stop signal (SLURM_RESTART_COUNT); then exit 4, not 3",
                                at_least=0)
    # Testing aids (left out of the valid keys a message lists)
    fail_at_step: int = setting(-1, "raise on trainer.fail_rank at this global step (-1: off)", testing=True)
    fail_rank: int = setting(0, "the rank trainer.fail_at_step fails", testing=True)
    step_delay_seconds: float = setting(0.0, "sleep after each step, so a short run can be interrupted",
                                        at_least=0, testing=True)
    deterministic: bool = setting(
        False, "on a GPU: TF32 off, deterministic scatter and cuBLAS (train/loop/numerics.py); off by default since "
        "an H200 measured its cost at +56% and +109% per step (docs/doctor.md); bit-exact resume on a GPU needs true")


@dataclass(frozen=True)
class EvalConfig:
    mode: str = setting("full", "full: layer-wise over full neighbourhoods, each layer sharded (exact); sampled: "
                        "NeighborLoader", choices=("full", "sampled"))
    fanouts: list[int] = setting([], "eval.mode=sampled: one per layer; [] -> sampler.num_neighbors")


@dataclass(frozen=True)
class DistConfig:
    backend: str = setting("auto", "auto (nccl where CUDA is available, else gloo) | nccl | gloo",
                           choices=("auto", "nccl", "gloo"))
    init_timeout_seconds: float = setting(300.0, "how long the rendezvous waits for every rank", above=0)
    collective_timeout_seconds: float = setting(180.0, "a dead rank ends the others within this", above=0)
    exit_timeout_seconds: float = setting(
        60.0, "after its run ends, a rank leaves within this, with the run's exit status, even if torch.distributed's "
        "teardown hangs (train/errors.py leave_within); half of it is how long rank 0 waits for the others to leave "
        "first after a stop", above=0)


@dataclass(frozen=True)
class OutputConfig:
    dir: str = setting("", "'' -> runs/$SLURM_JOB_ID under SLURM, else runs/<timestamp>")
    progress: str = setting("auto", "auto (a bar in a terminal, else lines) | bar | lines",
                            choices=("auto", "bar", "lines"))
    tensorboard: Switch = setting(
        "auto", "TensorBoard event files in RUN_DIR/tensorboard/ (train/loop/tensorboard_events.py); auto: on when "
        "the tensorboard package is importable, else off and the log says so once; true: refused where it is "
        "missing", choices=("auto", "true", "false"))


@dataclass(frozen=True)
class TaskConfig:
    name: str = setting("node", "what the run trains for: node: classify nodes; link: predict edges "
                        "(train/builtin_tasks.py; docs/tasks.md)", choices=tuple(TASKS))
    head: str = setting("mlp", "link: how two node embeddings score an edge: dot (their dot product) | mlp (of "
                        "their product)", choices=("dot", "mlp"))
    embedding: int = setting(64, "link: the width of each node's embedding (the model's out_channels)", above=0)
    neg_sampling: str = setting("binary", "link: binary (random node pairs) | triplet (random targets per source)",
                                choices=("binary", "triplet"))
    neg_ratio: int = setting(1, "link: negatives per positive edge", above=0)
    val_fraction: float = setting(0.05, "link, graphs without their own edge split: PyG's RandomLinkSplit's val "
                                  "fraction")
    test_fraction: float = setting(0.1, "link, graphs without their own edge split: RandomLinkSplit's test "
                                   "fraction")


@dataclass(frozen=True)
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    task: TaskConfig = field(default_factory=TaskConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
