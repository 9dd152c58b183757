"""mpipec.torch as a library, in 2 processes (gloo, CPU): what tests/verify.rs asserts.

    python executor_check.py A B C    (OUT directories of `mpipec build --target torch`)

A: a 2-rank transpose plan with a trainable replicated encoder; B: another 2-rank plan of the
same model; C: a plan of 4 ranks. Each process, in one job:
- bad input, each a PlanError on every process before any step: C's world size, A with tp = 2,
  a stage module missing on one rank, a replicated encoder that differs on one rank;
- trains A 4 steps with AdamW and the global-norm clip; then again, 2 steps, a checkpoint
  (the replicated encoder's parameters and optimizer state once, in replicated.pt), fresh
  modules and optimizer loaded from it, steps 3-4: losses and parameters bit-identical;
- loading that checkpoint into B's executor: refused naming the stages that differ; a step
  given B as its own plan (what an adaptive plan's steps get): refused, its stages differ;
- one step under bf16 autocast, and one with bf16 modules and fp32 master weights;
- 4 steps under fp16 autocast with dynamic loss scaling (the scale grows every 2 steps), within
  FP16_TOLERANCE of the fp32 losses; one step whose gradients overflow on pipeline rank 1
  alone: skipped on both ranks (no parameter moves), the scale halved on both; one step of fp16
  modules with fp32 master weights and loss scaling, within FP16_TOLERANCE of fp32.
The parent checks the clip's global norm against one process's gradients. Prints `ok`.
"""

import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from mpipec.torch import Executor, GradScaler, MasterWeights, PlanError, load_checkpoint, load_plan, save_checkpoint, stage_ids  # noqa: E402
from mpipec.torch import devices, miniature  # noqa: E402
from mpipec.torch.actions import replicated  # noqa: E402
from mpipec.torch.adapter import stage_modules  # noqa: E402
from mpipec.torch.verify import reference  # noqa: E402

STEPS = 4
# fp16 autocast with loss scaling against fp32: each step's loss and gradient norm within this
# (relative; measured 3e-4).
FP16_TOLERANCE = 2e-3


def load(out):
    with open(os.path.join(out, "torch", "config.json")) as f:
        return load_plan(os.path.join(out, "plan.json")), json.load(f)


def refusal(make):
    try:
        make()
    except PlanError as e:
        return str(e)
    return None


def bad_input(plan, config, other_world, groups, device):
    """The message of each refusal, in order."""
    tp2 = dict(plan, pipeline=dict(plan["pipeline"], tp=2))
    out = [refusal(lambda: devices.groups(other_world)), refusal(lambda: devices.groups(tp2))]
    modules = fresh(plan, config, groups, device)
    if groups.pp_rank == 1:
        modules.pop(max(modules))
    out.append(refusal(lambda: Executor(plan, None, modules, miniature.loss, groups)))
    modules = fresh(plan, config, groups, device)
    if groups.pp_rank == 1:
        with torch.no_grad():
            next(modules[0].parameters()).add_(1e-3)
    out.append(refusal(lambda: Executor(plan, None, modules, miniature.loss, groups)))
    return out


def fresh(plan, config, groups, device):
    return stage_modules(miniature, plan, stage_ids(plan, groups.pp_rank), config, device)


class Run:
    """An executor over fresh modules with AdamW, clipping at 0.5 every step, through a
    GradScaler (disabled unless `scaler` is given)."""

    def __init__(self, plan, config, groups, device, scaler=None, **kw):
        self.plan, self.config = plan, config
        self.modules = fresh(plan, config, groups, device)
        self.scaler = scaler or GradScaler(enabled=False)
        self.ex = Executor(plan, None, self.modules, miniature.loss, groups, device=device, scaler=self.scaler, **kw)
        self.opt = torch.optim.AdamW(list(self.ex.parameters()), lr=1e-3)
        self.losses, self.norms, self.scales = [], [], []

    def batches(self, step):
        return lambda j: miniature.batch(j, step, self.config)

    def steps(self, first, last, poison=None):
        """Steps `first` to `last`; `poison(executor)` may spoil the gradients before the
        optimizer's part."""
        for step in range(first, last):
            self.losses.append([float(l) for l in self.ex.step(self.batches(step), self.batches(step + 1))])
            if poison is not None:
                poison(self.ex)
            self.scaler.unscale_(self.opt)
            self.norms.append(float(self.ex.clip_grad_norm_(0.5)))
            self.scaler.step(self.opt)
            self.scaler.update()
            self.scales.append(self.scaler.get_scale())
            self.opt.zero_grad(set_to_none=True)

    def params(self):
        return {f"{s}.{n}": p.detach().clone() for s, m in self.modules.items() for n, p in m.named_parameters()}


