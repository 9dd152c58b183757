"""What `mpipec profile` measures: a plan's layers and runtime on the devices present, written
as a profile the cost model reads (docs/costs.md).

    python -m mpipec.torch.profile --run DIR [--backend gloo|nccl|hccl]

DIR holds what `mpipec profile` wrote: plan.json (the plan as it runs here), config.json (the
adapter's model) and request.json (each layer kind and a layer of that kind, the steps, and
what the profile says of the model and shapes). This writes DIR/profile.json:

- per layer kind, one layer run alone at the plan's shapes: forward, backward-input,
  backward-weight and the fused backward (the fewest seconds of timed repeats), the optimizer
  step over its parameters as the runtime runs it, its output's bytes and its gradients' bytes and count;
- point-to-point latency and bandwidth between two ranks: messages sent as the executor sends
  them to a rank waiting as the executor waits, timed from the send's posting to the tensor
  in the receiver's hands, fitted to t = α + n/β; on a CPU, the same with the sender
  computing after it posts, as a rank goes on to its next instruction: what a message waits
  beyond α for the sending thread, which needs the core the rank computes on (`send_wait_s`);
- all-reduce over the plan's pipeline group (and data-parallel group, with dp) at a few sizes,
  fitted to the ring's 2(k−1)·α + 2(k−1)/k · n/β;
- what each compute op costs once an instruction however many layers it runs (an autograd
  call's start), from a run of layers of one kind against one of them (`measure_calls`): the
  layers' times above are given less it, and the runtime's `call_s` holds it;
- the runtime's per-instruction costs: the plan run for a few steps by the executor, every
  instruction timed, set against the layer times above (each op's ratio, `calibrate`);
- the host's speed over that run: each compute instruction's time in each step against its
  median over the steps, in the order they ran (`speed_trace`);
- on a CPU, the seconds of a fixed kernel (mpipec.torch.host_speed) timed before each step
  after the first, their median over the ranks (`host_speed`): `verify --profile` times it too
  and sets the prediction beside its run at the host's speed then;
- on a CPU, the host's cores, the threads a process computes with and the interval between its
  scheduler's balancings of the cores (`scheduler`): the simulator shares the cores among a
  plan's ranks as that scheduler does.

Timings synchronise the device first (CUDA, NPU), so a GPU's asynchronous launches are timed
to their end. On a CPU the layers and the instructions are timed in the thread's CPU seconds,
the work a core does whatever else the host runs; messages, which are waits, in the wall
clock's. The ranks are this machine's processes, one device each, forked (CPU) or spawned (CUDA
and NPU, which cannot be forked once initialised) from this one.
"""

import collections
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time

from .._requires import packages

if __name__ == "__main__":
    packages(["torch"], "run `scripts/torch-env` from an mpipec checkout, or point --python or MPIPEC_PYTHON at a\n"
             "      Python that has torch")

import argparse  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from . import adapter as adapters  # noqa: E402
from . import devices, executor, host_speed, launch, scheduler, wire  # noqa: E402
from .actions import Dir, load_plan  # noqa: E402

# Timed repeats per layer measurement (after one untimed) and per all-reduce size (a
# collective is short and waits on every member, so many more); the messages timed one way
# per size, and how long their sender waits after the barrier before it sends (longer than
# the barrier's own skew, so the receiver waits for the message); the sizes of the fits.
REPEATS = 7
REDUCE_REPEATS = 60
# A compute op's cost per call is the difference of two small times (`measure_calls`): more
# repeats, over a run of up to CALL_LAYERS layers of one kind.
CALL_REPEATS = 21
CALL_LAYERS = 4
DELIVERY_REPEATS = 30
SENDER_DELAY_S = 0.002
# How long a sender computes after posting, in `deliveries(busy=True)`: longer than a CPU
# scheduler's slice (1.4 ms on the 2-core VM), as a stage's instruction usually is.
SENDER_WORK_S = 0.004
P2P_ELEMENTS = (16, 4096, 262144)
REDUCE_ELEMENTS = (16, 16384, 262144)


