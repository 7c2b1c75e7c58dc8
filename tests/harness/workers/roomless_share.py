"""`python -m tests.harness.workers.roomless_share fit ...`: `python -m train` whose node-shared graph skips the
room check before it is written (train/graph/sharing/segments.choose_dir), so the writing itself meets a full file
system, as when something else takes the room after the check. tests/test_storage.py runs it on a small tmpfs."""
from train.graph.sharing import shared_graph

shared_graph.choose_dir = lambda required, candidates: (candidates[0], "")

from train.__main__ import console_entry  # noqa: E402 (after the change above)

console_entry()