def lowered(plan, config, groups, device, dtype, scaler=None):
    """A run whose modules hold `dtype` parameters under `dtype` autocast, with fp32 master
    weights and AdamW over them: (the run, the masters, the optimizer, the parameters before)."""
    low = Run(plan, config, groups, device, scaler, autocast=dtype)
    for m in low.modules.values():
        m.to(dtype)
    masters = MasterWeights(low.ex.parameters())
    return low, masters, torch.optim.AdamW(masters.parameters(), lr=1e-2), low.params()


def precision(plan, config, groups, device):
    """(bf16 autocast's first loss, bf16 + master weights' first loss and dtypes, whether the
    bf16 parameters moved)."""
    auto = Run(plan, config, groups, device, autocast=torch.bfloat16)
    auto.steps(0, 1)
    low, masters, opt, before = lowered(plan, config, groups, device, torch.bfloat16)
    losses = low.ex.step(low.batches(0))
    masters.step(opt)
    moved = any(not torch.equal(before[k], v) for k, v in low.params().items())
    dtypes = sorted({str(p.dtype) for p in low.ex.parameters()} | {str(p.dtype) for p in masters.parameters()})
    return auto.losses[0], [float(l) for l in losses], dtypes, moved


def fp16(plan, config, groups, device):
    """(fp16 autocast with dynamic loss scaling: each step's losses, the global norm of its
    unscaled gradients and the scale after it;
    then one step whose gradients overflow on pipeline rank 1 alone: whether a parameter moved,
    the scale before and after, whether AdamW holds any state)."""
    scaled = Run(plan, config, groups, device, GradScaler(init_scale=2.0**12, growth_interval=2), autocast=torch.float16)
    scaled.steps(0, STEPS)
    over = Run(plan, config, groups, device, GradScaler(init_scale=2.0**12), autocast=torch.float16)
    before = over.params()

    def poison(ex):
        if ex.rank == 1:
            next(p for p in ex.parameters() if p.grad is not None).grad.view(-1)[0] = float("inf")

    over.steps(0, 1, poison)
    moved = any(not torch.equal(before[k], v) for k, v in over.params().items())
    return scaled.losses, scaled.norms, scaled.scales, moved, over.scales, bool(over.opt.state), fp16_masters(plan, config, groups, device)


def fp16_masters(plan, config, groups, device):
    """One step of fp16 modules with fp32 master weights and loss scaling: (its losses, the
    global norm of its unscaled gradients, whether the fp16 parameters moved)."""
    scaler = GradScaler(init_scale=2.0**12)
    low, masters, opt, before = lowered(plan, config, groups, device, torch.float16, scaler)
    losses = low.ex.step(low.batches(0))
    scaler.unscale_(low.ex.parameters())
    norm = float(low.ex.clip_grad_norm_(0.5))
    masters.step(opt, scaler)
    scaler.update()
    moved = any(not torch.equal(before[k], v) for k, v in low.params().items())
    return [float(l) for l in losses], norm, moved


def saved_once(path, ex):
    """(replicated parameters with AdamW state in replicated.pt, trainable replicated parameters;
    parameters with state in this rank's file, its own trainable parameters)."""
    shared = torch.load(os.path.join(path, "replicated.pt"), weights_only=False)
    own = torch.load(os.path.join(path, f"rank{ex.rank}.pt"), weights_only=False)
    count = lambda rep: sum(p.requires_grad for s, m in ex.modules.items() if replicated(ex.plan, s) == rep for p in m.parameters())
    return len(shared["optimizer"]), count(True), len(own["optimizer"]["state"]), count(False)