def synchronizer(device):
    """What waits for `device`'s queued work: timings end there, not at the launch."""
    if device.type == "cuda":
        return torch.cuda.synchronize
    if device.type == "npu":
        return torch.npu.synchronize
    return lambda: None


def work_clock(device):
    """What a layer's time is read from: on a CPU the seconds of this thread's CPU it took (the
    work a core does, whatever else the host runs; one thread computes), else the wall clock
    after the device's queue."""
    return time.thread_time if device.type == "cpu" else time.perf_counter


def timed(sync, run, repeats=REPEATS, clock=time.perf_counter, pick=min):
    """The fewest seconds `run()` took in `repeats` runs after a warm-up (`pick` chooses
    another statistic): on a machine shared with other work, the run it disturbed least. `run`
    may prepare untimed work by returning a callable, which is then what is timed."""
    times = []
    for k in range(repeats + 1):
        work = run()
        sync()
        started = clock()
        if callable(work):
            work()
        sync()
        if k:
            times.append(clock() - started)
    return pick(times)


def fit(points):
    """Least squares of t = a + b·n over (n, t) points; a and b clamped at 0 and above a hair."""
    n = [p[0] for p in points]
    t = [p[1] for p in points]
    mn, mt = statistics.fmean(n), statistics.fmean(t)
    var = sum((x - mn) ** 2 for x in n)
    b = sum((x - mn) * (y - mt) for x, y in zip(n, t)) / var if var else 0.0
    b = max(b, 1e-15)
    return max(mt - b * mn, 0.0), b


# ---- layer kinds, one process ---------------------------------------------------------------


def measure_layer(module, x, batch, last, loss_fn, microbatches, time_of, lr):
    """The numbers of one layer on input `x` (None on the model's first layer); `time_of` times
    a run as `timed` does."""
    params = [p for p in module.parameters() if p.requires_grad]

    def forward():
        xi = None if x is None else x.detach().requires_grad_(x.is_floating_point())
        out = module(xi, batch)
        if last:
            out = loss_fn(out, batch) / microbatches
        return xi, out

    out_bytes = 0
    with torch.no_grad():
        probe = module(None if x is None else x.detach(), batch)
        out_bytes = probe.numel() * probe.element_size()
    g_of = lambda out: None if last else torch.ones_like(out)
    fwd = time_of(lambda: forward)

    def backward_input():
        xi, out = forward()
        if xi is None or not xi.requires_grad:
            return None
        return lambda: torch.autograd.backward(out, g_of(out), inputs=[xi], retain_graph=True)

    def backward_weight():
        xi, out = forward()
        g = g_of(out)
        if xi is not None and xi.requires_grad:
            torch.autograd.backward(out, g, inputs=[xi], retain_graph=True)
        return (lambda: torch.autograd.backward(out, g, inputs=params)) if params else None

    def backward():
        _, out = forward()
        # A frozen layer fed by no gradient (the frozen prefix) has no backward.
        return (lambda: torch.autograd.backward(out, g_of(out))) if out.requires_grad else None

    row = {
        "forward_s": fwd,
        "backward_input_s": time_of(backward_input),
        "backward_weight_s": time_of(backward_weight),
        "backward_s": time_of(backward),
        "output_bytes": out_bytes,
        "grad_bytes": sum(p.numel() * p.element_size() for p in params),
    }
    # The step the runtime takes over these parameters: launch.run keeps each gradient, SGD
    # steps, the gradients are dropped.
    opt = torch.optim.SGD(params, lr=lr) if params else None

    def optimizer():
        for p in params:
            p.grad = torch.ones_like(p)

        def step():
            [p.grad.detach().clone() for p in params]
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step if opt else None

    row["optimizer_s"] = time_of(optimizer)
    return row


