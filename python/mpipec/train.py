"""Trains a Hugging Face vision-language model with an mpipec plan. It is what ``mpipec train``
runs, and a script to copy and change: the loop, the optimizer and the schedule are all here.

    mpipec train PLAN --model DIR --data FILE.jsonl --procs N --steps S     # one machine
    mpipec train PLAN ... --prepare RUN                                      # writes RUN, says how to run it
    torchrun --nnodes 2 ... -m mpipec.train --job RUN --model DIR --data FILE.jsonl --steps S

RUN holds ``plan.json`` (the compiled plan) and ``train.json`` (what plan.json does not say:
each layer's kind, ``seq_len`` and ``micro_batch_size``). Without torchrun's environment the
script starts the plan's processes itself on this machine (a GPU or an NPU each where present,
else the CPU and gloo; ``--check`` always on the CPU), forked after the model and the data are
loaded once.

What a step is: every process builds its stages of the model (``from_pretrained``, cut as the
plan says), makes the step's microbatches from the data (mpipec.data), and lets the executor
(mpipec.torch.Executor) run its rank's instructions; the gradients it leaves are those of the
mean loss over the step's microbatches and data-parallel replicas. Then the gradients are
clipped by their global norm over every rank (replicated encoder parameters counted once),
AdamW steps, and the learning rate follows a linear warm-up and a cosine decay to zero.
Forwards run under bf16 autocast where the device has it, in fp32 on the CPU.

``--log-file FILE`` (``mpipec train --log``) gets one JSON line a step: ``{"step", "loss", "seconds", "tokens"}`` (step from
1, the mean loss, the step's wall time, the tokens of its samples over every replica).
``--save DIR --save-every K`` writes ``DIR/step-K`` (every process its own files, then renamed
into place, so a step directory is whole or absent), and one after the last step or at
``--stop-after`` (a job whose time slot ends before ``--steps``); ``--resume DIR`` continues from
the latest whole step directory under DIR (or DIR itself), and the steps after it are the ones
an uninterrupted run gives, bit for bit. ``--check`` also runs the same steps in one process without
pipelining (fp32) and compares the loss and every gradient of each step.
"""

import sys

from ._requires import EXIT_MISSING, packages

# The exit status mpipec reports for bad input (the data, the model, a checkpoint).
EXIT_INPUT = 1
if __name__ == "__main__":
    packages(["torch", "transformers", "PIL"],
             "run `scripts/torch-env` from an mpipec checkout (it installs torch, transformers and Pillow into\n"
             "      the cached environment `mpipec train` finds by itself), or point --python or MPIPEC_PYTHON at a\n"
             "      Python that has them")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from . import data  # noqa: E402


def options(argv=None):
    ap = argparse.ArgumentParser(prog="python -m mpipec.train", description=__doc__.splitlines()[0])
    # Named so that none is an abbreviation of torchrun's own options (--run-path, --log-dir),
    # which torchrun's parser would refuse as ambiguous before the script sees them.
    ap.add_argument("--job", required=True, help="the directory `mpipec train --prepare` wrote (plan.json, train.json)")
    ap.add_argument("--model", required=True, help="a transformers model directory (Qwen2.5-VL or LLaVA)")
    ap.add_argument("--data", required=True, help="LLaVA conversation JSONL")
    ap.add_argument("--images", help="the folder image paths are relative to (default: the data file's)")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--lr", type=float, default=1e-5, help="the peak learning rate")
    ap.add_argument("--warmup", type=int, help="linear warm-up steps (default: 3 %% of --steps)")
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--clip", type=float, default=1.0, help="the global gradient norm to clip to (0: none)")
    ap.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto", help="auto: bf16 where the device has it")
    ap.add_argument("--seed", type=int, default=0, help="the data order's")
    ap.add_argument("--save", help="write checkpoints under this directory")
    ap.add_argument("--save-every", type=int, help="steps between checkpoints (default: only after the last)")
    ap.add_argument("--resume", help="a checkpoint directory to continue from")
    ap.add_argument("--stop-after", type=int, help="end the run after this step, as a job whose time is up (with --save: checkpointed there)")
    ap.add_argument("--log-file", help="write one JSON line per step to this file (`mpipec train --log`)")
    ap.add_argument("--check", action="store_true", help="compare with the same steps in one process (fp32)")
    a = ap.parse_args(argv)
    if a.warmup is None:
        a.warmup = round(0.03 * a.steps)
    return a


