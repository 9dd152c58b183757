"""The comparison `mpipec verify` runs: the plan in P processes (gloo, CPU) and the same
microbatches in one process without pipelining; loss, every gradient at each step and every
parameter after the last must agree (fp32: relative 1e-5 per tensor, or past it as near a
float64 run as the fp32 one is).

    python -m mpipec.torch.verify --cases DIR [DIR ...]

runs each directory `mpipec verify --prepare DIR` wrote (plan.json, config.json, case.json),
one after another in this process, which imports torch (and transformers) once for all of
them. Each case's output ends with `case DIR: ok` or `case DIR: failed`; the exit status is 1
when one failed, 2 when torch or the adapter's packages are missing.
"""

import json
import os
import sys

from .._requires import EXIT_MISSING, packages

if __name__ == "__main__":
    packages(["torch"], "run `scripts/torch-env` from an mpipec checkout (it creates the cached environment `mpipec verify`\n"
             "      finds by itself), or point --python or MPIPEC_PYTHON at a Python that has torch")

import argparse  # noqa: E402
import math  # noqa: E402
import multiprocessing  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from . import adapter as adapters  # noqa: E402
from . import devices, host_speed, launch  # noqa: E402
from .actions import load_plan  # noqa: E402

# The bar a pipelined run is held to against one process, `mpipec verify`'s and `mpipec train
# --check`'s alike (fp32): per tensor, the largest difference over the largest reference entry
# at most TOLERANCE. That entry counts as at least FLOOR of the largest entry of its kind (the
# step's gradients, the parameters): a tensor that is zero up to round-off (a key projection's
# bias, which softmax ignores) is measured against its neighbours' scale, not its own noise.
TOLERANCE = 1e-5
FLOOR = 1e-5
# Past TOLERANCE a tensor can still be right: two fp32 sums in different orders differ by their
# round-off, and where the terms cancel (a LayerNorm weight's gradient summed over every token)
# that is large against the sum. Such a tensor is held to a float64 run of the same steps: the
# pipelined one must be no farther from it (root mean square) than a multiple of the fp32
# process's distance, the rule torch's own accuracy checks apply against an fp64 reference. The
# multiple grows as the tensor shrinks, as torch's does: an rms over a few entries is one noisy
# draw (a 16-entry LayerNorm weight of the miniature came out 3.27 times the one process's in a
# correct run). (entries at most, multiple), the last for any size.
EXACT_MULTIPLES = ((10, 10.0), (500, 8.0), (math.inf, 3.0))


def exact_multiple(numel):
    """How many times the fp32 process's distance from float64 a tensor of `numel` entries may be."""
    return next(m for n, m in EXACT_MULTIPLES if numel <= n)


# A process's progress once it has run every step.
DONE = -2


def reference(plan, adapter, config, steps, dtype=torch.float32):
    """The same microbatches in one process, without pipelining, computed in `dtype`."""
    layers = sum((s["layers"][1] - s["layers"][0]) for s in plan["stages"])
    model = adapter.build(range(0, layers), config["kinds"], config).to(dtype)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=config.get("lr", 0.05)) if params else None
    # Every replica's microbatches, each weighted as the dp average weighs it.
    m = plan["pipeline"]["microbatches"] * plan["pipeline"]["dp"]
    out = {"grads": [], "losses": []}
    for step in range(steps):
        total = 0.0
        for mb in range(m):
            b = devices.batch_to(adapter.batch(mb, step, config), dtype=dtype)
            loss = adapter.loss(model(None, b), b) / m
            if params:
                loss.backward()
            total += float(loss.detach())
        out["losses"].append(total)
        out["grads"].append({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad})
        if opt is not None:
            opt.step()
            opt.zero_grad(set_to_none=True)
    out["params"] = {n: p.detach().clone() for n, p in model.named_parameters()}
    return out


def injected(rank):
    """MPIPE_FAIL_AT=RANK:INSTRUCTION[:MODE] where it names process `rank`: (instruction, mode)."""
    fail = os.environ.get("MPIPE_FAIL_AT")
    if not fail or int(fail.split(":")[0]) != rank:
        return None
    at, mode = (fail.split(":") + ["raise"])[1:3]
    return int(at), mode


