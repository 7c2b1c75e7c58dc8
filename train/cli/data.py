"""`python -m train data --config NAME|PATH`: prepare a dataset where there is internet (a login node)."""

from __future__ import annotations

import os

from train.cli.fit import add_config_arguments as add_arguments  # noqa: F401  (same arguments as fit)
from train.cli.fit import config_of
from train.cluster.distenv import job_facts


def main(args) -> int:
    from train.graph.datasets.lookup import dataset_kind, prepare_dataset  # numpy: not for `python -m train --help`

    config = config_of(args)
    facts, _sources = job_facts(os.environ)  # DATA_DIR, read here at the entry
    root = prepare_dataset(config.data, facts["data_dir"])
    print(f"dataset {config.data.name} ready under {root}: {dataset_kind(config.data).describe()}")
    return 0
