"""Work run by two gloo processes, for the tests of what passes between ranks: each rank's
result comes back to the test."""

import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _rank(rank, rendezvous, out, work):
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    try:
        torch.save(work(rank), f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def on_two_ranks(work):
    """[work(0) on rank 0, work(1) on rank 1], `work` a module's function of the rank. The ranks
    are spawned, not forked: a process forked from this one, which earlier tests ran a process
    group of its own in, inherits that group's gloo state, and its barriers hung."""
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "result")
        mp.start_processes(_rank, args=(os.path.join(scratch, "rendezvous"), out, work), nprocs=2,
                           start_method="spawn")
        return [torch.load(f"{out}.{r}", weights_only=False) for r in (0, 1)]
