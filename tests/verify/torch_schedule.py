"""Runs an mpipec schedule.csv under torch's own pipelining runtime.

    python torch_schedule.py OUT/ [OUT2/ ...]   (each from `mpipec build PLAN -o OUT/ --target torch`)

Each of P processes (gloo, CPU) builds the stages the plan gives its rank as
torch.distributed.pipelining PipelineStages over the miniature of OUT/torch/python (mpipec.torch),
loads the schedule with _PipelineScheduleRuntime._load_csv (torch lowers it to sends and
receives itself) and runs one step. The losses and gradients must match the miniature run in
one process: what tests/verify.rs asserts, and how a user runs mpipec's order on torch's runtime.
Several OUTs run one after another in this process, which imports torch once; each prints
`OUT: ok` when it matches, and the exit status is 1 when one does not.
"""

import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

# One thread: no OpenMP pool may exist when a later OUT's ranks fork from this process.
torch.set_num_threads(1)
sys.path.insert(0, os.path.join(sys.argv[1], "torch", "python"))
from mpipec.torch import devices, miniature  # noqa: E402
from mpipec.torch.verify import reference  # noqa: E402

# The OUT being checked: set by check() before its ranks fork.
OUT = PLAN = CONFIG = M = STAGES = None


class TorchStage(nn.Module):
    """A miniature stage with the single-tensor interface torch's stages pass along."""

    def __init__(self, stage):
        super().__init__()
        self.first = stage["layers"][0] == 0
        self.inner = miniature.build(range(*stage["layers"]), CONFIG["kinds"], CONFIG)

    def forward(self, x):
        return self.inner(None, {"tokens": x}) if self.first else self.inner(x, {})


def full_batch():
    mbs = [miniature.batch(mb, 0, CONFIG) for mb in range(M)]
    return torch.cat([b["tokens"] for b in mbs]), torch.cat([b["labels"] for b in mbs])


def loss_fn(output, labels):
    return miniature.loss(output, {"labels": labels})


def worker(rank, world, port, out):
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    dist.init_process_group("gloo", timeout=devices.TIMEOUT)
    mine = [s for s in STAGES if s["rank"] == rank]
    modules = {s["id"]: TorchStage(s) for s in mine}
    stages = [PipelineStage(modules[s["id"]], s["id"], len(STAGES), torch.device("cpu")) for s in mine]
    schedule = _PipelineScheduleRuntime(stages, M, loss_fn=loss_fn)
    schedule._load_csv(os.path.join(OUT, "schedule.csv"))
    tokens, labels = full_batch()
    losses = []
    holds_first = any(s["id"] == 0 for s in mine)
    holds_last = any(s["id"] == len(STAGES) - 1 for s in mine)
    schedule.step(tokens if holds_first else None, target=labels if holds_last else None, losses=losses)
    grads = {n: p.grad.clone() for m in modules.values() for n, p in m.inner.named_parameters() if p.grad is not None}
    torch.save({"losses": [float(l.detach()) for l in losses], "grads": grads}, os.path.join(out, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


def check(out):
    global OUT, PLAN, CONFIG, M, STAGES
    OUT = out
    PLAN = json.load(open(os.path.join(OUT, "plan.json")))
    CONFIG = json.load(open(os.path.join(OUT, "torch", "config.json")))
    M = PLAN["pipeline"]["microbatches"]
    STAGES = PLAN["stages"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    world = PLAN["pipeline"]["ranks"]
    mp.start_processes(worker, args=(world, port, OUT), nprocs=world, join=True, start_method="fork")
    ranks = [torch.load(os.path.join(OUT, f"rank{r}.pt")) for r in range(world)]
    ref = reference(PLAN, miniature, CONFIG, 1)
    # torch scales the gradients by 1/M and reports each microbatch's unscaled loss.
    loss = sum(l for r in ranks for l in r["losses"]) / M
    worst = abs(loss - ref["losses"][0]) / abs(ref["losses"][0])
    grads = {}
    for r in ranks:
        grads.update(r["grads"])
    assert set(grads) == set(ref["grads"][0]), sorted(set(ref["grads"][0]) ^ set(grads))[:3]
    worst_grad, name = 0.0, ""
    for n, g in ref["grads"][0].items():
        rel = float((grads[n] - g).abs().max()) / max(float(g.abs().max()), 1e-30)
        if rel >= worst_grad:
            worst_grad, name = rel, n
    print(f"torch runtime: loss {loss:.6f} (single process {ref['losses'][0]:.6f}, rel {worst:.2e}); worst gradient {name}: rel {worst_grad:.2e}")
    ok = worst <= 1e-5 and worst_grad <= 1e-5
    print(f"{OUT}: ok" if ok else f"{OUT}: error: outside tolerance", flush=True)
    return ok


if __name__ == "__main__":
    sys.exit(0 if all([check(out) for out in sys.argv[1:]]) else 1)