class Run:
    """A prepared run: the plan and the facts about its layers that plan.json does not hold."""

    def __init__(self, directory):
        from .torch import load_plan

        self.plan = load_plan(os.path.join(directory, "plan.json"))
        with open(os.path.join(directory, "train.json")) as f:
            layout = json.load(f)
        self.kinds, self.seq_len = layout["kinds"], layout["seq_len"]
        self.micro_batch_size = layout["micro_batch_size"]
        # An adaptive plan's `mpipec adapt` command: each step runs the plan of its batch's sizes.
        self.adaptive = layout.get("adaptive")
        pipeline = self.plan["pipeline"]
        self.m, self.dp = pipeline["microbatches"], pipeline["dp"]
        self.world = len(self.plan["rank_map"])


def describe(model_dir, run):
    """The hf adapter's description of the model directory's model (its config only);
    ValueError when its layers are not the plan's."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_dir)
    if config.model_type == "qwen2_5_vl":
        vision = config.vision_config.depth
    elif config.model_type == "llava":
        vision = config.vision_config.num_hidden_layers
    else:
        raise ValueError(f"{model_dir}: `{config.model_type}` models are not ones `mpipec train` knows; it trains qwen2_5_vl, llava")
    text = config.text_config.num_hidden_layers
    encoder = sum(k["encoder"] for k in run.kinds)
    if (vision, text) != (encoder, len(run.kinds) - encoder):
        raise ValueError(
            f"{model_dir}: the model has {vision} vision blocks and {text} decoder layers; the plan's model has "
            f"{encoder} encoder layers and {len(run.kinds) - encoder} decoder layers"
        )
    return {"family": config.model_type, "vision_layers": vision, "text_layers": text, "kinds": run.kinds}


def load_model(model_dir):
    """The model directory's model, in fp32."""
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()


def stages(model, adapter, plan, ids):
    """{stage id: its layers of `model`} for the stages `ids`."""
    from .torch import hf

    return {s: hf.Stage(range(*plan["stages"][s]["layers"]), adapter["kinds"], adapter, model=model) for s in ids}


def schedule(optimizer, steps, warmup):
    """Linear warm-up to the peak, then cosine decay to zero at the last step."""

    def factor(step):
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def autocast_dtype(device, precision):
    """bf16 where the device computes in it (CUDA that supports it, Ascend), else None (fp32)."""
    if precision == "fp32":
        return None
    has = device.type == "npu" or (device.type == "cuda" and torch.cuda.is_bf16_supported())
    if precision == "bf16" and not has:
        raise ValueError(f"--precision bf16: the {device.type} device does not compute in bf16")
    return torch.bfloat16 if has else None


class Microbatches:
    """The data's microbatches with the positions the model's family computes (Qwen2.5-VL's
    multimodal rope), as a function of (step, microbatch)."""

    def __init__(self, batches, model, adapter):
        from .torch import hf

        self.batches, self.model, self.family = batches, model, hf.family(adapter)

    def of(self, step, first):
        def batch(j):
            b = self.batches(step, first + j)
            b["position_ids"] = self.family.positions(self.model, b)
            return b

        return batch


def step_loss(losses, run, groups):
    """The step's loss as the gradients see it, on the processes that hold the last stage."""
    if not losses:
        return None
    total = torch.stack(losses).sum() / run.m
    if groups.dp is not None:
        dist.all_reduce(total, group=groups.dp)
        total /= groups.dp_size
    return float(total)


