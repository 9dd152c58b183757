"""mpipec's torch runtime: runs an mpipec plan rank by rank inside the user's training loop.

    from mpipec.torch import Executor, load_plan, stage_ids, devices

Executor (mpipec.torch.executor) is the entry point; actions (plan decoding), wire (the
message header), plans (an adaptive plan's per-batch plans), devices (backends and groups), checks, clip, amp, checkpoint, the adapters
(miniature, hf) and the verify harness are its modules. Names load on first use, so that
``python -m mpipec.torch.verify`` can say that torch is missing instead of failing here.
"""

_EXPORTS = {
    "Executor": "executor",
    "Plans": "plans", "StepPlan": "plans",
    "Action": "actions", "Op": "actions", "Dir": "actions", "PlanError": "actions",
    "load_plan": "actions", "rank_actions": "actions", "stage_ids": "actions",
    "clip_grad_norm_": "clip",
    "MasterWeights": "amp", "GradScaler": "amp",
    "save_checkpoint": "checkpoint", "load_checkpoint": "checkpoint", "CheckpointError": "checkpoint",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'mpipec.torch' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
