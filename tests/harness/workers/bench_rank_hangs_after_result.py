"""A bench worker whose rank 0 prints its result and then never leaves, as a rank whose teardown hangs in a
destructor of torch.distributed's (tests/test_bench_common.py); rank 1 leaves at once."""

import os
import time

from bench.common import emit

if os.environ["RANK"] == "0":
    emit({"value": 7})
    time.sleep(600)  # a teardown that hangs
