"""A bench worker whose rank 1 fails at once while rank 0 waits, as in a collective (tests/test_bench_common.py)."""

import os
import sys
import time

if os.environ["RANK"] == "1":
    print("rank 1: cannot bind its port", flush=True)
    sys.exit(3)
time.sleep(120)  # rank 0: blocked, as in a collective waiting for rank 1
