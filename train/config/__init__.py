"""Typed run configuration: YAML files shipped in `train/configs/`, plus `section.key=value` overrides.

`load_config(name_or_path, overrides)` returns a frozen `Config`. Every mistake (unknown section or key, wrong
type, value out of its allowed set, a key given twice, a file that is empty or not text) is a `UserError` that
names the key or the file and what would be valid, so a typo never silently trains the wrong model.

The rooms, one job each (torch-free, so a login node checks a config without torch):
- setting: `setting(default, doc, choices=..., above=..., at_least=...)`, the one declaration of a setting;
- sections: the sections' dataclasses, every setting declared there once;
- checks: each value against its type and its declaration, then what fields say together;
- loading: shipped configs and YAML files, the overrides, `dump_config`.
"""

from train.config.checks import check_layer_fanouts, coerce
from train.config.loading import (
    CONFIG_DIR,
    CONFIG_OPTION,
    available_configs,
    config_from_dict,
    config_given,
    config_path,
    dump_config,
    load_config,
    parse_override,
    read_config_file,
)
from train.config.sections import (
    BUILTIN_MODELS,
    USER_MODEL_RE,
    Config,
    DataConfig,
    DistConfig,
    EvalConfig,
    ModelConfig,
    OptimConfig,
    OutputConfig,
    SamplerConfig,
    TaskConfig,
    TrainerConfig,
)
from train.config.setting import Switch, declared, setting, settings_help, spec_named, spec_of
from train.files import load_yaml  # where it was

__all__ = [
    "BUILTIN_MODELS", "CONFIG_DIR", "CONFIG_OPTION", "USER_MODEL_RE", "Config", "DataConfig", "DistConfig",
    "EvalConfig", "ModelConfig", "OptimConfig", "OutputConfig", "SamplerConfig", "Switch", "TaskConfig",
    "TrainerConfig", "available_configs", "check_layer_fanouts", "coerce", "config_from_dict", "config_given",
    "config_path", "declared", "dump_config", "load_config", "load_yaml", "parse_override", "read_config_file",
    "setting", "settings_help", "spec_named", "spec_of",
]
