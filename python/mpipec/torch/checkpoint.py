"""Checkpoints of a pipelined run: per rank, the replicated encoder once, written whole or not
at all.

A checkpoint is a directory: ``meta.json`` (the plan's stages, the step, the format version),
``rank{P}.pt`` per pipeline rank (its own stages' parameters, the optimizer's state, the
caller's extra), and ``replicated.pt`` (the replicated stages' parameters, from pipeline rank 0,
since every rank holds the same). Data-parallel replica 0 writes; every replica reads. Every
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
VERSION = 1


class CheckpointError(PlanError):
    """A checkpoint that cannot be loaded into this run."""


def stage_layout(plan):
    """What a checkpoint must agree on: each stage's region, layers and where it lives."""
    return [{"id": s["id"], "region": s["region"], "layers": list(s["layers"]), "rank": s.get("rank", s.get("ranks"))}
            for s in plan["stages"]]


def _atomic_save(obj, path):
    torch.save(obj, path + ".tmp")
    os.replace(path + ".tmp", path)


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
        state = {"stages": own, "optimizer": optimizer.state_dict() if optimizer is not None else None, "extra": extra}
        _atomic_save(state, os.path.join(staging, f"rank{ex.rank}.pt"))
        if ex.rank == 0:
            shared = {s: m.state_dict() for s, m in ex.modules.items() if replicated(ex.plan, s)}
            _atomic_save(shared, os.path.join(staging, "replicated.pt"))
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
        m.load_state_dict(shared[s] if replicated(ex.plan, s) else state["stages"][s])
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    # A lookahead encoder's features are encoded again from the resumed step's batch.
    ex.carried = None
    return meta["step"], state["extra"]
