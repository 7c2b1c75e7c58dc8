"""A config mistake in words: a key in the wrong section points to the section that has it (errors.unknown_key,
difflib over every section's keys), and malformed YAML says where and what (files.yaml_problem), not PyYAML's
raw text."""

from __future__ import annotations

import pytest

from train.config import load_config
from train.errors import UserError


@pytest.mark.parametrize(("override", "meant"), [
    ("data.num_neighbours=[5,5]", "sampler.num_neighbors"),  # another section's key, spelt the British way
    ("trainer.epoch=3", "trainer.epochs"),  # its own section's, misspelt
    ("optim.epochs=3", "trainer.epochs"),  # another section's, spelt right
    ("sampler.batchsize=64", "sampler.batch_size"),
])
def test_a_key_in_the_wrong_section_or_misspelt_points_to_the_closest_key(override, meant):
    with pytest.raises(UserError) as refused:
        load_config("tiny", [override])
    said = str(refused.value)
    section, key = override.split("=")[0].split(".")
    assert said.startswith(f"unknown config key '{section}.{key}'; valid {section} keys: "), said
    assert said.endswith(f"; did you mean {meant}?"), said


def test_a_key_close_to_none_lists_the_section_s_keys_alone():
    with pytest.raises(UserError) as refused:
        load_config("tiny", ["trainer.zzz=3"])
    assert str(refused.value).endswith("max_restarts, deterministic."), refused.value
    assert "did you mean" not in str(refused.value)


@pytest.mark.parametrize(("text", "where", "what", "line"), [
    ("trainer:\n  epochs: 3\n  lr: [1, 2\nmodel:\n  name: sage\n", "line 4, column 6",
     "expected ',' or ']', but got ':' (while parsing a flow sequence that starts at line 3)", "'model:'"),
    ("trainer:\n  epochs: 3\n bad: x\n", "line 3, column 2", "expected <block end>", "' bad: x'"),
    ("model:\n  name: 'sage\n", "line 3, column 1", "found unexpected end of stream", "''"),
])
def test_malformed_yaml_says_where_and_what(tmp_path, text, where, what, line):
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as refused:
        load_config(str(path))
    said = str(refused.value)
    assert said.startswith(f"config file '{path}' is not valid YAML: {where}: {what}"), said
    assert f"the line is {line}." in said, said
    assert "<unicode string>" not in said and "\n" not in said, said  # none of PyYAML's own text
