"""Where a config comes from: a shipped YAML file by name or a YAML file by path, then `section.key=value`
overrides; and where it goes (`dump_config`). The values are checked by train/config/checks.py."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import yaml

from train.config.checks import build
from train.config.sections import Config
from train.errors import UserError
from train.files import DuplicateKey, check_file, load_yaml, read_text, yaml_problem
from train.storage.writes import atomic_write_text

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
CONFIG_OPTION = "--config"  # what python -m train calls the config; make gives its own name for it (--config-knob)


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
    """The config `name_or_path` with its overrides, checked.

    Args:
        name_or_path: a shipped config's name (`synthetic`) or the path of a YAML file.
        overrides: `section.key=value` strings, applied in order after the file.
        knob: how the user gave the config, for messages (`--config`, or make's `CONFIG`).

    Returns:
        The frozen `Config`; any mistake is a `UserError` naming the key or the file.
    """
    path = config_path(name_or_path, knob)
    raw = read_config_file(path)
    for override in overrides:
        section, key, value = parse_override(override)
        raw.setdefault(section, {})
        if not isinstance(raw[section], dict):
            raise UserError(f"config section {section!r} in {str(path)!r} must be a mapping.")
        _set_override(raw[section], section, key, value)
    return build(raw)


def read_config_file(path: Path) -> dict:
    """The sections of a YAML config file; empty, not text, not YAML, a key given twice: a `UserError`."""
    what = f"config file {str(path)!r}"
    text = read_text(path, what, allow_empty=True)
    try:
        raw = load_yaml(text)
    except DuplicateKey as exc:
        raise UserError(f"{what}: {exc}.") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{what} is not valid YAML: {yaml_problem(exc, text)}") from None
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
    return build(raw)


def dump_config(config: Config, path: Path) -> None:
    atomic_write_text(path, yaml.safe_dump(config.to_dict(), sort_keys=False))