def inject_failure(mode):
    """MPIPE_FAIL_AT=RANK:INSTRUCTION[:MODE]'s failure: an exception (`raise`, the default), a
    process that dies (`exit`), or one that hangs (`hang`). `wrong` is not one (`make_wrong`)."""
    if mode == "exit":
        os._exit(3)
    if mode == "hang":
        time.sleep(devices.TIMEOUT.total_seconds() * 100)
    raise RuntimeError("failure injected by MPIPE_FAIL_AT")


def make_wrong(record):
    """MPIPE_FAIL_AT=RANK:0:wrong: the run ends well, with a first-step gradient off by a
    thousandth, as a wrong schedule would leave it; the comparison must catch it."""
    grads = record["grads"][0]
    if grads:
        name = sorted(grads)[0]
        grads[name] = grads[name] + 1e-3 * (1.0 + grads[name].abs().max())


def _worker(rank, world, rendezvous, plan, config, steps, out_dir, progress, timed):
    torch.manual_seed(0)
    device = devices.init("gloo", f"file://{rendezvous}", rank, world)
    fail_at = injected(rank)
    wrong = fail_at is not None and fail_at[1] == "wrong"

    def on_action(step, k, action):
        progress[2 * rank], progress[2 * rank + 1] = step, k
        if fail_at is not None and not wrong and step == 0 and fail_at[0] == k:
            inject_failure(fail_at[1])

    try:
        adapter = adapters.load(config.get("adapter", "miniature"))
        speed = host_speed.for_device(device) if timed else None
        record = launch.run(plan, adapter, config, steps, device, on_action, host_speed=speed)
        if wrong:
            make_wrong(record)
        if record["dp_rank"] == 0:
            torch.save(record, os.path.join(out_dir, f"rank{record['pp_rank']}.pt"))
        dist.barrier()
        dist.destroy_process_group()
        progress[2 * rank + 1] = DONE
    except Exception as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        os._exit(1)


def unfinished(plan, progress, per_batch=False):
    """A note per process that did not finish: the instruction it was at when the run ended (a
    rank that died or hung is the one whose peers waited on it); `per_batch`: each step ran its
    own plan, whose instruction the static plan cannot name."""
    from .actions import Action

    for c in sorted(plan["rank_map"], key=lambda c: c["global"]):
        step, k = progress[2 * c["global"]], progress[2 * c["global"] + 1]
        if k == DONE:
            continue
        if k < 0:
            yield f"note: process {c['global']} (rank {c['pp']}) stopped before its first instruction"
        elif per_batch:
            yield f"note: process {c['global']} (rank {c['pp']}) stopped at step {step}, instruction {k} of that step's plan"
        else:
            a = Action.from_json(plan["ranks"][c["pp"]]["instructions"][k])
            yield f"note: process {c['global']} (rank {c['pp']}) stopped at step {step}, instruction {k} ({a})"


def run_pipelined(plan, config, steps, out_dir, timed=False):
    """The plan in its processes, forked from this one; None, or the error lines. `timed`: the
    host's speed is timed between the steps too (`--profile`)."""
    import torch.multiprocessing as mp

    # The ranks meet through a file of this run's own, not a TCP port: a port picked free here
    # can be taken by a concurrent run before the ranks bind it.
    rendezvous = os.path.abspath(os.path.join(out_dir, "rendezvous"))
    if os.path.exists(rendezvous):
        os.remove(rendezvous)
    world = len(plan["rank_map"])
    # Each process's (step, instruction) before it starts one; -1 before its first.
    progress = multiprocessing.Array("q", [-1] * 2 * world, lock=False)
    try:
        # fork, not spawn: the children inherit the imported, started torch (and `progress`)
        args = (world, rendezvous, plan, config, steps, out_dir, progress, timed)
        mp.start_processes(_worker, args=args, nprocs=world, join=True, start_method="fork")
    except Exception as e:
        notes = unfinished(plan, progress, "adaptive" in config)
        return [f"error: the pipelined run failed: {str(e).strip().splitlines()[-1]}"] + list(notes)
    return None


def same_plans(ranks):
    """An adaptive run's plans: printed, and an error line unless every rank ran the same plan
    each step."""
    print(ranks[0]["summary"])
    print(f"lookahead features moved to the next plan's owners, per step: {ranks[0]['handed_over']}")
    for step, digest in enumerate(ranks[0]["digests"]):
        others = [k for k, r in enumerate(ranks) if r["digests"][step] != digest]
        if others:
            return f"error: step {step}: ranks {others} ran another plan than rank 0"
    return None


def largest(tensors):
    """The largest absolute entry of any of `tensors` (0 for none)."""
    return max((float(t.abs().max()) for t in tensors if t.numel()), default=0.0)