class _Bench:
    """The model's layers as `profile` measures them: built by the adapter on `device`, fed the
    first microbatch, each measurement the fewest of `repeats` in the device's work clock."""

    def __init__(self, plan, config, device, repeats=REPEATS):
        self.plan, self.config, self.device = plan, config, device
        self.adapter = adapters.load(config.get("adapter", "miniature"))
        sync, clock = synchronizer(device), work_clock(device)
        self.time_of = lambda run: timed(sync, run, repeats, clock=clock)
        self.count = max(s["layers"][1] for s in plan["stages"])
        self.batch = devices.batch_to(self.adapter.batch(0, 0, config), device)

    def build(self, layers):
        return self.adapter.build(layers, self.config["kinds"], self.config).to(self.device)

    def fed(self, stop):
        """Yields (layer, its module, its input) for the layers before `stop`, built one at a
        time, each fed the output of the one before (so a layer sees the input it has in the
        model); one module alive at a time, for a model too large for the device."""
        x = None
        for layer in range(stop):
            module = self.build(range(layer, layer + 1))
            yield layer, module, x
            if layer + 1 < stop:
                with torch.no_grad():
                    x = module(x, self.batch)
            del module

    def measure(self, module, x, layers):
        """`measure_layer` of the module of `layers` on input `x`."""
        return measure_layer(module, x, self.batch, layers.stop == self.count, self.adapter.loss,
                             self.plan["pipeline"]["microbatches"], self.time_of, self.config.get("lr", 0.05))


def same_kind_run(kinds_of, most=CALL_LAYERS):
    """range of the first run of `most` consecutive layers of one kind (of the longest, where
    none is that long); None where no two neighbours share a kind."""
    best, start = None, 0
    for end in range(1, len(kinds_of) + 1):
        if end == len(kinds_of) or kinds_of[end] != kinds_of[start]:
            if end - start >= 2 and (best is None or end - start > len(best)):
                best = range(start, min(end, start + most))
                if len(best) == most:
                    return best
            start = end
    return best


def measure_calls(plan, config, kinds_of, device):
    """{field: seconds}: what each compute op costs once an instruction, however many layers it
    runs. An op is one autograd call over the stage's layers (a backward's engine start, its
    graph task), and a layer measured alone pays that once; a stage of n layers pays it once, not
    n times. Measured as the difference between a run of n layers of one kind and n times one of
    them, (n·t₁ − tₙ)/(n − 1), 0 at least; 0 where no two neighbouring layers share a kind."""
    span = same_kind_run(kinds_of)
    if span is None:
        return {field: 0.0 for field in FIELD.values()}
    bench = _Bench(plan, config, device, CALL_REPEATS)
    # The first layer of the run, fed as in the model (the layers before it only feed it).
    _, module, x = collections.deque(bench.fed(span.start + 1), maxlen=1)[0]
    n = len(span)
    one, run = (bench.measure(m, x, layers) for m, layers in ((module, range(span.start, span.start + 1)),
                                                            (bench.build(span), span)))
    return {field: max((n * one[field] - run[field]) / (n - 1), 0.0) for field in FIELD.values()}


def per_layer(layers, calls):
    """The layers' times less what their op costs once an instruction (`measure_calls`), which
    the simulator adds to each instruction instead (0 at least)."""
    for row in layers.values():
        for field, call in calls.items():
            row[field] = max(row[field] - call, 0.0)


def measure_kinds(plan, config, kinds, device):
    """{kind: its numbers}: the model's layers fed as in the model (`_Bench.fed`), the kinds'
    layers measured."""
    bench, at = _Bench(plan, config, device), {layer: kind for kind, layer in kinds.items()}
    return {at[layer]: bench.measure(module, x, range(layer, layer + 1))
            for layer, module, x in bench.fed(max(at) + 1) if layer in at}


# ---- the ranks: links, collectives and the runtime ------------------------------------------


