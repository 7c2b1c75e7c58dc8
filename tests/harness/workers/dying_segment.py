"""`python dying_segment.py DIR TAG UID`: create a shared-memory segment named for TAG, write into it, print
`ready`, then die by SIGKILL while holding it: the leftover tests/test_sharing.py's cleanup must find."""
import os
import sys
from pathlib import Path

from train.graph.sharing.shared_graph import Segment, segment_name

directory, tag, uid = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
segment = Segment.create(directory, segment_name(tag, 2, 0, uid), {})
(segment.path / "x.bin").write_bytes(b"1" * 4096)
print("ready", flush=True)
os.kill(os.getpid(), 9)
