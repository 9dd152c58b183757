"""What the executor checks before any step runs, each a clear error (PlanError) on every rank:
the stage modules are the plan's (one per stage the rank holds, trainable where the plan's
region is), and every process holding a stage holds the same parameters (a replicated
encoder on every pipeline rank, each stage across its data-parallel replicas). The comparison
costs one small all-gather at start: a sum and a sum of squares per stage, not the weights.
"""

import torch
import torch.distributed as dist

from .actions import PlanError, replicated, stage_ids


def _local_problems(plan, rank, modules):
    """What is wrong with this rank's modules, as sentences."""
    want = stage_ids(plan, rank)
    problems = []
    missing = [s for s in want if s not in modules]
    extra = sorted(s for s in modules if s not in want)
    if missing:
        problems.append(f"no module for stage(s) {missing} (pipeline rank {rank} holds stages {want})")
    if extra:
        problems.append(f"module(s) for stage(s) {extra}, which pipeline rank {rank} does not hold (it holds {want})")
    trainable = {r["name"]: r["trainable"] for r in plan["regions"]}
    for s in want:
        if s not in modules:
            continue
        params = list(modules[s].parameters())
        region = plan["stages"][s]["region"]
        learning = any(p.requires_grad for p in params)
        if learning and not trainable[region]:
            problems.append(f"stage {s}'s module has trainable parameters, but the plan's region `{region}` is frozen")
        if params and not learning and trainable[region]:
            problems.append(f"stage {s}'s module has no trainable parameter, but the plan trains region `{region}`")
    return problems


def fingerprint(module):
    """Names, shapes and two sums of a module's parameters: equal for equal modules."""
    names = tuple((n, tuple(p.shape)) for n, p in module.named_parameters())
    with torch.no_grad():
        sums = [(float(p.double().sum()), float(p.double().square().sum())) for p in module.parameters()]
    return names, tuple(sums)


def _disagreements(plan, seen):
    """Stages whose holders hold different parameters: `seen` is each process's
    (pp rank, dp rank, {stage: fingerprint})."""
    out = []
    for s in plan["stages"]:
        holders = [(pp, dp, prints[s["id"]]) for pp, dp, prints in seen if s["id"] in prints]
        if not holders:
            continue
        first = holders[0]
        differ = [f"pp {pp} dp {dp}" for pp, dp, f in holders[1:] if f != first[2]]
        if differ:
            what = "replicated stage" if replicated(plan, s["id"]) else "stage"
            out.append(f"{what} {s['id']} (region `{s['region']}`) differs between pp {first[0]} dp {first[1]} and {', '.join(differ)}: "
                       "build every copy identically (same seed or the same loaded weights)")
    return out


def check_modules(plan, rank, modules, groups):
    """Raises PlanError on every process when any process's modules do not fit the plan or a
    stage's copies differ; collective (every process of the job calls it)."""
    problems = _local_problems(plan, rank, modules)
    prints = {} if problems else {s: fingerprint(m) for s, m in modules.items()}
    seen = [None] * dist.get_world_size()
    dist.all_gather_object(seen, (groups.pp_rank, groups.dp_rank, problems, prints))
    errors = [f"process {g} (pp {pp}, dp {dp}): {p}" for g, (pp, dp, ps, _) in enumerate(seen) for p in ps]
    if not errors:
        errors = _disagreements(plan, [(pp, dp, f) for pp, dp, _, f in seen])
    if errors:
        raise PlanError("the stage modules do not fit the plan:\n  " + "\n  ".join(errors))
