"""Checkpoints of a pipelined run: per rank, the replicated encoder once, written whole or not
at all.

A checkpoint is a directory: ``meta.json`` (the plan's stages, the step, the format version),
``rank{P}.pt`` per pipeline rank (its own stages' parameters, the optimizer's state of every
other parameter, the caller's extra), and ``replicated.pt`` (the replicated stages' parameters
and their optimizer state by parameter name, from pipeline rank 0, since the plan's all-reduce
leaves every rank the same). Loading gives every rank the replicated stages from that one
file. Data-parallel replica 0 writes; every replica reads. Every
process writes into ``DIR.partial`` and the job's rank 0 renames it to ``DIR`` once all have
written, so an interrupted save leaves the previous checkpoint (or none), never half of one.
The directory must be on a file system every node sees.

torch.save per rank rather than torch.distributed.checkpoint: the stages are not sharded
(every parameter lives whole on one rank or on all), so DCP's resharding buys nothing here,
while the plan check below needs the stage layout anyway.
"""

import json
import os
import shutil

import torch
import torch.distributed as dist

from .actions import PlanError, replicated

FORMAT = "mpipec-checkpoint"
# 2: replicated.pt holds the replicated stages' optimizer state too (1 kept it on every rank).
VERSION = 2


class CheckpointError(PlanError):
    """A checkpoint that cannot be loaded into this run."""


def stage_layout(plan):
    """What a checkpoint must agree on: each stage's region, layers and where it lives."""
    return [{"id": s["id"], "region": s["region"], "layers": list(s["layers"]), "rank": s.get("rank", s.get("ranks"))}
            for s in plan["stages"]]


def _atomic_save(obj, path):
    torch.save(obj, path + ".tmp")
    os.replace(path + ".tmp", path)


def _replicated_slots(ex, optimizer):
    """{index of a parameter in the optimizer's state_dict: `stage.name`} for the parameters of
    replicated stages: their state is saved once, under a name every rank agrees on."""
    names = {id(p): f"{s}.{n}" for s, m in ex.modules.items() if replicated(ex.plan, s) for n, p in m.named_parameters()}
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return {i: names[id(p)] for i, p in enumerate(params) if id(p) in names}


def _split_optimizer(ex, optimizer):
    """(the optimizer's state_dict without the replicated parameters' state, that state by name)."""
    if optimizer is None:
        return None, {}
    state = optimizer.state_dict()
    slots = _replicated_slots(ex, optimizer)
    shared = {name: state["state"][i] for i, name in slots.items() if i in state["state"]}
    own = dict(state, state={i: v for i, v in state["state"].items() if i not in slots})
    return own, shared


def save_checkpoint(executor, path, optimizer=None, step=None, extra=None):
    """Writes this process's share of the checkpoint at `path`; collective (every process
    of the job calls it)."""
    path = os.fspath(path)
    staging = path + ".partial"
    if dist.get_rank() == 0:
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
    dist.barrier()
    ex = executor
    if ex.groups.dp_rank == 0:
        own = {s: m.state_dict() for s, m in ex.modules.items() if not replicated(ex.plan, s)}
        own_optimizer, shared_optimizer = _split_optimizer(ex, optimizer)
        _atomic_save({"stages": own, "optimizer": own_optimizer, "extra": extra}, os.path.join(staging, f"rank{ex.rank}.pt"))
        if ex.rank == 0:
            shared = {s: m.state_dict() for s, m in ex.modules.items() if replicated(ex.plan, s)}
            _atomic_save({"stages": shared, "optimizer": shared_optimizer}, os.path.join(staging, "replicated.pt"))
    dist.barrier()
    if dist.get_rank() == 0:
        with open(os.path.join(staging, "meta.json"), "w") as f:
            json.dump({"format": FORMAT, "version": VERSION, "step": step, "stages": stage_layout(ex.plan)}, f, indent=1)
        old = path + ".old"
        shutil.rmtree(old, ignore_errors=True)
        if os.path.exists(path):
            os.rename(path, old)
        os.rename(staging, path)
        shutil.rmtree(old, ignore_errors=True)
    dist.barrier()


def _describe(s):
    return f"{s['region']} layers [{s['layers'][0]}, {s['layers'][1]}) on rank {s['rank']}"


def check_layout(path, meta, plan):
    """A CheckpointError naming the stages that differ between the checkpoint and `plan`."""
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise CheckpointError(f"{path} is not an mpipec checkpoint this version reads ({meta.get('format')} {meta.get('version')})")
    here = {s["id"]: s for s in stage_layout(plan)}
    there = {s["id"]: s for s in meta["stages"]}
    differ = []
    for sid in sorted(set(here) | set(there)):
        a, b = here.get(sid), there.get(sid)
        if a != b:
            differ.append(f"stage {sid}: the plan has {_describe(a) if a else 'none'}, the checkpoint {_describe(b) if b else 'none'}")
    if differ:
        raise CheckpointError(f"{path} was written for another plan; its stages differ:\n  " + "\n  ".join(differ))


def load_checkpoint(executor, path, optimizer=None):
    """Loads this process's share of the checkpoint at `path` into the executor's modules
    (and `optimizer`); returns (step, extra). Refuses a checkpoint of another plan."""
    path = os.fspath(path)
    try:
        with open(os.path.join(path, "meta.json")) as f:
            meta = json.load(f)
    except OSError as e:
        raise CheckpointError(f"cannot read the checkpoint {path}: {e.strerror}") from e
    ex = executor
    check_layout(path, meta, ex.plan)
    state = torch.load(os.path.join(path, f"rank{ex.rank}.pt"), map_location=ex.device, weights_only=False)
    shared = torch.load(os.path.join(path, "replicated.pt"), map_location=ex.device, weights_only=False)
    for s, m in ex.modules.items():
        m.load_state_dict(shared["stages"][s] if replicated(ex.plan, s) else state["stages"][s])
    if optimizer is not None:
        saved = state["optimizer"]
        slots = _replicated_slots(ex, optimizer)
        merged = {i: shared["optimizer"][name] for i, name in slots.items() if name in shared["optimizer"]}
        optimizer.load_state_dict(dict(saved, state={**saved["state"], **merged}))
    # A lookahead encoder's features are encoded again from the resumed step's batch.
    ex.carried = None
    return meta["step"], state["extra"]
