"""Two gloo ranks (RANK, MASTER_PORT from the environment) under torch's Join: rank 1 runs out of batches,
joins, then gets SIGUSR1; its join hook must still vote the stop, and both ranks must end with the same
optimizer state. tests/test_resume.py reads the one line each rank prints."""
import datetime
import os
import signal
import types

import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join

from train.__main__ import exit_without_teardown
from train.loop.step_vote import StepAgreement
from train.loop.stop_signals import StopSignals

rank = int(os.environ["RANK"])
store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), 2, rank == 0,
                      timeout=datetime.timedelta(seconds=60))
dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
ddp = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
trainer = types.SimpleNamespace(stop_requested=False)
signals = StopSignals(rank).install()
agreement = StepAgreement(signals, rank=rank, device=torch.device("cpu"), optimizer=optimizer, save=print,
                          seconds_since_save=lambda: 0.0, on_stop=lambda: setattr(trainer, "stop_requested", True),
                          epochs=1)
steps = 0
with Join([ddp, agreement]):
    for _ in range(8 if rank == 0 else 2):  # rank 1 runs out after 2 batches and joins
        ddp(torch.randn(3, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        steps += 1
        if agreement.on_step_end():
            break
    if rank == 1:
        os.kill(os.getpid(), signal.SIGUSR1)  # arrives after rank 1 joined: only its join hook can vote
state = torch.cat([t.flatten() for s in optimizer.state.values() for t in s.values()]
                  + [p.detach().flatten() for p in model.parameters()])
gathered = [torch.empty_like(state) for _ in range(2)]
dist.all_gather(gathered, state)
print(f"rank {rank} steps {steps} stop {trainer.stop_requested} same_state {torch.equal(*gathered)}", flush=True)
dist.destroy_process_group()
exit_without_teardown(0)  # as `python -m train` leaves: gloo can abort CPython's own teardown
