"""Typed run configuration: YAML files shipped in `train/configs/`, plus `section.key=value` overrides.

`load_config(name_or_path, overrides)` returns a frozen `Config`. Every mistake (unknown
section or key, wrong type, value out of its allowed set, a key given twice, a file that is empty
or not text) is a `UserError` that names the key or the file and what would be valid, so a typo
never silently trains the wrong model.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from train.builtin_models import BUILTINS
from train.errors import UserError
from train.files import DuplicateKey, check_file, load_yaml, read_text  # noqa: F401 (load_yaml: where it was)
from train.storage.writes import atomic_write_text

CONFIG_DIR = Path(__file__).parent / "configs"
CONFIG_OPTION = "--config"  # what python -m train calls the config; make gives its own name for it (--config-knob)


@dataclass(frozen=True)
class DataConfig:
    name: str = "synthetic"  # synthetic | files | Reddit, Cora, ogbn-products, ... (graph.datasets.kinds.DATASETS)
    root: str = ""  # "" -> $DATA_DIR, else ./data
    path: str = ""  # data.name=files: a folder of arrays or a saved PyG Data (.pt), see graph/datasets/graph_files.py
    share: str = "node"  # node: one copy per node in shared memory; process: each rank loads its own
    share_dir: str = ""  # "" -> /dev/shm, else node-local disk ($SLURM_TMPDIR, $TMPDIR, /tmp) when it is too small
    share_keep: bool = False  # keep the shared files until exit, to inspect them; else unlink once all ranks map them
    # node | sharded (each node its own rows, the others' fetched by all-to-all) | auto (docs/memory.md)
    features: str = "auto"
    load_timeout_seconds: float = 3600.0  # how long ranks wait for the others to load the graph (all nodes)
    load_delay_seconds: float = 0.0  # testing aid: node `load_delay_node` loads the graph this much later
    load_delay_node: int = 0
    normalize_features: bool = False  # scale each node's features to sum 1 (PyG's NormalizeFeatures; Planetoid's)
    # How the features placed on the GPU are stored (sampler.device auto/cuda): bfloat16 or float16 halve their
    # memory and the bandwidth of every gather; the model still computes in float32 (train/models/step.py).
    feature_dtype: str = "float32"
    target_node_type: str = ""  # a heterogeneous graph's type classified ("": the dataset's own; docs/data.md)
    featureless: str = "zeros"  # a type without x: zeros (the model's embedding) or degree (log(1 + in-degree))
    # synthetic graph (a stochastic block model with noisy class-dependent features)
    num_nodes: int = 20000
    num_classes: int = 8
    num_features: int = 32
    avg_degree: float = 12.0
    homophily: float = 0.8  # fraction of a node's edges that stay inside its class
    feature_signal: float = 0.3  # class-centroid strength relative to unit noise
    # > 0: each edge gets this many features, a noisy signal of its target's class (edge_signal against unit
    # noise): a model that reads edge features can learn from them (configs/synthetic-edges.yaml)
    edge_features: int = 0
    edge_signal: float = 1.0
    train_fraction: float = 0.6
    val_fraction: float = 0.2
    seed: int = 0


@dataclass(frozen=True)
class SamplerConfig:
    num_neighbors: list[int] = field(default_factory=lambda: [25, 10])
    batch_size: int = 1024
    eval_batch_size: int = 2048
    # auto: on a GPU when the graph's structure and features fit there beside the training and evaluation working
    # sets (train/graph/sampling/device_plan.py), else the CPU; cuda: the structure on the GPU whenever it fits; cpu
    device: str = "auto"
    num_workers: int = 0
    pin_memory: bool = True  # only used when training on CUDA with features on the host
    # Batches sampled, gathered and copied ahead on a thread while the step computes (train/loop/prefetch.py);
    # the same weights as 0 (serially). Not with PyG's native sampler in this process (num_workers 0).
    prefetch: int = 1


# The models `model.name` names: PyG's GraphSAGE, GCN, GAT, GIN, GINE, MLP (their table: train/builtin_models.py);
# any other name must be `package.module:ClassName`, the user's own torch.nn.Module (README: "Your own model").
BUILTIN_MODELS: tuple[str, ...] = tuple(BUILTINS)
USER_MODEL_RE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


@dataclass(frozen=True)
class ModelConfig:
    name: str = "sage"  # a built-in (train/builtin_models.py) | package.module:ClassName
    hidden: int = 256
    num_layers: int = 2
    dropout: float = 0.5
    # Dropout on the input features, before the first layer, as the Planetoid papers train GCN and GAT (PyG's
    # BasicGNN drops only between layers); applied by the workflow to any model's input. 0: off.
    input_dropout: float = 0.0
    # More constructor arguments of the model, by name (GAT's heads, edge_dim, jk, ...): a mapping in YAML, or
    # model.kwargs.heads=8 on the command line; each is checked against the model's own before the rendezvous.
    kwargs: dict[str, Any] = field(default_factory=dict)
    # Each layer computes only the rows later layers read (the batch's hop counts): the seeds' outputs are
    # the same as computing every sampled node, at a fraction of the work. false: every row, as the seed does.
    trim: bool = True


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 0.001
    weight_decay: float = 0.0


TESTING = {"testing": True}  # a field's metadata: a key for the tests only, accepted but not listed to users


@dataclass(frozen=True)
class TrainerConfig:
    epochs: int = 20
    seed: int = 12345
    eval_every: int = 1
    log_every: int = 20  # steps between plain log lines when stdout is not a terminal
    max_steps_per_epoch: int = 0  # 0: the whole shard
    resume: str = "auto"  # auto | never | PATH to a checkpoint file
    keep_checkpoints: int = 3
    checkpoint_every: int = 1  # epochs between checkpoints (0: only at the end / on signal)
    checkpoint_every_minutes: float = 0.0  # also checkpoint at a step boundary after this long (0: off)
    max_restarts: int = 3  # requeues after a stop signal (SLURM_RESTART_COUNT); then exit 4, not 3
    # Testing aids (TESTING: left out of the valid keys a message lists): raise on `fail_rank` at this global
    # step (-1: off); sleep after each step, so a short run can be interrupted.
    fail_at_step: int = field(default=-1, metadata=TESTING)
    fail_rank: int = field(default=0, metadata=TESTING)
    step_delay_seconds: float = field(default=0.0, metadata=TESTING)
    # on a GPU: TF32 off, deterministic scatter and cuBLAS (train/loop/numerics.py); off by default since an H200
    # measured its cost at +56% and +109% per step (docs/doctor.md); bit-exact resume on a GPU needs true
    deterministic: bool = False


@dataclass(frozen=True)
class EvalConfig:
    mode: str = "full"  # full: layer-wise over full neighbourhoods, each layer sharded (exact); sampled: NeighborLoader
    fanouts: list[int] = field(default_factory=list)  # eval.mode=sampled: one per layer; [] -> sampler.num_neighbors


@dataclass(frozen=True)
class DistConfig:
    backend: str = "auto"  # auto | nccl | gloo
    init_timeout_seconds: float = 300.0
    collective_timeout_seconds: float = 180.0  # a dead rank ends the others within this


class Switch(str):
    """A key that is true, false or auto (on where the machine allows it); YAML's booleans are taken as true/false."""


