"""Each config setting is declared once (train/config/sections.py: `setting(default, doc, choices=..., above=...,
at_least=...)`), and the checks and `--help` read that declaration: no list of names kept beside it."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from train.builtin_tasks import TASKS
from train.cli.fit import add_config_arguments
from train.config import Config, declared, load_config, spec_of
from train.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
DECLARED = list(declared(Config))
BOUNDED = [item for item in DECLARED if item.spec.choices or item.spec.above is not None
           or item.spec.at_least is not None or item.spec.below is not None]


def test_every_field_of_every_section_is_declared_with_a_doc():
    fields = [f for section in dataclasses.fields(Config) for f in dataclasses.fields(getattr(Config(), section.name))]
    for field in fields:
        assert spec_of(field).doc.strip(), field.name
    assert len(DECLARED) == len(fields)
    for item in DECLARED:
        assert not item.spec.refusal(item.default), f"{item.key}: its default is out of its own range"


def _out_of_range(item) -> object:
    """A value of the setting's type that its declaration refuses."""
    spec = item.spec
    if spec.choices:
        return "not-" + spec.choices[0]
    if spec.above is not None:
        return type(item.default)(spec.above)
    if spec.at_least is not None:
        return type(item.default)(spec.at_least - 1)
    return type(item.default)(spec.below)


@pytest.mark.parametrize("item", BOUNDED, ids=[item.key for item in BOUNDED])
def test_every_declared_range_and_choice_is_checked_with_its_words(item):
    value = _out_of_range(item)
    with pytest.raises(UserError) as caught:
        load_config("tiny", [f"{item.key}={value}"])
    said = str(caught.value)
    assert said.startswith(f"{item.key}={value!r} ")
    spec = item.spec
    if spec.choices:
        assert said.endswith(f"is not valid; expected one of: {', '.join(spec.choices)}.")
    elif spec.at_least is not None and spec.below is not None:
        assert said.endswith(f"must be in [{spec.at_least}, {spec.below}).")
    elif spec.above is not None:
        assert said.endswith(f"must be > {spec.above}.")
    else:
        assert said.endswith(f"must be >= {spec.at_least}.")


@pytest.mark.parametrize("key", ["optim.lr", "data.avg_degree"])
def test_every_float_must_be_finite(key):
    with pytest.raises(UserError, match=rf"^{re.escape(key)}=inf must be a finite number\.$"):
        load_config("tiny", [f"{key}=.inf"])


def test_a_testing_key_is_accepted_but_not_listed():
    testing = [item.key for item in DECLARED if item.spec.testing]
    assert "trainer.fail_at_step" in testing
    assert load_config("tiny", ["trainer.fail_at_step=3"]).trainer.fail_at_step == 3
    with pytest.raises(UserError) as caught:
        load_config("tiny", ["trainer.epochz=3"])
    assert "epochs" in str(caught.value) and "fail_at_step" not in str(caught.value)


def test_help_lists_every_setting_with_its_default_values_and_doc():
    parser = argparse.ArgumentParser(prog="python -m train fit")
    add_config_arguments(parser)
    text = " ".join(parser.format_help().split())  # the docs are wrapped
    for item in DECLARED:
        if item.spec.testing:
            assert f" {item.key} (" not in text
            continue
        assert f" {item.key} (" in text and f"default {item.default!r}" in text
        assert " ".join(item.spec.doc.split()) in text, item.key
        if item.spec.choices:
            assert " | ".join(item.spec.choices) in text


def test_task_names_are_the_task_tables():
    (task_name,) = [item for item in DECLARED if item.key == "task.name"]
    assert task_name.spec.choices == tuple(TASKS)


def test_no_list_of_setting_names_is_kept_beside_the_declarations():
    """The old side lists (CHOICES, POSITIVE, NON_NEGATIVE) are gone, and no module spells a section's key list."""
    for path in (ROOT / "train").rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"^(CHOICES|POSITIVE|NON_NEGATIVE)\b", text, flags=re.MULTILINE), path


def test_what_a_resume_must_keep_is_declared_with_the_setting():
    """A setting declared same_on_resume=True is one a checkpoint cannot be continued across (train/loop/checkpoint.py
    reads the declarations); any other may change between a run and its resume."""
    from train.loop.checkpoint import is_incompatible_key

    kept = {item.key for item in DECLARED if item.spec.same_on_resume}
    assert {"data.name", "sampler.batch_size", "trainer.seed"} <= kept and "trainer.epochs" not in kept
    for item in DECLARED:
        assert is_incompatible_key(item.key) == (item.key in kept or item.key.startswith("model.")), item.key
