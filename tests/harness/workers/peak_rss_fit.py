"""`python -m tests.harness.workers.peak_rss_fit fit ...`: `python -m train` that prints its process's peak RSS when
it ends (`peak rss BYTES`), read by tests/test_rgat.py for each rank of a real run."""
import atexit
import resource

atexit.register(lambda: print(f"peak rss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}", flush=True))

from train.__main__ import console_entry  # noqa: E402 (after the hook above)

console_entry()
