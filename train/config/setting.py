"""The one declaration of a config setting: `setting(default, doc, ...)`, a dataclass field whose metadata holds
what the checks, `python -m train fit --help` and the docs read (train/config/sections.py declares them all).

A setting is declared once, in its section's dataclass, e.g.::

    batch_size: int = setting(1024, "seed nodes (or edges) per training batch", above=0)

Its annotation is its type; `setting` holds its default, its doc and what values it takes (`choices`, or a range:
`above`, `at_least`, `below`). Nothing else lists it: `spec_of(field)` reads it back, `declared(Config)` walks
every section's settings, in order.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import textwrap
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


class Switch(str):
    """A key that is true, false or auto (on where the machine allows it); YAML's booleans are taken as true/false."""


@dataclass(frozen=True)
class SettingSpec:
    """What one setting declares beside its type and default.

    Args:
        doc: what it does, for `--help` and the docs (one or two sentences).
        choices: the values it takes, the first listed first in a refusal; empty: any value of its type.
        above: the value must be greater than this (e.g. 0: positive).
        at_least: the value must be at least this (e.g. 0: non-negative).
        below: the value must be less than this (with `at_least`: the range [at_least, below)).
        testing: a key for the tests only, accepted but not listed to users.
        same_on_resume: it changes what the model is or what it is trained on, so a checkpoint made with another
            value cannot be continued (train/loop/checkpoint.py); the model section is so as a whole.
    """

    doc: str
    choices: tuple[str, ...] = ()
    above: float | None = None
    at_least: float | None = None
    below: float | None = None
    testing: bool = False
    same_on_resume: bool = False

    def refusal(self, value: Any) -> str:
        """Why `value` is out of this setting's values ("" when it is in them): the end of a UserError's words."""
        if self.choices and value not in self.choices:
            return f"is not valid; expected one of: {', '.join(self.choices)}."
        if isinstance(value, float) and not math.isfinite(value):
            return "must be a finite number."
        if self.at_least is not None and self.below is not None:
            inside = self.at_least <= value < self.below
            return "" if inside else f"must be in [{self.at_least}, {self.below})."
        if self.above is not None and not value > self.above:
            return f"must be > {self.above}."
        if self.at_least is not None and not value >= self.at_least:
            return f"must be >= {self.at_least}."
        if self.below is not None and not value < self.below:
            return f"must be < {self.below}."
        return ""

    def values_text(self) -> str:
        """The values it takes, in words for `--help` ("" where any value of its type)."""
        if self.choices:
            return " | ".join(self.choices)
        if self.at_least is not None and self.below is not None:
            return f"in [{self.at_least}, {self.below})"
        bounds = [f"> {self.above}" if self.above is not None else "",
                  f">= {self.at_least}" if self.at_least is not None else "",
                  f"< {self.below}" if self.below is not None else ""]
        return ", ".join(b for b in bounds if b)


def setting(default: Any, doc: str, *, choices: tuple[str, ...] = (), above: float | None = None,
            at_least: float | None = None, below: float | None = None, testing: bool = False,
            same_on_resume: bool = False) -> Any:
    """Declare one config setting: a dataclass field with its default and a `SettingSpec` in its metadata.

    Args:
        default: its value when the config does not give one; a list or mapping is copied for each config.
        doc: what it does (shown by `python -m train fit --help`).
        choices: the values a string setting takes; the default must be one of them.
        above, at_least, below: the range of a number (see `SettingSpec`).
        testing: a key for the tests only, left out of the keys a refusal lists.
        same_on_resume: a checkpoint made with another value cannot be continued (see `SettingSpec`).

    Returns:
        A `dataclasses.field` for the section's dataclass.

    Example::

        @dataclass(frozen=True)
        class TrainerConfig:
            epochs: int = setting(20, "passes over the training seeds", above=0)
    """
    if choices and default not in choices:
        raise ValueError(f"default {default!r} is not among the choices {choices}")  # a declaration's own mistake
    spec = SettingSpec(doc, tuple(choices), above, at_least, below, testing, same_on_resume)
    metadata = {"setting": spec}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def spec_of(field: dataclasses.Field) -> SettingSpec:
    """The declaration of a section's field (a field declared without `setting` is a mistake of the code)."""
    spec = field.metadata.get("setting")
    if spec is None:
        raise TypeError(f"config field {field.name!r} is not declared with train.config.setting()")
    return spec


def spec_named(section_cls: type, name: str) -> SettingSpec:
    """The declaration of the setting `name` of a section (e.g. `spec_named(DataConfig, "feature_dtype").choices`:
    what code that maps each allowed value reads, so the values are listed once)."""
    return spec_of(next(f for f in dataclasses.fields(section_cls) if f.name == name))


@dataclass(frozen=True)
class Declared:
    """One setting as the config declares it: `section.key`, its type, default and spec."""

    key: str
    type: Any
    default: Any
    spec: SettingSpec


def declared(config_cls: type) -> Iterator[Declared]:
    """Every setting of every section of `config_cls` (train.config.Config), in declaration order."""
    for section in dataclasses.fields(config_cls):
        section_cls = typing.get_type_hints(config_cls)[section.name]
        hints = typing.get_type_hints(section_cls)
        for field in dataclasses.fields(section_cls):
            default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
            yield Declared(f"{section.name}.{field.name}", hints[field.name], default, spec_of(field))


def type_name(tp: Any) -> str:
    """`int`, `list[int]`, `Switch` as a user reads them."""
    if typing.get_origin(tp) is not None:
        return str(tp).replace("typing.", "")
    return getattr(tp, "__name__", str(tp))


def settings_help(config_cls: type) -> str:
    """Every user-facing setting, one entry each (key, type, default, values, doc): `python -m train fit --help`."""
    lines = []
    for item in declared(config_cls):
        if item.spec.testing:
            continue
        values = item.spec.values_text()
        lines.append(f"  {item.key} ({type_name(item.type)}, default {item.default!r}"
                     f"{'; ' + values if values else ''})")
        lines.append(textwrap.fill(item.spec.doc, width=116, initial_indent=" " * 6, subsequent_indent=" " * 6))
    return "\n".join(lines)
