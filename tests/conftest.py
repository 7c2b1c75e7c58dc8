"""Shared pytest wiring: the real two-node SLURM cluster fixture (`slurm_cluster`)."""

pytest_plugins = ["tests.conftest_slurm"]
