"""The config's checks: each value against its field's type (converted only where that is lossless), then against
its declaration (train/config/setting.py: choices, ranges, finite numbers), then what fields say together.

Every refusal is a `UserError` that names the key and what would be valid.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from train.builtin_models import BUILTINS
from train.config.sections import BUILTIN_MODELS, USER_MODEL_RE, Config
from train.config.setting import Switch, declared, spec_of, type_name
from train.errors import UserError, unknown_key

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
    """true/false from YAML's booleans (`output.tensorboard=true`); a string as given (its choices check it)."""
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


def coerce(key: str, value: Any, tp) -> Any:
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
            raise UserError(f"{key}={value!r} must be a list of {type_name(item_tp)}, e.g. {key}=[25,10].")
        return [coerce(f"{key}[{i}]", item, item_tp) for i, item in enumerate(value)]
    if origin in (typing.Union, types.UnionType):
        raise TypeError(f"unsupported config type for {key}: {tp}")  # keep config types simple
    convert = _SCALARS.get(tp)
    converted = convert(value) if convert is not None else _REFUSED
    if converted is _REFUSED:
        raise UserError(f"{key}={value!r} must be of type {type_name(tp)}.")
    return converted


def section_fields(section_cls) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(section_cls)}


def build(raw: dict[str, Any]) -> Config:
    """A checked `Config` from its sections' raw values (YAML and overrides merged)."""
    sections = section_fields(Config)
    hints = typing.get_type_hints(Config)
    built = {}
    for section_name, values in raw.items():
        if section_name not in sections:
            raise UserError(f"unknown config section {section_name!r}; valid sections: {', '.join(sections)}.")
        if not isinstance(values, dict):
            raise UserError(f"config section {section_name!r} must be a mapping of keys to values.")
        section_cls = hints[section_name]
        fields = section_fields(section_cls)
        field_types = typing.get_type_hints(section_cls)
        kwargs = {}
        for key, value in values.items():
            dotted = f"{section_name}.{key}"
            if key not in fields:  # named with every section's keys, for the closest one (errors.unknown_key)
                keys = {name: [k for k, f in section_fields(hints[name]).items() if not spec_of(f).testing]
                        for name in sections}
                raise UserError(unknown_key(section_name, key, keys))
            kwargs[key] = coerce(dotted, value, field_types[key])
        built[section_name] = section_cls(**kwargs)
    config = Config(**built)
    validate(config)
    return config


def validate(config: Config) -> None:
    """Refuse the first value out of range: single values first (as declared), then what fields say together."""
    for item in declared(Config):
        section, _, key = item.key.partition(".")
        value = getattr(getattr(config, section), key)
        why = item.spec.refusal(value)
        if why:
            raise UserError(f"{item.key}={value!r} {why}")
    _check_model_name(config.model.name)
    _check_fanouts(config)
    _check_fractions(config)


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


def _check_fractions(config: Config) -> None:
    """The splits' fractions together: room for a test split (what a dataset kind needs:
    train/graph/datasets/kinds.py), and for a link task's training edges."""
    if not 0 < config.data.train_fraction + config.data.val_fraction < 1:
        raise UserError("data.train_fraction + data.val_fraction must be between 0 and 1 (the rest is test).")
    task = config.task
    if not (task.val_fraction > 0 and task.test_fraction > 0 and task.val_fraction + task.test_fraction < 1):
        raise UserError(f"task.val_fraction={task.val_fraction!r} and task.test_fraction={task.test_fraction!r} "
                        "must each be > 0 and sum to below 1 (the rest of the edges train).")
