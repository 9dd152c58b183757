"""What ``OUT/torch/launch.sh`` runs under torchrun: the plan trained on an adapter's model
(the built-in miniature unless the config names another) with SGD, printing the loss of each
step from the rank that holds it.

    python -m mpipec.torch.launch --plan OUT/plan.json --config OUT/torch/config.json --steps 2

``run()`` is the same loop for one process of any launcher (``mpipec verify`` records its
gradients and parameters through it).
"""

import argparse
import json
import time

import torch
import torch.distributed as dist

from . import adapter as adapters
from . import devices, plans
from .actions import load_plan, stage_ids
from .executor import Executor


def _named(modules, plan, pp_rank, trainable):
    """Each parameter of the rank's stages once over the job (a replicated stage's from
    pipeline rank 0): name -> detached copy (of the gradient with `trainable`)."""
    out = {}
    for s, m in modules.items():
        if plan["stages"][s].get("ranks") == "all" and pp_rank != 0:
            continue
        for name, p in m.named_parameters():
            if not trainable:
                out[name] = p.detach().clone()
            elif p.requires_grad and p.grad is not None:
                out[name] = p.grad.detach().clone()
    return out


def _mean_loss(losses, plan, groups):
    """The step's loss as the gradients see it: the mean over microbatches and replicas."""
    if not losses:
        return None
    total = torch.stack(losses).sum() / plan["pipeline"]["microbatches"]
    if groups.dp is not None:
        dist.all_reduce(total, group=groups.dp)
        total /= groups.dp_size
    return float(total)


def per_batch_plans(config, plan, adapter):
    """An adaptive plan's per-batch plans (config["adaptive"]: the `mpipec adapt` command), of
    the image tokens of each step's batch (the adapter's `image_tokens(mb, step, config)`);
    None for a static plan."""
    if "adaptive" not in config:
        return None
    count = getattr(adapter, "image_tokens", None)
    if count is None:
        raise ValueError("the plan's owner is adaptive, but the adapter says nothing of its batches' image sizes (image_tokens)")
    m, dp = plan["pipeline"]["microbatches"], plan["pipeline"]["dp"]
    tokens = lambda step: plans.batch_tokens(lambda mb, s: count(mb, s, config), step, m, dp)
    return plans.OneStepAhead(config["adaptive"], plan, tokens)


def run(plan, adapter, config, steps, device, on_action=None, record=None, print_losses=False, synchronize=None,
        host_speed=None):
    """One process of the plan: builds its stages through `adapter`, trains `steps` steps with
    SGD; with `record` (a dict), fills in each step's loss, gradients and seconds and the final
    parameters (and, for an adaptive plan, each step's StepPlan and wait). `synchronize` waits
    for the device before each instruction's time is taken (`mpipec profile` on a GPU);
    `host_speed` (mpipec.torch.host_speed's kernel) is timed before each step, every rank's at
    once and outside the step, into `host_speed_seconds`."""
    plan = load_plan(plan)
    groups = devices.groups(plan)
    # An adaptive plan's first batch is derived while the stages are built.
    ahead = per_batch_plans(config, plan, adapter)
    modules = adapters.stage_modules(adapter, plan, stage_ids(plan, groups.pp_rank), config, device)
    params = [p for m in modules.values() for p in m.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=config.get("lr", 0.05)) if params else None
    record = {} if record is None else record
    record.update(grads=[], losses=[], step_seconds=[], step_cpu_seconds=[], step_process_seconds=[],
                  host_speed_seconds=[])

    def optimizer_step(losses):
        record["grads"].append(_named(modules, plan, groups.pp_rank, True))
        record["losses"].append(_mean_loss(losses, plan, groups))
        if opt is not None:
            opt.step()
            opt.zero_grad(set_to_none=True)

    ex = Executor(plan, groups.pp_rank, modules, adapter.loss, groups, device=device,
                  images=adapters.images_of(adapter, config), on_optimizer_step=optimizer_step, on_action=on_action,
                  layer_shapes=adapters.layer_shapes(adapter, config), synchronize=synchronize)
    m, first = plan["pipeline"]["microbatches"], groups.dp_rank * plan["pipeline"]["microbatches"]
    of = lambda step: (lambda j: adapter.batch(first + j, step, config))
    if ahead is not None:
        ahead.attach(ex)
    for step in range(steps):
        if host_speed is not None:
            # After a barrier, so that no rank's kernel runs beside another's step.
            dist.barrier()
            record["host_speed_seconds"].append(host_speed())
        # Every rank starts the step together, so the slowest rank's time is the step's.
        dist.barrier()
        started, cpu_started, process_started = time.perf_counter(), time.thread_time(), time.process_time()
        this = ahead.plan(step, step + 1 < steps) if ahead is not None else None
        ex.step(of(step), of(step + 1), plan=this)
        record["step_seconds"].append(time.perf_counter() - started)
        record["step_cpu_seconds"].append(time.thread_time() - cpu_started)
        record["step_process_seconds"].append(time.process_time() - process_started)
        loss = record["losses"][-1]
        if print_losses and loss is not None and groups.dp_rank == 0:
            print(f"step {step}: loss {loss:.6f} ({record['step_seconds'][-1]:.3f} s on rank {dist.get_rank()})", flush=True)
    record.update(params=_named(modules, plan, groups.pp_rank, False), timings=ex.timings,
                  cpu_timings=ex.cpu_timings, pp_rank=groups.pp_rank,
                  dp_rank=groups.dp_rank, microbatches=m)
    if ahead is not None:
        record.update(summary=ahead.close(), digests=ahead.digests, handed_over=ex.handed_over)
        if print_losses and groups.dp_rank == 0 and groups.pp_rank == 0:
            print(record["summary"], flush=True)
    return record


def _adaptive(path):
    """What adaptive.json adds to the adapter's configuration (the configuration wins)."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise SystemExit(
            f"{path} is missing: the plan's owner is adaptive and its launcher starts `mpipec adapt` from it; "
            "write the build with `mpipec build` (or Plan.build), which writes it"
        ) from None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", required=True, help="plan.json or plan.compact.json")
    ap.add_argument("--config", help="the adapter's configuration (JSON); default: the miniature's")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--backend", help="nccl, hccl or gloo (default: by what is present, or MPIPEC_BACKEND)")
    ap.add_argument("--adaptive", help="adaptive.json of an `owner adaptive` plan: the `mpipec adapt` command")
    a = ap.parse_args(argv)
    with open(a.config) as f:
        config = json.load(f)
    if a.adaptive:
        config = {**_adaptive(a.adaptive), **config}
    device = devices.init(a.backend)
    run(a.plan, adapters.load(config.get("adapter", "miniature")), config, a.steps, device, print_losses=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
