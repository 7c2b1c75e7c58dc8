"""`srun ... python -m tests.harness.workers.sharded_rows OUT_DIR`: a rank of an srun step that joins its gloo group by
the package's own rendezvous, resolved from SLURM's variables as `python -m train fit` resolves it (train/cluster/:
resolve, then process_group), then fetches the rows of a homogeneous and a typed graph sharded over the step's nodes
and compares them with the replicated gather (tests/harness/sharded_rows.py). Writes OUT_DIR/RANK.json: where the
rank sat (its DistEnv, with the variable that gave each field, and its host), what it found and its CPU seconds
(tests/test_sharded_slurm.py)."""
import json
import os
import resource
import socket
import sys
from pathlib import Path

from train.cluster.distenv import resolve
from train.config import DistConfig
from train.errors import exit_without_teardown


def main() -> None:
    import torch

    from tests.harness.sharded_rows import homogeneous_and_typed
    from train.cluster.procgroup import process_group

    env = resolve(os.environ, command="python -m tests.harness.workers.sharded_rows OUT_DIR")
    torch.set_num_threads(1)  # the test nodes share this machine's cores (tests/harness/gloo_ranks.py says why)
    with process_group(env, DistConfig(backend="gloo")) as (backend, _device):
        found = homogeneous_and_typed(env)
    used = resource.getrusage(resource.RUSAGE_SELF)
    result = {"env": env.to_dict(), "host": socket.gethostname(), "backend": backend,
              "cpu_seconds": used.ru_utime + used.ru_stime, **found}
    (Path(sys.argv[1]) / f"{env.rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
    exit_without_teardown(0)  # as `python -m train` leaves: gloo can abort CPython's own teardown