def worker(rank, world, rendezvous, outs, scratch):
    torch.manual_seed(0)
    device = devices.init("gloo", f"file://{rendezvous}", rank, world)
    plan, config = load(outs[0])
    other, other_config = load(outs[1])
    groups = devices.groups(plan)
    result = {"refusals": bad_input(plan, config, load(outs[2])[0], groups, device)}
    whole = Run(plan, config, groups, device)
    whole.steps(0, STEPS)
    first = Run(plan, config, groups, device)
    first.steps(0, 2)
    save_checkpoint(first.ex, os.path.join(scratch, "ckpt"), first.opt, step=2)
    result["saved"] = saved_once(os.path.join(scratch, "ckpt"), first.ex)
    resumed = Run(plan, config, groups, device)
    step, _ = load_checkpoint(resumed.ex, os.path.join(scratch, "ckpt"), resumed.opt)
    resumed.steps(step, STEPS)
    result.update(losses=whole.losses, norms=whole.norms, resumed=first.losses + resumed.losses,
                  same_params=all(torch.equal(a, b) for a, b in zip(whole.params().values(), resumed.params().values())))
    other_groups = devices.groups(other)
    other_ex = Executor(other, None, fresh(other, other_config, other_groups, device), miniature.loss, other_groups)
    result["other_plan"] = refusal(lambda: load_checkpoint(other_ex, os.path.join(scratch, "ckpt")))
    result["other_step_plan"] = refusal(lambda: whole.ex.step(whole.batches(0), plan=other))
    result["precision"] = precision(plan, config, groups, device)
    result["fp16"] = fp16(plan, config, groups, device)
    torch.save(result, os.path.join(scratch, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


def expect(condition, what):
    if not condition:
        raise SystemExit(f"error: {what}")


def check(results, plan, config):
    r0, r1 = results
    for r in results:
        world, tp, missing, differs = r["refusals"]
        expect(world and "the plan has 4 ranks" in world and "this job has 2 processes" in world, f"world size: {world}")
        expect(tp and "tp = 2" in tp and "--target megatron" in tp, f"tp: {tp}")
        expect(missing and "process 1 (pp 1, dp 0): no module for stage(s)" in missing, f"missing module: {missing}")
        expect(differs and "replicated stage 0 (region `enc`) differs between pp 0 dp 0 and pp 1 dp 0" in differs, f"encoder: {differs}")
        expect(r["other_plan"] and "was written for another plan" in r["other_plan"] and "stage 0:" in r["other_plan"],
               f"other plan: {r['other_plan']}")
        expect(r["other_step_plan"] and "other stages" in r["other_step_plan"], f"a step's own plan: {r['other_step_plan']}")
    for r in results:
        shared, replicas, own, owned = r["saved"]
        expect(shared == replicas > 0 and own == owned, f"optimizer state saved: replicated {shared} of {replicas}, own {own} of {owned}")
    last = r1 if r1["losses"][0] else r0
    expect(last["losses"] == last["resumed"], f"resumed losses {last['resumed']} != {last['losses']}")
    expect(r0["same_params"] and r1["same_params"], "resumed parameters differ from the uninterrupted run's")
    ref = reference(plan, miniature, config, 1)
    norm = float(torch.cat([g.flatten() for g in ref["grads"][0].values()]).norm())
    expect(abs(r0["norms"][0] - norm) <= 1e-5 * norm and r0["norms"] == r1["norms"], f"global norm {r0['norms'][0]} != {norm}")
    auto, low, dtypes, moved = last["precision"]
    fp32 = sum(last["losses"][0])
    for name, losses in (("autocast", auto), ("master weights", low)):
        expect(abs(sum(losses) - fp32) <= 3e-2 * fp32, f"bf16 {name} loss {sum(losses)} far from fp32 {fp32}")
    expect(dtypes == ["torch.bfloat16", "torch.float32"] and moved, f"master weights: {dtypes}, moved {moved}")
    losses16, norms16 = last["fp16"][:2]
    for step, (a, b) in enumerate(zip(losses16, last["losses"])):
        expect(abs(sum(a) - sum(b)) <= FP16_TOLERANCE * sum(b), f"fp16 step {step}: loss {sum(a)} far from fp32 {sum(b)}")
    for step, (a, b) in enumerate(zip(norms16, last["norms"])):
        expect(abs(a - b) <= FP16_TOLERANCE * b, f"fp16 step {step}: unscaled gradient norm {a} far from fp32 {b}")
    masters_losses, masters_norm, masters_moved = last["fp16"][-1]
    expect(abs(sum(masters_losses) - sum(last["losses"][0])) <= FP16_TOLERANCE * sum(last["losses"][0])
           and abs(masters_norm - last["norms"][0]) <= FP16_TOLERANCE * last["norms"][0] and masters_moved,
           f"fp16 modules with master weights: loss {sum(masters_losses)}, norm {masters_norm}, moved {masters_moved}")
    for r in results:
        _, _, scales, moved, over_scales, state, _ = r["fp16"]
        expect(scales == [2.0**12, 2.0**13, 2.0**13, 2.0**14], f"pp {results.index(r)}: fp16 scales {scales} (a step skipped?)")
        expect(not moved and not state and over_scales == [2.0**11], f"pp {results.index(r)}: an overflow on pp 1 moved parameters "
               f"({moved}), stepped AdamW ({state}) or left the scale at {over_scales}")
    print(f"global norm {norm:.6f}; losses {[round(sum(l), 6) for l in last['losses']]}; bf16 {sum(auto):.6f}, masters {sum(low):.6f}; "
          f"fp16 {[round(sum(l), 6) for l in losses16]}, norms {[round(n, 6) for n in norms16]}; "
          f"fp16 modules with masters {sum(masters_losses):.6f}, norm {masters_norm:.6f}")


def main(outs):
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as scratch:
        rendezvous = os.path.join(scratch, "rendezvous")
        mp.start_processes(worker, args=(2, rendezvous, outs, scratch), nprocs=2, join=True, start_method="fork")
        results = [torch.load(os.path.join(scratch, f"rank{r}.pt")) for r in range(2)]
        expect(not os.path.exists(os.path.join(scratch, "ckpt.partial")), "a staging directory was left behind")
    check(results, *load(outs[0]))
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1:])