@dataclass(frozen=True)
class OutputConfig:
    dir: str = ""  # "" -> runs/$SLURM_JOB_ID under SLURM, else runs/<timestamp>
    progress: str = "auto"  # auto | bar | lines
    # TensorBoard event files in RUN_DIR/tensorboard/ (train/loop/tensorboard_events.py); auto: on when the
    # tensorboard package is importable, else off and the log says so once; true: refused where it is missing.
    tensorboard: Switch = "auto"


@dataclass(frozen=True)
class TaskConfig:
    name: str = "node"  # node: classify nodes; link: predict edges (docs/tasks.md)
    head: str = "mlp"  # link: how two node embeddings score an edge: dot (their dot product) | mlp (of their product)
    embedding: int = 64  # link: the width of each node's embedding (the model's out_channels)
    neg_sampling: str = "binary"  # link: binary (random node pairs) | triplet (random targets per source)
    neg_ratio: int = 1  # link: negatives per positive edge
    val_fraction: float = 0.05  # link, graphs without their own edge split: PyG's RandomLinkSplit's val and test
    test_fraction: float = 0.1


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


CHOICES: dict[str, tuple[str, ...]] = {
    "data.share": ("node", "process"), "data.features": ("auto", "node", "sharded"),
    "sampler.device": ("auto", "cpu", "cuda"),
    "data.feature_dtype": ("float32", "bfloat16", "float16"),
    "data.featureless": ("zeros", "degree"),
    "eval.mode": ("full", "sampled"),
    "dist.backend": ("auto", "nccl", "gloo"),
    "output.progress": ("auto", "bar", "lines"),
    "output.tensorboard": ("auto", "true", "false"),
    "task.name": ("node", "link"), "task.head": ("dot", "mlp"), "task.neg_sampling": ("binary", "triplet"),
}
POSITIVE: tuple[str, ...] = (
    "data.num_nodes", "data.num_classes", "data.num_features", "sampler.batch_size",
    "sampler.eval_batch_size", "model.hidden", "model.num_layers", "trainer.epochs",
    "trainer.eval_every", "trainer.log_every", "trainer.keep_checkpoints",
    "dist.init_timeout_seconds", "dist.collective_timeout_seconds", "data.load_timeout_seconds", "optim.lr",
    "task.embedding", "task.neg_ratio",
)
NON_NEGATIVE: tuple[str, ...] = ("optim.weight_decay", "trainer.max_steps_per_epoch", "sampler.num_workers",
                                  "sampler.prefetch",
                                  "trainer.checkpoint_every", "trainer.checkpoint_every_minutes",
                                  "trainer.max_restarts", "trainer.step_delay_seconds", "data.load_delay_seconds",
                                  "data.load_delay_node", "data.edge_features")


