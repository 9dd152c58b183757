"""What the executor checks before any step runs, each a clear error (PlanError) on every rank:
the stage modules are the plan's (one per stage the rank holds, trainable where the plan's
region is, and, given each layer's parameter shapes, holding exactly its layers' parameters),
and every process holding a stage holds the same parameters (a replicated encoder on every
pipeline rank, each stage across its data-parallel replicas). The comparison costs one small
all-gather at start: a sum and a sum of squares per stage, not the weights.

The layer check's protocol: `layer_shapes(layer)` gives {parameter name: shape} of one of the
plan's global layers, named as a stage module holding that layer names them (the whole model's
names, as stages cut from one model keep them). A stage module of layers [lo, hi) must hold
the union of those layers' parameters and nothing else.
"""

import torch
import torch.distributed as dist

from .actions import PlanError, replicated, stage_ids


def _names(names, most=3):
    shown = ", ".join(f"`{n}`" for n in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _layer_of(plan, layer_shapes):
    """Parameter name -> the global layer holding it, over the plan's whole model."""
    out = {}
    for s in plan["stages"]:
        for layer in range(*s["layers"]):
            out.update((n, layer) for n in layer_shapes(layer))
    return out


def _stage_of(plan, layer):
    return next(s["id"] for s in plan["stages"] if s["layers"][0] <= layer < s["layers"][1])


def layer_problems(plan, stage, module, layer_shapes):
    """What differs between a stage module's parameters and its layers' (`layer_shapes`), as
    sentences naming the stage and the layer."""
    s = plan["stages"][stage]
    lo, hi = s["layers"]
    where = f"stage {stage} (region `{s['region']}`, layers [{lo}, {hi}))"
    have = {n: tuple(p.shape) for n, p in module.named_parameters()}
    problems, wanted = [], set()
    for layer in range(lo, hi):
        want = {n: tuple(shape) for n, shape in layer_shapes(layer).items()}
        wanted |= want.keys()
        missing = [n for n in want if n not in have]
        if missing:
            problems.append(f"{where}: layer {layer} lacks {len(missing)} of its {len(want)} parameters: {_names(missing)}")
        problems += [f"{where}: layer {layer}'s `{n}` has shape {list(have[n])}, the model's has {list(shape)}"
                     for n, shape in want.items() if n in have and have[n] != shape]
    foreign = [n for n in have if n not in wanted]
    if foreign:
        layer_of = _layer_of(plan, layer_shapes)
        by_layer = {}
        for n in foreign:
            by_layer.setdefault(layer_of.get(n), []).append(n)
        for layer, names in sorted(by_layer.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
            if layer is None:
                problems.append(f"{where}: holds parameters of none of the model's layers: {_names(names)}")
            else:
                problems.append(f"{where}: holds parameters of layer {layer}, which the plan puts on stage {_stage_of(plan, layer)}: {_names(names)}")
    return problems


def _local_problems(plan, rank, modules, layer_shapes=None):
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
        if layer_shapes is not None:
            problems += layer_problems(plan, s, modules[s], layer_shapes)
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


def check_modules(plan, rank, modules, groups, layer_shapes=None):
    """Raises PlanError on every process when any process's modules do not fit the plan (each
    layer's parameters against `layer_shapes(layer)` where given) or a stage's copies differ;
    collective (every process of the job calls it)."""
    problems = _local_problems(plan, rank, modules, layer_shapes)
    prints = {} if problems else {s: fingerprint(m) for s, m in modules.items()}
    seen = [None] * dist.get_world_size()
    dist.all_gather_object(seen, (groups.pp_rank, groups.dp_rank, problems, prints))
    errors = [f"process {g} (pp {pp}, dp {dp}): {p}" for g, (pp, dp, ps, _) in enumerate(seen) for p in ps]
    if not errors:
        errors = _disagreements(plan, [(pp, dp, f) for pp, dp, _, f in seen])
    if errors:
        raise PlanError("the stage modules do not fit the plan:\n  " + "\n  ".join(errors))
