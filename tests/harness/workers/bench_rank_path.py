"""A bench worker whose rank 0 imports the module CALLER_MODULE names, from the caller's PYTHONPATH, and
hands back its VALUE (tests/test_bench_common.py: the launcher keeps the caller's packages importable)."""

import importlib
import os

from bench.common import emit

if os.environ["RANK"] == "0":
    emit({"value": importlib.import_module(os.environ["CALLER_MODULE"]).VALUE,
          "pythonpath": os.environ["PYTHONPATH"]})
