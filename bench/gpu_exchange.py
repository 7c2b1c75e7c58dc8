"""`make gpu-check`'s `exchanges` check: the row fetch that sharded features and the exact evaluation make
(train/graph/sharing/row_exchange.py, through train/loop/evaluate.py `fetch_rows`) and the doctor's all-to-all
probe (train/doctor/exchanges.py), over NCCL on the GPU at world size 1, beside a bare `all_to_all_single` of the
same bytes in the same run; over gloo on the CPU where there is no GPU.

At world size 1 every row is this rank's own: what is measured is the exchange's own cost around the collective
(bucketing ids by owner, the gather at the owner, the reply put back in order), which a multi-node job pays on top
of the network. The rows fetched must equal the plain gather bit for bit.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

ROWS = 200_000  # a layer's rows on this rank
WIDTH = 256  # floats a row
BATCH = 50_000  # ids a fetch asks for (a batch's sampled nodes)
ITERS = 20


def _timed(call, device, iters: int) -> float:
    import torch

    call()  # warm-up: NCCL's connections, the allocator's blocks
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    for _ in range(iters):
        call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - started) / iters


def check_exchanges(args, budget: float) -> dict:
    """Fetched rows equal to the gather; the fetch's MiB/s against all_to_all_single's at its size; the doctor's
    all-to-all probe of 64 MiB."""
    import torch
    import torch.distributed as dist

    from train.doctor.exchanges import time_all_to_all
    from train.loop.evaluate import RowOwners, fetch_rows

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(device)
    with tempfile.TemporaryDirectory() as folder:
        store = dist.FileStore(str(Path(folder) / "store"), 1)
        dist.init_process_group(backend, store=store, rank=0, world_size=1, device_id=device if cuda else None)
        try:
            generator = torch.Generator().manual_seed(0)
            rows = torch.randn(ROWS, WIDTH, generator=generator).to(device)
            ids = torch.randint(ROWS, (BATCH,), generator=generator)
            owners = RowOwners(ROWS, 1)
            fetched = fetch_rows(ids, rows, 0, owners, device)
            exact = bool(torch.equal(fetched, rows[ids.to(device)]))
            fetch = _timed(lambda: fetch_rows(ids, rows, 0, owners, device), device, ITERS)
            nbytes = BATCH * WIDTH * 4
            send = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
            received = torch.empty_like(send)
            bare = _timed(lambda: dist.all_to_all_single(received, send), device, ITERS)
            probe = time_all_to_all(64 * 2**20, 10, device)
        finally:
            dist.destroy_process_group()
    if not exact:
        raise RuntimeError("the rows fetched differ from the plain gather of the same ids")
    mib = nbytes / 2**20
    return {"backend": backend, "device": str(device), "rows_exact": exact, "fetch_ids": BATCH, "row_bytes": WIDTH * 4,
            "fetch_mib_per_s": mib / fetch, "all_to_all_mib_per_s": mib / bare, "fetch_vs_all_to_all": bare / fetch,
            "doctor_all_to_all_64mib_ms": probe * 1e3}