class Log:
    """One JSON line a step, written by one process (the last stage's, replica 0)."""

    def __init__(self, path, resumed):
        self.file = open(path, "a" if resumed else "w") if path else None

    def write(self, step, loss, seconds, tokens):
        if self.file:
            self.file.write(json.dumps({"step": step, "loss": loss, "seconds": seconds, "tokens": tokens}) + "\n")
            self.file.flush()


def latest(directory):
    """The newest whole step directory under `directory`, or `directory` itself."""
    steps = sorted(d for d in os.listdir(directory) if d.startswith("step-") and d[5:].isdigit())
    return os.path.join(directory, steps[-1]) if steps else directory


def setup(a, run, model, adapter, device):
    """This process's groups, executor, optimizer and schedule, and the step it starts from."""
    from .torch import Executor, devices, hf, stage_ids

    plan = run.plan
    groups = devices.groups(plan)
    modules = {s: m.to(device) for s, m in stages(model, adapter, plan, stage_ids(plan, groups.pp_rank)).items()}
    shapes = lambda layer: hf.layer_shapes(layer, adapter["kinds"], adapter, model=model)
    ex = Executor(plan, groups.pp_rank, modules, _loss, groups, device=device, autocast=autocast_dtype(device, a.precision),
                  layer_shapes=shapes)
    params = list(ex.parameters())
    optimizer = torch.optim.AdamW(params, lr=a.lr, weight_decay=a.weight_decay) if params else None
    scheduler = schedule(optimizer, a.steps, a.warmup) if optimizer else None
    start = 0
    if a.resume:
        from .torch import load_checkpoint

        start, extra = load_checkpoint(ex, latest(a.resume), optimizer)
        if scheduler:
            scheduler.load_state_dict(extra["scheduler"])
    return groups, ex, optimizer, scheduler, start


def save(a, done, ex, optimizer, scheduler):
    """The checkpoint after step `done`, where --save, --save-every and --stop-after want one."""
    if a.save and (done in (a.steps, a.stop_after) or (a.save_every and done % a.save_every == 0)):
        from .torch import save_checkpoint

        extra = {"scheduler": scheduler.state_dict() if scheduler else None}
        save_checkpoint(ex, os.path.join(a.save, f"step-{done:06d}"), optimizer, step=done, extra=extra)


def train(a, run, model, adapter, batches, device, record=None):
    """One process's training: the steps from the checkpoint, if any, to --steps (or
    --stop-after); with `record`, each step's loss and gradients go into it."""
    ahead = per_batch_plans(run, batches, resumed=bool(a.resume))
    groups, ex, optimizer, scheduler, start = setup(a, run, model, adapter, device)
    if ahead is not None:
        ahead.attach(ex)
    holds_log = groups.dp_rank == 0 and run.plan["stages"][-1].get("rank") == groups.pp_rank
    log = Log(a.log_file if holds_log else None, resumed=start > 0)
    source, first = Microbatches(batches, model, adapter), groups.dp_rank * run.m
    last = min(a.steps, a.stop_after or a.steps)
    for step in range(start, last):
        # Every rank starts the step together, so the slowest rank's time is the step's.
        dist.barrier()
        started = time.perf_counter()
        plan = ahead.plan(step, step + 1 < last) if ahead is not None else None
        losses = ex.step(source.of(step, first), source.of(step + 1, first) if step + 1 < a.steps else None, plan=plan)
        loss = step_loss(losses, run, groups)
        if record is not None:
            record["grads"].append(_named(ex, run.plan, groups.pp_rank))
            record["losses"].append(loss)
        if a.clip > 0:
            ex.clip_grad_norm_(a.clip)
        if optimizer:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
        if loss is not None:
            log.write(step + 1, loss, time.perf_counter() - started, batches.tokens_in(step, run.m * run.dp))
        save(a, step + 1, ex, optimizer, scheduler)
    if ahead is not None:
        summary = ahead.close()
        if holds_log:
            print(summary, flush=True)
        if record is not None:
            record["digests"] = ahead.digests
    return groups


