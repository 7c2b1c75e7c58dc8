"""The package says what it is in one sentence, the same in pyproject.toml and train/__init__.py."""

from __future__ import annotations

import re

import train
from tests.test_layout import ROOT


def test_the_description_is_one_sentence_in_both_places_and_names_no_single_model():
    description = re.search(r'^description = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert train.__doc__.strip() == description
    assert not re.search(r"GraphSAGE|SAGE|GAT|GIN", description), "the package trains any PyG model"