def available_configs() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def config_given(name_or_path: str, knob: str = CONFIG_OPTION) -> str:
    """The config as the user gave it, for messages: `--config 'x'` to python -m train, `CONFIG='x'` to make."""
    return f"{knob} {name_or_path!r}" if knob.startswith("-") else f"{knob}={name_or_path!r}"


def config_path(name_or_path: str, knob: str = CONFIG_OPTION) -> Path:
    """A shipped config by name (`synthetic`) or a YAML file by path; a bad one is named as `knob` gave it (the
    command line's --config, make's CONFIG)."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or "/" in name_or_path:
        given = repr(name_or_path) if knob == CONFIG_OPTION else config_given(name_or_path, knob)
        check_file(path, f"config file {given}", allow_empty=True)  # empty: refused with its own words
        return path
    shipped = CONFIG_DIR / f"{name_or_path}.yaml"
    if not shipped.is_file():
        raise UserError(
            f"{config_given(name_or_path, knob)} is neither a shipped config nor a YAML file; expected a shipped "
            f"config's name ({', '.join(available_configs())}) or the path of a YAML file (.yaml, .yml)."
        )
    return shipped


def _section_fields(section_cls) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(section_cls)}


def _type_name(tp) -> str:
    return getattr(tp, "__name__", str(tp))


_REFUSED = object()  # a scalar converter's answer for a value it does not take


def _to_bool(value: Any) -> Any:
    return value if isinstance(value, bool) else _REFUSED


def _to_int(value: Any) -> Any:
    return value if isinstance(value, int) and not isinstance(value, bool) else _REFUSED


def _to_float(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string
        try:
            return float(value)
        except ValueError:
            pass
    return _REFUSED


def _to_str(value: Any) -> Any:
    return str(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else _REFUSED


def _to_switch(value: Any) -> Any:
    """true/false from YAML's booleans (`output.tensorboard=true`); a string as given (CHOICES checks it)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return _to_str(value)


# The scalar field types and their lossless conversions; any other type refuses every value.
_SCALARS = {bool: _to_bool, int: _to_int, float: _to_float, str: _to_str, Switch: _to_switch}