def per_batch_plans(run, batches, resumed):
    """An adaptive plan's per-batch plans (mpipec.torch.plans), each step's from its batch's
    image tokens; None for a static plan. A resumed run starts deriving at its first step."""
    if not run.adaptive:
        return None
    from .torch import plans

    tokens = lambda step: plans.batch_tokens(lambda mb, s: batches.image_tokens(s, mb), step, run.m, run.dp)
    return plans.OneStepAhead(run.adaptive, run.plan, tokens, first=None if resumed else 0)


def _loss(output, batch):
    from .torch import hf

    return hf.loss(output, batch)


def _named(ex, plan, pp_rank):
    """Each trainable parameter's gradient once over the job (a replicated stage's from rank 0)."""
    out = {}
    for s, m in ex.modules.items():
        if plan["stages"][s].get("ranks") == "all" and pp_rank != 0:
            continue
        out.update({n: p.grad.detach().clone() for n, p in m.named_parameters() if p.requires_grad and p.grad is not None})
    return out


def reference(a, run, model, adapter, batches, dtype=torch.float32):
    """The same steps in one process: the whole model as one stage, every replica's
    microbatches, the same clipping, optimizer and schedule, computed in `dtype`."""
    from .torch import devices, hf

    whole = hf.Stage(range(len(run.kinds)), run.kinds, adapter, model=model).to(dtype)
    params = [p for p in whole.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=a.lr, weight_decay=a.weight_decay)
    scheduler = schedule(optimizer, a.steps, a.warmup)
    source = Microbatches(batches, model, adapter)
    m = run.m * run.dp
    out = {"grads": [], "losses": []}
    for step in range(a.steps):
        total, batch = 0.0, source.of(step, 0)
        for mb in range(m):
            b = devices.batch_to(batch(mb), dtype=dtype)
            loss = hf.loss(whole(None, b), b) / m
            loss.backward()
            total += float(loss.detach())
        out["losses"].append(total)
        out["grads"].append({n: p.grad.detach().clone() for n, p in whole.named_parameters() if p.requires_grad})
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(params, a.clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
    return out


def _worker(rank, a, run, model, adapter, batches, backend, rendezvous, out_dir):
    from .torch import devices
    from .torch.verify import injected, make_wrong

    try:
        # One node: the process's local rank is its rank, its device that GPU or NPU.
        os.environ["LOCAL_RANK"] = str(rank)
        device = devices.init(backend, f"file://{rendezvous}", rank, run.world)
        record = {"grads": [], "losses": []} if a.check else None
        groups = train(a, run, model, adapter, batches, device, record)
        # MPIPE_FAIL_AT=RANK:0:wrong, as `mpipec verify` takes it: a run whose check must fail.
        if record is not None and (injected(rank) or (0, ""))[1] == "wrong":
            make_wrong(record)
        if record is not None and groups.dp_rank == 0:
            torch.save(record, os.path.join(out_dir, f"rank{groups.pp_rank}.pt"))
        dist.barrier()
        dist.destroy_process_group()
    except Exception as e:
        print(f"error: rank {rank}: {e}", file=sys.stderr, flush=True)
        os._exit(EXIT_INPUT)


def local_backend(a, run):
    """The backend of the processes on this machine: gloo on the CPU for --check (it compares
    the plan, not the device), else what is present, with a device for each process."""
    from .torch import devices

    backend = "gloo" if a.check else devices.default_backend()
    present = {"nccl": lambda: torch.cuda.device_count(), "hccl": lambda: torch.npu.device_count()}.get(backend)
    if present is not None and present() < run.world:
        raise ValueError(
            f"the plan has {run.world} processes and this machine {present()} devices for {backend}; "
            "run it under torchrun on several nodes (mpipec train --prepare), or set MPIPEC_BACKEND=gloo for the CPU"
        )
    return backend


def local(a, run, model, adapter, batches):
    """The plan's processes on this machine, forked from this one (which has loaded the model
    and read the data); with --check, compared with one process. Returns the exit status."""
    import torch.multiprocessing as mp

    try:
        backend = local_backend(a, run)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INPUT
    out_dir = os.path.join(a.job, "processes")
    os.makedirs(out_dir, exist_ok=True)
    rendezvous = os.path.abspath(os.path.join(out_dir, "rendezvous"))
    if os.path.exists(rendezvous):
        os.remove(rendezvous)
    # One thread a process, so that no OpenMP pool exists at the fork and P ranks share the cores.
    torch.set_num_threads(1)
    try:
        args = (a, run, model, adapter, batches, backend, rendezvous, out_dir)
        mp.start_processes(_worker, args=args, nprocs=run.world, start_method="fork")
    except Exception as e:
        print(f"error: the training run failed: {str(e).strip().splitlines()[-1]}", file=sys.stderr)
        return EXIT_INPUT
    if not a.check:
        return 0
    # After the ranks, as `mpipec verify` does: ranks forked from a process that has run the
    # whole model inherit its heap and run slower.
    ref = reference(a, run, model, adapter, batches)
    from .torch.verify import Worst, compare_steps, verdict

    ranks = [torch.load(os.path.join(out_dir, f"rank{r}.pt")) for r in range(run.plan["pipeline"]["ranks"])]
    if any(r.get("digests") != ranks[0].get("digests") for r in ranks):
        print("error: the pipeline ranks ran different per-batch plans", file=sys.stderr)
        return EXIT_INPUT
    worst = Worst()
    missing = compare_steps(ranks, ref, a.steps, worst)
    if missing:
        print(missing, file=sys.stderr)
        return EXIT_INPUT
    failed = verdict(worst, lambda: reference(a, run, model, adapter, batches, torch.float64), "the loss and every gradient")
    if failed:
        print(failed, file=sys.stderr)
        return EXIT_INPUT
    print("ok: the loss and every gradient of each step match the single-process run")
    return 0


def check_resumable(path, plan, steps):
    """A clear error, before any process starts, for a checkpoint this run cannot continue."""
    from .torch import checkpoint

    try:
        with open(os.path.join(path, "meta.json")) as f:
            meta = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"--resume {path}: not a whole mpipec checkpoint ({e})") from None
    checkpoint.check_layout(path, meta, plan)
    if meta["step"] >= steps:
        raise ValueError(f"--resume {path}: the checkpoint is of step {meta['step']}; --steps {steps} has no step after it")


