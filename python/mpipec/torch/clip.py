"""Gradient clipping by the global norm over every pipeline and data-parallel rank.

Each process adds the gradients it counts (a replicated stage's on pipeline rank 0 only, since
the plan's all-reduce leaves the same sum on every rank; each stage's on data-parallel replica
0 only, for the same reason), one all-reduce gives the global norm, and every process scales
its own gradients by it: torch's ``get_total_norm`` and ``clip_grads_with_norm_`` around one
all-reduce, as torchtitan clips a pipeline.
"""

import math

import torch
import torch.distributed as dist


def global_norm(executor, norm_type=2.0):
    """The norm of every gradient of the job, each parameter counted once; collective."""
    grads = [p.grad for p in executor.parameters(counted=True) if p.grad is not None]
    device = next((g.device for g in grads), executor.device)
    local = torch.nn.utils.get_total_norm(grads, norm_type).to(device, torch.float64) if grads else torch.zeros((), dtype=torch.float64, device=device)
    if math.isinf(norm_type):
        dist.all_reduce(local, op=dist.ReduceOp.MAX)
        return local
    total = local.pow(norm_type)
    dist.all_reduce(total)
    return total.pow(1.0 / norm_type)


def clip_grad_norm_(executor, max_norm, norm_type=2.0):
    """Scales every process's gradients so that the global norm is at most `max_norm`;
    returns the norm before clipping (as torch.nn.utils.clip_grad_norm_ does)."""
    total = global_norm(executor, norm_type)
    params = list(executor.parameters())
    if params:
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total.float())
    return total