def deliveries(rank, device, sync, sizes=P2P_ELEMENTS, busy=False):
    """Per message size, (bytes, the seconds from rank 0's send posted to its tensor in rank 1's
    hands) over `DELIVERY_REPEATS` messages: each sent as the executor sends it (`wire`, one
    batch) to a rank waiting for it as the executor waits (its receiving thread, `Inbox`, on
    gloo), a few milliseconds after both left a barrier, so the receiver is blocked. What the
    plan's critical path pays for a message, which an idle round trip does not show: on a
    2-core VM half the fewest seconds of a round trip, less both ranks' CPU, gave 0 to 17 µs,
    while a run's waiting ranks got their messages 0.2 to 0.6 ms after the send was posted
    (three threads woken in turn: gloo's, the receiving thread, the rank's own).

    The sender stamps a send once it is posted, on a GPU once queued (the transfer is the
    flight's, as it was half a round trip's); the receiver once the tensor is there, after its
    device. Both stamps are of the host's monotonic clock (`time.perf_counter`), which the
    ranks, processes of this machine, share; a sender descheduled once its send is posted
    stamps it after the arrival, so one delivery can come out below 0 (the median does not).
    With `busy` the sender computes for SENDER_WORK_S after posting, as the executor goes on
    to its next instruction, before it waits for its send (`send_wait`). Other ranks only join
    the barriers."""
    points, inline = [], wire.inline_here()
    for n in sizes:
        t, stamps = torch.ones(n, device=device), []
        inbox = executor.Inbox(0, DELIVERY_REPEATS + 1, device) if rank == 1 and inline else None
        for _ in range(DELIVERY_REPEATS + 1):
            dist.barrier()
            if rank == 0:
                time.sleep(SENDER_DELAY_S)
                works = dist.batch_isend_irecv(wire.sends(Dir.ACT, 0, 0, t, 1, inline))
                stamps.append(time.perf_counter())
                if busy:
                    compute_for(SENDER_WORK_S)
                for work in works:
                    work.wait()
            elif rank == 1:
                inbox.next() if inbox is not None else wire.receive(0, device, inline)
                sync()
                stamps.append(time.perf_counter())
        if inbox is not None:
            inbox.join()
        points.append((n * t.element_size(), stamps[1:]))
    return points


def compute_for(seconds):
    """Small matrix multiplies until this thread has computed for `seconds` of its CPU."""
    a, until = torch.full((48, 48), 0.01), time.thread_time() + seconds
    while time.thread_time() < until:
        a = torch.tanh(a @ a)


def send_wait(sent, received, idle):
    """What a message waits for its sending thread while its sender computes (the thread needs
    the core the rank's thread holds): the mean delivery with the sender computing after it
    posts (`deliveries(busy=True)`, rank 0's and rank 1's) less the median with the sender
    waiting (`idle`, `flights`), at the same size, 0 at least. The mean, not the median: the
    thread gets the core at once or later, by turns (on the 2-core VM half of 30 64-byte
    messages arrived within 0.35 ms of posting, the rest up to 2.7 ms after it), and a step
    pays the waits of all its messages."""
    (n, posted), (_, got) = sent[0], received[0]
    return max(statistics.fmean(b - a for a, b in zip(posted, got)) - dict(idle)[n], 0.0)


def flights(sent, received):
    """(bytes, seconds) per size from rank 0's and rank 1's `deliveries`: the median delivery,
    as a step's time is its median step's."""
    return [(n, statistics.median(b - a for a, b in zip(posted, got)))
            for (n, posted), (_, got) in zip(sent, received)]


def all_reduce(group, device, sync):
    """Seconds of one all-reduce over `group` per size, timed on every member: the median, not
    the fewest, as a step's one reduction per instruction takes what a typical call takes (a
    ring's 2(k-1) hand-offs between threads spread a call's time: on an idle 2-core host the
    fewest of 300 calls took half the median)."""
    points = []
    for n in REDUCE_ELEMENTS:
        t = torch.ones(n, device=device)
        dist.barrier()
        points.append((n * t.element_size(),
                       timed(sync, lambda: lambda: dist.all_reduce(t, group=group), REDUCE_REPEATS, pick=statistics.median)))
    return points