def prepare(a):
    """Everything that can be wrong before a step runs, found in this process: the model against
    the plan, the data, the checkpoint to resume from."""
    run = Run(a.job)
    if a.check and a.precision == "bf16":
        raise ValueError("--check compares in fp32; leave out --precision bf16")
    if a.check and a.resume:
        raise ValueError("--check compares whole runs from their first step; leave out --resume")
    if a.check:
        a.precision = "fp32"
    if a.resume:
        check_resumable(latest(a.resume), run.plan, a.steps)
    adapter = describe(a.model, run)
    tokens = data.Tokens(a.model)
    samples = data.read(a.data, tokens, run.seq_len, a.images)
    batches = data.Batches(samples, tokens, run.m * run.dp, run.micro_batch_size, a.seed)
    return run, load_model(a.model), adapter, batches


def main(argv=None):
    a = options(argv)
    try:
        run, model, adapter, batches = prepare(a)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INPUT
    if "RANK" not in os.environ:
        return local(a, run, model, adapter, batches)
    from .torch import devices

    try:
        train(a, run, model, adapter, batches, devices.init())
    except ValueError as e:
        # The plan does not fit the job, the modules or the checkpoint: every process says so.
        print(f"error: rank {os.environ['RANK']}: {e}", file=sys.stderr, flush=True)
        return EXIT_INPUT
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