def _plain_data(key: str, value: Any) -> Any:
    """A YAML value of model.kwargs: scalars, None, lists and mappings with string keys, nothing else."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [_plain_data(f"{key}[{i}]", item) for i, item in enumerate(value)]
    if isinstance(value, dict):
        for name in value:
            if not isinstance(name, str) or not name.isidentifier():
                raise UserError(f"{key} has the key {name!r}; keys must be argument names (identifiers).")
        return {name: _plain_data(f"{key}.{name}", item) for name, item in value.items()}
    raise UserError(f"{key}={value!r} must be plain YAML data (numbers, strings, booleans, null, lists, mappings).")


def _coerce(key: str, value: Any, tp) -> Any:
    """Check `value` against the field type `tp`, converting only where it is lossless."""
    origin = typing.get_origin(tp)
    if origin is dict:
        if not isinstance(value, dict):
            raise UserError(f"{key}={value!r} must be a mapping of names to values, e.g. {key}.heads=8 "
                            f"or {key}={{heads: 8}}.")
        return _plain_data(key, value)
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise UserError(f"{key}={value!r} must be a list of {_type_name(item_tp)}, e.g. {key}=[25,10].")
        return [_coerce(f"{key}[{i}]", item, item_tp) for i, item in enumerate(value)]
    if origin in (typing.Union, types.UnionType):
        raise TypeError(f"unsupported config type for {key}: {tp}")  # keep config types simple
    convert = _SCALARS.get(tp)
    converted = convert(value) if convert is not None else _REFUSED
    if converted is _REFUSED:
        raise UserError(f"{key}={value!r} must be of type {_type_name(tp)}.")
    return converted


def _build(raw: dict[str, Any]) -> Config:
    sections = _section_fields(Config)
    hints = typing.get_type_hints(Config)
    built = {}
    for section_name, values in raw.items():
        if section_name not in sections:
            raise UserError(f"unknown config section {section_name!r}; valid sections: {', '.join(sections)}.")
        if not isinstance(values, dict):
            raise UserError(f"config section {section_name!r} must be a mapping of keys to values.")
        section_cls = hints[section_name]
        fields = _section_fields(section_cls)
        field_types = typing.get_type_hints(section_cls)
        kwargs = {}
        for key, value in values.items():
            dotted = f"{section_name}.{key}"
            if key not in fields:
                shown = [name for name, f in fields.items() if not f.metadata.get("testing")]
                raise UserError(f"unknown config key {dotted!r}; valid {section_name} keys: {', '.join(shown)}.")
            kwargs[key] = _coerce(dotted, value, field_types[key])
        built[section_name] = section_cls(**kwargs)
    config = Config(**built)
    _validate(config)
    return config


def _validate(config: Config) -> None:
    """Refuse the first value out of range: single values first, then what fields say together."""
    flat = {f"{s}.{k}": v for s, section in config.to_dict().items() for k, v in section.items()}
    _check_values(flat)
    _check_model_name(config.model.name)
    _check_fanouts(config)
    _check_model_and_data(config)


def _check_values(flat: dict[str, Any]) -> None:
    """Each `section.key` on its own: the choices, finite numbers, the positive and non-negative keys."""
    for key, choices in CHOICES.items():
        if flat[key] not in choices:
            raise UserError(f"{key}={flat[key]!r} is not valid; expected one of: {', '.join(choices)}.")
    for key, value in flat.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"{key}={value!r} must be a finite number.")
    for key in POSITIVE:
        if flat[key] <= 0:
            raise UserError(f"{key}={flat[key]!r} must be > 0.")
    for key in NON_NEGATIVE:
        if flat[key] < 0:
            raise UserError(f"{key}={flat[key]!r} must be >= 0.")


def _check_model_name(name: str) -> None:
    """A built-in model's name or `package.module:ClassName` (whether that imports is checked before training)."""
    if name not in BUILTIN_MODELS and not USER_MODEL_RE.fullmatch(name):
        raise UserError(f"model.name={name!r} is not valid; expected one of: {', '.join(BUILTIN_MODELS)}, or "
                        "package.module:ClassName for your own torch.nn.Module (e.g. mymodels.gnn:MyGNN).")


def _check_fanouts(config: Config) -> None:
    """The sampling fanouts for training and evaluation: valid, and one per layer of a built-in graph model (the
    user's model: `check_layer_fanouts` once its forward is known, train/cli/preflight.py)."""
    fanouts = config.sampler.num_neighbors
    if not fanouts or any(n == 0 or n < -1 for n in fanouts):
        raise UserError(
            f"sampler.num_neighbors={fanouts!r} must be a non-empty list of positive fanouts (or -1 for all)."
        )
    eval_fanouts = config.eval.fanouts
    if any(n == 0 or n < -1 for n in eval_fanouts):
        raise UserError(f"eval.fanouts={eval_fanouts!r} must be positive fanouts (or -1 for all), or [] for "
                        "sampler.num_neighbors.")
    if config.model.name in BUILTINS:
        check_layer_fanouts(config, BUILTINS[config.model.name].reads_graph)


def check_layer_fanouts(config: Config, reads_graph: bool) -> None:
    """One fanout per layer for a model that reads the graph (`reads_graph`: train/models/step.py decides it;
    a feature-only model's batches carry no neighbours, so its fanouts count nothing)."""
    if not reads_graph:
        return
    fanouts, eval_fanouts, layers = config.sampler.num_neighbors, config.eval.fanouts, config.model.num_layers
    if len(fanouts) != layers:
        raise UserError(f"sampler.num_neighbors={fanouts!r} has {len(fanouts)} hops but model.num_layers={layers}; "
                        "give one fanout per layer.")
    if eval_fanouts and len(eval_fanouts) != layers:
        raise UserError(f"eval.fanouts={eval_fanouts!r} has {len(eval_fanouts)} hops but model.num_layers={layers}; "
                        "give one fanout per layer (or [] for sampler.num_neighbors).")