def _worker(rank, world, rendezvous, plan, config, steps, out_dir, backend):
    os.environ["LOCAL_RANK"] = str(rank)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    device = devices.init(backend, f"file://{rendezvous}", rank, world)
    sync = synchronizer(device)
    try:
        groups = devices.groups(plan)
        result = {"p2p": deliveries(rank, device, sync) if world > 1 else []}
        # A GPU's sends go on the device's queues, not a thread that needs the host's core.
        cpu_p2p = world > 1 and device.type == "cpu"
        result["p2p_busy"] = deliveries(rank, device, sync, P2P_ELEMENTS[:1], busy=True) if cpu_p2p else []
        result["pp"] = all_reduce(groups.pp, device, sync) if plan["pipeline"]["ranks"] > 1 else []
        result["dp"] = all_reduce(groups.dp, device, sync) if groups.dp is not None else []
        record = {}
        adapter = adapters.load(config.get("adapter", "miniature"))
        launch.run(plan, adapter, config, steps, device, record=record, synchronize=sync,
                   host_speed=host_speed.for_device(device))
        cpu = cpu_clock(device, world)
        result.update(rank=groups.pp_rank, dp_rank=groups.dp_rank, threads=torch.get_num_threads(), cpu_clock=cpu,
                      timings=record["cpu_timings" if cpu else "timings"],
                      step_seconds=record["step_cpu_seconds" if cpu else "step_seconds"],
                      host_speed_seconds=record["host_speed_seconds"],
                      other_threads=[p - t for p, t in zip(record["step_process_seconds"], record["step_cpu_seconds"])])
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
        dist.barrier()
        dist.destroy_process_group()
    except Exception as e:
        print(f"error: rank {rank}: {e}", file=sys.stderr, flush=True)
        os._exit(1)


def run_ranks(plan, config, steps, out_dir, backend):
    import torch.multiprocessing as mp

    rendezvous = os.path.abspath(os.path.join(out_dir, "rendezvous"))
    if os.path.exists(rendezvous):
        os.remove(rendezvous)
    world = len(plan["rank_map"])
    # CUDA and NPU cannot be used in a forked child once the parent has touched them.
    method = "fork" if backend == "gloo" else "spawn"
    mp.start_processes(_worker, args=(world, rendezvous, plan, config, steps, out_dir, backend), nprocs=world,
                       join=True, start_method=method)
    return [json.load(open(os.path.join(out_dir, f"rank{r}.json"))) for r in range(world)]


# ---- from measurements to the profile ------------------------------------------------------


def _quantile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else 0.0


FIELD = {"forward": "forward_s", "backward_input": "backward_input_s", "backward_weight": "backward_weight_s",
         "backward": "backward_s"}


def host_speed_seconds(ranks):
    """The host's speed kernel's median seconds over every rank's steps after the first (the
    warm-up's kernel ran before any step); None where the ranks did not time it."""
    seconds = [s for r in ranks for s in _after_warm_up(r, "host_speed_seconds")]
    return statistics.median(seconds) if seconds else None