def at(record, path):
    """The value at `path` of a run's record, as a tensor: ("losses", step), ("grads", step,
    name) or ("params", name)."""
    x = record
    for key in path:
        x = x[key]
    return x if torch.is_tensor(x) else torch.tensor([x], dtype=torch.float64)


def rms(t):
    return float(t.double().square().mean().sqrt()) if t.numel() else 0.0


class Worst:
    """The largest relative difference of each kind (loss, grad, param) and where it is, and
    every tensor past TOLERANCE, which `settle` holds to a float64 run."""

    def __init__(self):
        self.of = {kind: (0.0, 0.0, "") for kind in ("loss", "grad", "param")}
        self.past = []

    def compare(self, kind, name, a, b, path, scale=0.0):
        """Records a against the reference b, found at `path` of a run's record; `scale`: the
        largest entry of b's kind (FLOOR of it is the least b's own largest entry counts as)."""
        diff = float((a - b).abs().max()) if a.numel() else 0.0
        bound = max(largest([b]), FLOOR * scale)
        rel = diff / bound if bound > 0 else (0.0 if diff == 0 else math.inf)
        if rel >= self.of[kind][1]:
            self.of[kind] = (diff, rel, name)
        if rel > TOLERANCE:
            self.past.append((name, a, b, path))

    def worst(self):
        """(relative difference, where) of the worst tensor of any kind."""
        kind = max(self.of, key=lambda k: self.of[k][1])
        return self.of[kind][1], self.of[kind][2]

    def settle(self, exact):
        """(how many times farther from `exact`, the float64 run's record, the pipelined tensor
        is than the fp32 process's, the multiple its size allows, where) for the tensor past
        TOLERANCE that uses the most of what it is allowed."""
        worst = (0.0, exact_multiple(math.inf), "")
        for name, a, b, path in self.past:
            x = at(exact, path)
            ours, theirs = rms(a.double() - x), rms(b.double() - x)
            r = ours / theirs if theirs > 0 else (0.0 if ours == 0 else math.inf)
            allowed = exact_multiple(a.numel())
            if r / allowed >= worst[0] / worst[1]:
                worst = (r, allowed, name)
        return worst


def verdict(worst, exact, what):
    """None when the pipelined run passes the check, else the error line. `exact()` runs the
    same steps in float64, called only when a tensor is past TOLERANCE of the fp32 process;
    `what`: the kinds compared, as the error names them."""
    if not worst.past:
        return None
    rel, where = worst.worst()
    ratio, allowed, far = worst.settle(exact())
    times = f"{ratio:.2f} times as far from it as" if math.isfinite(ratio) else "off it where it is matched exactly by"
    print(f"{len(worst.past)} tensor(s) past rel {TOLERANCE:g} (worst {where}: {rel:.3e}), held to a float64 run of the "
          f"same steps: at most {times} the single process ({far}; {allowed:g} times allowed at its size)")
    if ratio <= allowed:
        return None
    least, most = min(m for _, m in EXACT_MULTIPLES), max(m for _, m in EXACT_MULTIPLES)
    return (f"error: outside tolerance (fp32: rel {TOLERANCE:g} on {what}, or past it within {least:g} to {most:g} times "
            f"the single process's distance from float64, by the tensor's size): worst {far}")


def compare_steps(ranks, ref, steps, worst):
    """Each step's loss and gradients, printed; an error line when a gradient is missing."""
    for step in range(steps):
        pipe_loss = sum(r["losses"][step] for r in ranks if r["losses"][step] is not None)
        worst.compare("loss", f"step {step}", torch.tensor([pipe_loss]), torch.tensor([ref["losses"][step]]), ("losses", step))
        merged = {}
        for r in ranks:
            merged.update(r["grads"][step])
        missing = set(ref["grads"][step]) - set(merged)
        if missing:
            return f"error: step {step}: no pipelined gradient for {sorted(missing)[:3]}"
        scale = largest(ref["grads"][step].values())
        for name, g in ref["grads"][step].items():
            worst.compare("grad", f"step {step} {name}", merged[name], g, ("grads", step, name), scale)
        d, rel, name = worst.of["grad"]
        print(f"step {step}: loss {pipe_loss:.6f} (single process {ref['losses'][step]:.6f}); worst gradient {name}: abs {d:.3e}, rel {rel:.3e}")
    return None