def _check_model_and_data(config: Config) -> None:
    """The remaining ranges: dropout, room for a test split (what a dataset kind needs:
    train/graph/datasets/kinds.py)."""
    for key in ("dropout", "input_dropout"):
        value = getattr(config.model, key)
        if not 0 <= value < 1:
            raise UserError(f"model.{key}={value!r} must be in [0, 1).")
    if not 0 < config.data.train_fraction + config.data.val_fraction < 1:
        raise UserError("data.train_fraction + data.val_fraction must be between 0 and 1 (the rest is test).")
    task = config.task
    if not (task.val_fraction > 0 and task.test_fraction > 0 and task.val_fraction + task.test_fraction < 1):
        raise UserError(f"task.val_fraction={task.val_fraction!r} and task.test_fraction={task.test_fraction!r} "
                        "must each be > 0 and sum to below 1 (the rest of the edges train).")


def parse_override(text: str) -> tuple[str, str, Any]:
    """`section.key=value` -> (section, key, YAML-parsed value)."""
    if "=" not in text:
        raise UserError(f"override {text!r} must look like section.key=value, e.g. trainer.epochs=3.")
    dotted, _, raw_value = text.partition("=")
    section, dot, key = dotted.strip().partition(".")
    if not dot or not section or not key:
        raise UserError(f"override {text!r} must look like section.key=value (a section and a key), "
                        "e.g. trainer.epochs=3.")
    try:
        value = load_yaml(raw_value) if raw_value.strip() else ""
    except yaml.YAMLError:
        value = raw_value
    return section, key, value


def load_config(name_or_path: str = "synthetic", overrides: list[str] | tuple[str, ...] = (),
                knob: str = CONFIG_OPTION) -> Config:
    """The config `name_or_path` (config_path; a bad one named as `knob` gave it) with its overrides, checked."""
    path = config_path(name_or_path, knob)
    raw = read_config_file(path)
    for override in overrides:
        section, key, value = parse_override(override)
        raw.setdefault(section, {})
        if not isinstance(raw[section], dict):
            raise UserError(f"config section {section!r} in {str(path)!r} must be a mapping.")
        _set_override(raw[section], section, key, value)
    return _build(raw)


def read_config_file(path: Path) -> dict:
    """The sections of a YAML config file; empty, not text, not YAML, a key given twice: a `UserError`."""
    what = f"config file {str(path)!r}"
    text = read_text(path, what, allow_empty=True)
    try:
        raw = load_yaml(text)
    except DuplicateKey as exc:
        raise UserError(f"{what}: {exc}.") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{what} is not valid YAML: {exc}") from None
    if raw is None:
        problem = "is empty (0 bytes)" if not text else "holds no settings (only blanks or comments)"
        raise UserError(f"{what} {problem}; give sections such as `trainer:` with their keys (see "
                        "train/configs/synthetic.yaml), or --config synthetic for the defaults.")
    if not isinstance(raw, dict):
        raise UserError(f"{what} must be a mapping of sections (e.g. `trainer:` then `  epochs: 3`), "
                        f"not a {type(raw).__name__}.")
    return raw


def _set_override(values: dict, section: str, key: str, value: Any) -> None:
    """`key=value` into a section; `field.name=value` sets one entry of a mapping field (model.kwargs.heads=8)."""
    field_name, dot, entry = key.partition(".")
    if not dot:
        values[key] = value
        return
    hints = typing.get_type_hints(Config)
    section_cls = hints.get(section)
    field_tp = typing.get_type_hints(section_cls).get(field_name) if section_cls is not None else None
    if typing.get_origin(field_tp) is not dict:
        mappings = [f"{section}.{name}" for name, tp in typing.get_type_hints(section_cls).items()
                    if typing.get_origin(tp) is dict] if section_cls is not None else []
        raise UserError(f"unknown config key {section + '.' + key!r}; only a mapping field takes a dotted key "
                        f"({', '.join(mappings) or 'none in this section'}), e.g. model.kwargs.heads=8.")
    current = values.get(field_name)
    if current is None:
        current = values[field_name] = {}
    if not isinstance(current, dict):
        raise UserError(f"{section}.{field_name} in the config file must be a mapping to take {section}.{key}.")
    current[entry] = value


def config_from_dict(raw: dict[str, Any]) -> Config:
    """Rebuild a config written by `Config.to_dict` (e.g. from a checkpoint)."""
    return _build(raw)


def dump_config(config: Config, path: Path) -> None:
    atomic_write_text(path, yaml.safe_dump(config.to_dict(), sort_keys=False))