def steady(ranks):
    """(the rank's plan index, step seconds, per-instruction seconds) of the middle half of each
    rank's steps after the first (warm-up), by step time, on replica 0: steps as the runtime
    takes them, as the steps a prediction is set beside are the median of a run's. Half of them,
    not the median alone: one step's instructions move with the host from step to step (on an
    idle 2-core VM one run's steps spread from 59 to 114 ms), the middle half's much less."""
    for r in ranks:
        if r["dp_rank"] == 0:
            steps = sorted(list(zip(r["step_seconds"], r["timings"]))[1:], key=lambda st: st[0])
            keep = max(1, len(steps) // 2)
            for seconds, times in steps[(len(steps) - keep) // 2:][:keep]:
                yield r["rank"], seconds, times


def _isolated(layers, kinds_of, span, field):
    return sum(layers[kinds_of[layer]][field] for layer in span if kinds_of[layer] in layers)


def _after_warm_up(r, key="timings"):
    """A rank's per-step `key` (its per-instruction timings) of its steps after the first (all
    of one step)."""
    return r[key][1:] or r[key]


def typical(ranks):
    """(the rank, each instruction's median seconds over the steps after the first) per rank of
    replica 0: the instruction as the runtime takes it, without the host's speed at the moment,
    which `speed_trace` keeps."""
    for r in ranks:
        if r["dp_rank"] == 0:
            yield r, [statistics.median(times) for times in zip(*_after_warm_up(r))]


def kernel_points(plan, ranks, layers, kinds_of, calls=None):
    """(op, the isolated layers' seconds, the seconds the runtime took: its median over the
    steps) of every compute instruction; with `calls` ({field: seconds}), the layers' times are
    per layer (`per_layer`) and each instruction adds its op's call once."""
    stages, images = plan["stages"], plan["pipeline"].get("images", 1)
    for r, times in typical(ranks):
        for i, t in zip(plan["ranks"][r["rank"]]["instructions"], times):
            if i["op"] not in FIELD:
                continue
            share = (i["images"][1] - i["images"][0]) / images if i.get("images") else 1.0
            field = FIELD[i["op"]]
            call = calls[field] if calls else 0.0
            yield i["op"], call + _isolated(layers, kinds_of, range(*stages[i["stage"]]["layers"]), field) * share, t


def speed_trace(plan, ranks):
    """The host's speed as the run saw it, per rank of replica 0: each compute instruction of
    every step after the first, in the order they ran, as [its median seconds, its time in that
    step over the median]. A slow stretch of the host slows one rank for a while and the others
    wait for it; the simulator draws stretches of this trace for each rank and takes the median
    step of the draws, as the run's step is its median step."""
    trace = []
    for r, medians in sorted(typical(ranks), key=lambda rm: rm[0]["rank"]):
        ops = [i["op"] in FIELD for i in plan["ranks"][r["rank"]]["instructions"]]
        trace.append([[round(m, 7), round(t / m, 4)]
                      for times in _after_warm_up(r)
                      for compute, m, t in zip(ops, medians, times) if compute and m > 0])
    return trace


def _ratio(points):
    isolated = sum(x for _, x, _ in points)
    return sum(t for _, _, t in points) / isolated if isolated > 0 else 1.0


def calibrate(plan, ranks, layers, kinds_of, calls=None):
    """The layers as the runtime runs them: per op (forward, each backward), the seconds its
    instructions took in the plan's run (each its median over the steps) against the sum of
    their layers' isolated times. Each
    layer time is scaled by its op's ratio (a stage's layers run back to back, warmer than one
    alone; what the executor spends on a compute instruction is part of it), an op the run did
    not hold by the ratio over every compute instruction. A line fitted through all of them (a
    scale and a constant per instruction) is not used: forwards and backwards sit in two
    clusters with ratios of their own, and the line through them has a constant of milliseconds
    that no instruction has; what an op costs once an instruction (`calls`, where measured) is
    a constant of each op's own, measured, and is scaled with its layers. Returns {field: ratio}."""
    points = list(kernel_points(plan, ranks, layers, kinds_of, calls))
    every = _ratio(points)
    scales = {field: _ratio([p for p in points if p[0] == op]) if any(p[0] == op for p in points) else every
              for op, field in FIELD.items()}
    for row in list(layers.values()) + ([calls] if calls else []):
        for field, scale in scales.items():
            row[field] *= scale
    return scales


def cpu_clock(device, world):
    """Whether the runtime's instructions are timed in their thread's CPU seconds: on a CPU
    host with fewer cores than processes, where the wall clock holds the turns the processes
    take on the cores, which the simulator adds itself (the host's cores in the profile), and
    which another host's number of processes would change. Elsewhere each process has a core
    or a device of its own, and the wall clock holds what an instruction takes as the runtime
    runs it, what its process's other threads (gloo's, the receives') take of its core too."""
    return device.type == "cpu" and world > host_cores()


def runtime_costs(plan, ranks, layers, kinds_of, cpu, calls=None):
    """The executor's costs beyond the layers: the loop between instructions (the step less
    its instructions' times, per instruction), posting a send, a receive of a message already there. On a GPU the times are the wall
    clock's, and the fastest fifth of the receives are those whose message was there; on a CPU
    (`cpu`) they are the thread's CPU seconds, which a receive spends only on a message that is
    there, so the median receive. `calls` (`measure_calls`, per layer `layers`) are calibrated
    with the layers and given as `call_s`."""
    scales = calibrate(plan, ranks, layers, kinds_of, calls)
    gaps, sends, receives = [], [], []
    for rank, seconds, times in steady(ranks):
        gaps.append((seconds - sum(times)) / max(len(times), 1))
        for i, t in zip(plan["ranks"][rank]["instructions"], times):
            (sends if i["op"] == "send" else receives if i["op"] == "recv" else []).append(t)
    return {
        "instruction_s": max(statistics.median(gaps), 0.0) if gaps else 0.0,
        # In each op's ratio (`calibrate`).
        "compute_s": 0.0,
        "kernel_scale": scales,
        "send_s": statistics.median(sends) if sends else 0.0,
        "recv_s": statistics.median(receives) if cpu and receives else _quantile(receives, 0.2),
        "clock": "cpu" if cpu else "wall",
    } | ({"call_s": calls} if calls else {})


def message_cpu(plan, ranks):
    """The CPU seconds a process's other threads (its receiving threads, gloo's) spend per
    message it receives: over every rank's steps after the first, what the process used beyond
    its main thread, per receive instruction. Where the ranks share a host's cores that work
    needs a core too, which the main thread's clock does not show."""
    spent, received = 0.0, 0
    for r in ranks:
        if r["dp_rank"] != 0 or not r.get("other_threads"):
            continue
        receives = sum(i["op"] == "recv" for i in plan["ranks"][r["rank"]]["instructions"])
        steps = r["other_threads"][1:]
        spent += sum(steps)
        received += receives * len(steps)
    return max(spent / received, 0.0) if received else 0.0


def alpha_beta_p2p(points):
    a, b = fit(points)
    return {"alpha_s": a, "beta_bytes_per_s": 1.0 / b}


def alpha_beta_ring(points, k):
    """α and β of the ring formula from t = a + b·n: a = 2(k−1)α, b = 2(k−1)/(k·β)."""
    a, b = fit(points)
    return {"alpha_s": a / (2 * (k - 1)), "beta_bytes_per_s": 2 * (k - 1) / (k * b)}


def ring_seconds(fit, k, nbytes):
    """One reduction of `nbytes` of gradients over a ring of `k` as src/cost/profile.rs times it:
    a call per bucket of at most the runtime's BUCKET_BYTES."""
    calls = max(1, math.ceil(nbytes / executor.BUCKET_BYTES))
    return calls * 2 * (k - 1) * fit["alpha_s"] + 2 * (k - 1) / k * nbytes / fit["beta_bytes_per_s"]


def _reduced_layers(plan, i):
    """The layers whose gradients all-reduce instruction `i` sums: its bucket's stage, or every
    layer of its region that rank 0 holds (replicated, so every rank's)."""
    if i.get("stage") is not None:
        return range(*plan["stages"][i["stage"]]["layers"])
    region = i.get("region")
    return [layer for s in plan["stages"] if s.get("rank") in (None, 0) and region in (None, s["region"])
            for layer in range(*s["layers"])]


def reduction_scale(plan, ranks, layers, kinds_of, fit):
    """The pipeline group's gradient reductions as the runtime runs them, against the fit of
    the bare all-reduces: the runtime also flattens each bucket's gradients and copies the sums
    back, one tensor at a time, and reduces at the end of a step with its threads about. Per
    synchronous call and step, the fastest member's time, that of the last to arrive, which
    waits for no one (the simulator adds the others' waits itself); the median over the steps
    after the first. The ratio of their sum to the fit's, or None where the run held none."""
    k, by_rank = plan["pipeline"]["ranks"], {r["rank"]: r for r in ranks if r["dp_rank"] == 0}
    calls = {rank: [j for j, i in enumerate(plan["ranks"][rank]["instructions"])
                    if i["op"] == "all_reduce" and i.get("group") == "pp" and not i.get("async")]
             for rank in by_rank}
    if k < 2 or not calls[0] or len({len(c) for c in calls.values()}) > 1:
        return None
    steps = range(1, min(len(r["timings"]) for r in by_rank.values()))
    measured = sum(statistics.median(min(by_rank[r]["timings"][s][calls[r][c]] for r in by_rank) for s in steps)
                   for c in range(len(calls[0])))
    instructions = plan["ranks"][0]["instructions"]
    reduced = (_isolated(layers, kinds_of, _reduced_layers(plan, instructions[j]), "grad_bytes") for j in calls[0])
    predicted = sum(ring_seconds(fit, k, nbytes) for nbytes in reduced)
    return measured / predicted if predicted > 0 else None


def _mean_points(lists):
    """Per size, the slowest member's time (a collective ends when its last member does)."""
    return [(lists[0][j][0], max(p[j][1] for p in lists)) for j in range(len(lists[0]))]


def host_cores():
    """The cores this process (and the ranks forked from it) may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def describe_device(device, backend):
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    elif device.type == "npu":
        name = torch.npu.get_device_name(device)
    else:
        name = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as f:
                name = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), name)
        except OSError:
            pass
    return {"type": device.type, "name": name, "backend": backend}


def versions():
    out = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import transformers

        out["transformers"] = transformers.__version__
    except ImportError:
        pass
    return out


def profile(run_dir, backend=None):
    with open(os.path.join(run_dir, "request.json")) as f:
        request = json.load(f)
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    plan = load_plan(os.path.join(run_dir, "plan.json"))
    backend = backend or devices.default_backend()
    device = devices.device_of(backend, 0)
    torch.set_num_threads(1)
    layers = measure_kinds(plan, config, request["kinds"], device)
    kinds_of = request["kind_of_layer"]
    calls = measure_calls(plan, config, kinds_of, device)
    per_layer(layers, calls)
    if device.type == "cuda":
        # The ranks' processes need the memory the layers held.
        torch.cuda.empty_cache()
    ranks = run_ranks(plan, config, request["steps"], run_dir, backend)
    out = dict(request["meta"])
    # The clock the ranks timed their instructions with.
    runtime = runtime_costs(plan, ranks, layers, kinds_of, ranks[0]["cpu_clock"], calls)
    runtime["message_cpu_s"] = message_cpu(plan, ranks)
    host = dict(cores=host_cores(), threads=max(r["threads"] for r in ranks))
    if device.type == "cpu":
        measured = dict(balance_s=scheduler.balance_interval(), slice_s=scheduler.slice_length())
        host.update((k, v) for k, v in measured.items() if v is not None)
    out.update(
        format=1,
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        # The simulator shares a CPU host's cores among the ranks' processes: a rank of a plan
        # with more processes than cores computes at a share of the speed measured here, on
        # the cores the host's scheduler puts it on.
        device=dict(describe_device(device, backend), count=len(plan["rank_map"]), **host),
        versions=dict(versions(), **out.get("versions", {})),
        layers=layers,
        runtime=runtime,
        speed_trace=speed_trace(plan, ranks),
    )
    seconds = host_speed_seconds(ranks)
    if seconds is not None:
        out["host_speed"] = dict(kernel=host_speed.KERNEL, seconds=seconds)
    # `deliveries` sends from the process of global rank 0 to that of rank 1.
    if len(ranks) > 1:
        idle = flights(ranks[0]["p2p"], ranks[1]["p2p"])
        out["p2p"] = alpha_beta_p2p(idle)
        if ranks[0]["p2p_busy"]:
            runtime["send_wait_s"] = send_wait(ranks[0]["p2p_busy"], ranks[1]["p2p_busy"], idle)
    all_reduce_fits = {}
    for group, k in (("pp", plan["pipeline"]["ranks"]), ("dp", plan["pipeline"]["dp"])):
        timed_lists = [r[group] for r in ranks if r[group]]
        if k > 1 and timed_lists:
            all_reduce_fits[group] = alpha_beta_ring(_mean_points(timed_lists), k)
    scale = reduction_scale(plan, ranks, layers, kinds_of, all_reduce_fits["pp"]) if "pp" in all_reduce_fits else None
    if scale is not None:
        # Read by no one but you, as kernel_scale: the fit below is already scaled.
        runtime["all_reduce_scale"] = {"pp": scale}
        fit = all_reduce_fits["pp"]
        fit.update(alpha_s=fit["alpha_s"] * scale, beta_bytes_per_s=fit["beta_bytes_per_s"] / scale)
    out["all_reduce"] = all_reduce_fits
    with open(os.path.join(run_dir, "profile.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, metavar="DIR", help="what `mpipec profile` wrote")
    ap.add_argument("--backend", help="nccl, hccl or gloo (default: by what is present, or MPIPEC_BACKEND)")
    a = ap.parse_args(argv)
    sys.exit(profile(a.run, a.backend))


if __name__ == "__main__":
    main()