def write_profile(ranks, out_dir):
    """What `mpipec verify --profile` reads back (src/sim/measured.rs): each step's seconds and
    its instructions' in the wall clock, the instructions' in the thread's CPU seconds, and on a
    CPU the seconds of the host's speed kernel before it."""
    def steps_of(r):
        steps = [{"seconds": t, "instructions": d, "cpu": c}
                 for t, d, c in zip(r["step_seconds"], r["timings"], r["cpu_timings"])]
        for step, s in zip(steps, r["host_speed_seconds"]):
            step["host_speed"] = s
        return steps

    out = {"ranks": [{"rank": k, "steps": steps_of(r)} for k, r in enumerate(ranks)]}
    if any(r["host_speed_seconds"] for r in ranks):
        out["host_speed_kernel"] = host_speed.KERNEL
    with open(os.path.join(out_dir, "profile.json"), "w") as f:
        json.dump(out, f)


def verify(plan, config, steps, out_dir, profile=False):
    """Runs the plan in P processes and once without pipelining; compares. Each rank gets one
    thread: P ranks share the machine's cores, as ranks own their device."""
    try:
        adapter = adapters.load(config.get("adapter", "miniature"))
    except ImportError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_MISSING
    # One thread, so that no OpenMP pool exists at the fork. The reference after the ranks, not
    # before: processes forked from one that has run the whole model inherit its heap, and ran
    # 8 to 22 % slower a step than the same ranks forked before it in five of six alternated
    # pairs (docs/costs.md).
    torch.set_num_threads(1)
    failed = run_pipelined(plan, config, steps, out_dir, profile)
    if failed:
        print("\n".join(failed), file=sys.stderr)
        return 1
    ref = reference(plan, adapter, config, steps)
    ranks = [torch.load(os.path.join(out_dir, f"rank{r}.pt")) for r in range(plan["pipeline"]["ranks"])]
    if "digests" in ranks[0]:
        differ = same_plans(ranks)
        if differ:
            print(differ, file=sys.stderr)
            return 1
    worst = Worst()
    missing = compare_steps(ranks, ref, steps, worst)
    if missing:
        print(missing, file=sys.stderr)
        return 1
    params = {}
    for r in ranks:
        params.update(r["params"])
    scale = largest(ref["params"].values())
    for name, p in ref["params"].items():
        worst.compare("param", name, params[name], p, ("params", name), scale)
    for kind, (d, rel, name) in worst.of.items():
        print(f"max {kind} difference: abs {d:.3e}, rel {rel:.3e} ({name})")
    # The run's timings hold whatever its numbers: they are reported either way.
    if profile:
        write_profile(ranks, out_dir)
    failed = verdict(worst, lambda: reference(plan, adapter, config, steps, torch.float64), "loss, gradients and parameters")
    if failed:
        print(failed, file=sys.stderr)
        return 1
    print("ok: loss, gradients and parameters match the single-process run")
    return 0


def verify_dir(d, profile=False):
    """The run `mpipec verify --prepare DIR` wrote into `d`: (its title, exit status)."""
    with open(os.path.join(d, "case.json")) as f:
        case = json.load(f)
    with open(os.path.join(d, "config.json")) as f:
        config = json.load(f)
    return case["title"], lambda: verify(load_plan(os.path.join(d, "plan.json")), config, case["steps"], d, profile)


def verify_cases(dirs):
    """Every run `mpipec verify --prepare DIR` wrote, one after another in this process, each
    between its title and a `case DIR: ok|failed` line."""
    failed = 0
    for d in dirs:
        title, run = verify_dir(d)
        print(title, flush=True)
        status = run()
        print(f"case {d}: {'ok' if status == 0 else 'failed'}", flush=True)
        sys.stderr.flush()
        if status == EXIT_MISSING:
            return EXIT_MISSING
        failed += status != 0
    return 1 if failed else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    runs = ap.add_mutually_exclusive_group(required=True)
    runs.add_argument("--cases", nargs="+", metavar="DIR", help="the runs `mpipec verify --prepare DIR` wrote")
    runs.add_argument("--run", metavar="DIR", help="one such run, as `mpipec verify` starts it")
    ap.add_argument("--profile", action="store_true", help="with --run: write each instruction's time to DIR/profile.json")
    a = ap.parse_args(argv)
    sys.exit(verify_cases(a.cases) if a.cases else verify_dir(a.run, a.profile)[1]())


if __name__ == "__main__":
    main()
