"""The mpipe torch runtime: runs an mpipec plan.json (or plan.compact.json) rank by rank.

Each process is one pipeline rank (x data-parallel replica). It builds the stages it holds
through an adapter, then executes its instruction list in order: forward (keeping what
backward needs), backward, backward_input / backward_weight (split backward), send / recv
(non-blocking sends, blocking receives: the IR's semantics), all_reduce over the pipeline group
(replicated regions) and over dp, optimizer_step. It needs only torch.

The adapter is a Python module (``--adapter module.name``; ``miniature`` is built in) with:
    build(layers: range, kinds: list[dict], config: dict) -> torch.nn.Module
        the stage for global layers [layers.start, layers.stop); its forward(x, batch) takes the
        activation from the previous stage (None for the first stage) and this microbatch's batch
    batch(mb: int, step: int, config: dict) -> dict       the inputs of microbatch mb (data-parallel
        replica d's microbatch j is mb = d * M + j)
    loss(output, batch: dict) -> torch.Tensor             on the model's last stage
Every layer must be built identically in every process (seed by layer index).

Errors name the rank, the instruction index and the instruction. Every collective has a
timeout, so one failing rank ends the others instead of hanging them.
"""

import argparse
import collections
import datetime
import importlib
import json
import os
import re
import sys
import time
from urllib.parse import unquote

# The exit status when torch is missing, which mpipec reports as a usage error, not a mismatch.
EXIT_NO_TORCH = 2
try:
    import torch
except ImportError:
    sys.stderr.write(
        f"error: `{sys.executable}` cannot import torch\n"
        "help: run `scripts/torch-env` from an mpipec checkout (it creates the cached environment `mpipec verify`\n"
        "      finds by itself), or point --python or MPIPEC_PYTHON at a Python that has torch\n"
    )
    sys.exit(EXIT_NO_TORCH)
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

# A message's header: direction, producing stage, microbatch, dtype, rank of the tensor, shape.
HEADER = 13
DIRS = {"act": 0, "grad": 1}
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
DIR_NAMES = {v: k for k, v in DIRS.items()}
TIMEOUT = datetime.timedelta(seconds=float(os.environ.get("MPIPE_TIMEOUT", "60")))
# verify's bar (fp32): the largest difference over the largest reference entry, per tensor.
TOLERANCE = 1e-5
FLOOR = 1e-6


# ---- the built-in miniature: a ViT-like encoder over random patches whose features are placed
# before the text tokens of a small decoder LM --------------------------------------------------

class Block(nn.Module):
    """Pre-norm attention + MLP, causal for the decoder, bidirectional for the encoder."""

    def __init__(self, width, causal, span=None):
        super().__init__()
        self.causal = causal
        # An encoder attends within one image of `span` tokens (images are independent).
        self.span = span
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x):
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        if self.span:
            q, k, v = (t.reshape(-1, self.span, t.shape[-1]) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + self.proj(a.reshape(x.shape))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class MiniatureStage(nn.Module):
    def __init__(self, layers, kinds, config):
        super().__init__()
        self.first, self.last = layers.start, layers.stop
        self.kinds = kinds
        c = config
        self.blocks = nn.ModuleDict()
        self.extra = nn.ModuleDict()
        for l in layers:
            kind = kinds[l]
            torch.manual_seed(c["seed"] * 1000 + l)
            width = c["enc_width"] if kind["encoder"] else c["width"]
            span = c["image_tokens"] // c.get("images", 1) if kind["encoder"] else None
            self.blocks[str(l)] = Block(width, causal=not kind["encoder"], span=span)
            if kind["part_first"] and kind["encoder"]:
                self.extra[f"patch{l}"] = nn.Linear(c["patch_dim"], c["enc_width"])
            if kind["part_last"] and kind["encoder"]:
                self.extra[f"merge{l}"] = nn.Linear(c["enc_width"], c["width"])
            if kind["part_first"] and not kind["encoder"]:
                self.extra[f"embed{l}"] = nn.Embedding(c["vocab"], c["width"])
            if kind["part_last"] and not kind["encoder"]:
                self.extra[f"head{l}"] = nn.Linear(c["width"], c["vocab"])
            mine = {f"{prefix}{l}" for prefix in ("patch", "merge", "embed", "head")}
            for p in list(self.blocks[str(l)].parameters()) + [q for n, m in self.extra.items() if n in mine for q in m.parameters()]:
                p.requires_grad_(kind["trainable"])

    def forward(self, x, batch):
        for l in range(self.first, self.last):
            kind = self.kinds[l]
            if kind["part_first"] and kind["encoder"]:
                x = self.extra[f"patch{l}"](batch["patches"])
            if kind["part_first"] and not kind["encoder"]:
                tokens = self.extra[f"embed{l}"](batch["tokens"])
                x = tokens if x is None else torch.cat([x, tokens], dim=1)
            x = self.blocks[str(l)](x)
            if kind["part_last"] and kind["encoder"]:
                x = self.extra[f"merge{l}"](x)
            if kind["part_last"] and not kind["encoder"]:
                x = self.extra[f"head{l}"](x)
        return x


class Miniature:
    @staticmethod
    def build(layers, kinds, config):
        return MiniatureStage(layers, kinds, config)

    @staticmethod
    def batch(mb, step, config):
        g = torch.Generator().manual_seed(config["seed"] * 7919 + step * 104729 + mb)
        b = config["micro_batch_size"]
        return {
            "patches": torch.randn(b, config["image_tokens"], config["patch_dim"], generator=g),
            "tokens": torch.randint(0, config["vocab"], (b, config["text_tokens"]), generator=g),
            "labels": torch.randint(0, config["vocab"], (b, config["text_tokens"]), generator=g),
        }

    @staticmethod
    def images(batch, lo, hi, config):
        """The part of a microbatch an encoder part encodes: images [lo, hi) of each sequence."""
        per = config["image_tokens"] // config.get("images", 1)
        return dict(batch, patches=batch["patches"][:, lo * per : hi * per])

    @staticmethod
    def loss(output, batch):
        text = output[:, -batch["labels"].shape[1]:, :]
        return F.cross_entropy(text.reshape(-1, text.shape[-1]), batch["labels"].reshape(-1))


def load_adapter(name):
    return Miniature if name == "miniature" else importlib.import_module(name)


# ---- loading a plan -----------------------------------------------------------------------------
# plan.compact.json holds each rank's instructions as one string of tokens (docs/plan-formats.md):
# an op letter, then the present fields (`s` stage, `m` mb, `p` peer, `a`/`g` dir, `P`/`D` group,
# `r` region, `*` overlap), then extensions `;name:12`, `;name=text`, `;name`.

_OPS = {"F": "forward", "B": "backward", "I": "backward_input", "W": "backward_weight",
        "S": "send", "R": "recv", "A": "all_reduce", "O": "optimizer_step"}
_NUMBERS = {"s": "stage", "m": "mb", "p": "peer"}
_ENUMS = {"a": ("dir", "act"), "g": ("dir", "grad"), "P": ("group", "pp"), "D": ("group", "dp")}
_FIELD = re.compile(r"([smp])(\d+)|([agPD])|r([^*]*)|(\*)")


def _instruction(token):
    body, *extensions = token.split(";")
    if not body or body[0] not in _OPS:
        raise ValueError(f"`{token}` is not an instruction token")
    i = {"op": _OPS[body[0]]}
    at = 1
    while at < len(body):
        m = _FIELD.match(body, at)
        if m is None:
            raise ValueError(f"`{token}` is not an instruction token")
        number, value, letter, region, overlap = m.groups()
        if number:
            i[_NUMBERS[number]] = int(value)
        elif letter:
            key, name = _ENUMS[letter]
            i[key] = name
        elif overlap:
            i["overlap"] = True
        else:
            i["region"] = unquote(region)
        at = m.end()
    for e in extensions:
        if ":" in e:
            key, value = e.split(":", 1)
            lo, dash, hi = value.partition("-")
            i[key] = [int(lo), int(hi)] if dash and lo else int(value)
        elif "=" in e:
            key, value = e.split("=", 1)
            i[key] = unquote(value)
        else:
            i[e] = True
    return i


def load_plan(path):
    """The plan at `path` as plan.json holds it, whichever of the two encodings the file is."""
    with open(path) as f:
        plan = json.load(f)
    if plan.get("format") == "mpipe-ir-compact":
        if plan.get("version") != 1:
            raise SystemExit(f"{path}: compact plan version {plan.get('version')} is newer than this runtime reads (1)")
        ranks = []
        for r in plan["ranks"]:
            instructions = [_instruction(t) for t in r["code"].split(" ") if t]
            if len(instructions) != r["count"]:
                raise SystemExit(f"{path}: rank {r['rank']} holds {len(instructions)} instructions, not {r['count']}")
            prologue = [_instruction(t) for t in r.get("prologue", "").split(" ") if t]
            ranks.append({"rank": r["rank"], "prologue": prologue, "instructions": instructions})
        plan.update(format="mpipe-ir", version=1, ranks=ranks)
    return plan


# ---- executing a plan ---------------------------------------------------------------------------

def describe(i):
    parts = [i["op"]]
    for key in ("dir", "group", "region"):
        if key in i:
            parts.append(str(i[key]))
    if "stage" in i:
        parts.append(f"s{i['stage']}")
    if "mb" in i:
        parts.append(f"mb{i['mb']}")
    if "peer" in i:
        parts.append(("-> " if i["op"] == "send" else "<- ") + str(i["peer"]))
    return " ".join(parts)


def tensor_key(i, stage_offset=0):
    """(stage, mb, images...) of an instruction's tensor; `stage_offset` -1: its input's."""
    return (i["stage"] + stage_offset, i["mb"]) + tuple(i.get("images", ()))


def backward_keys(instructions):
    """Keys of every backward this rank runs in the step."""
    ops = ("backward", "backward_input", "backward_weight")
    return {tensor_key(i) for i in instructions if i["op"] in ops}


def activation_readers(instructions):
    """How many of the step's instructions read each activation: the next stage's forward, a
    send, a backward recomputing away from its forward (a stage reads the previous one's output)."""
    here = {tensor_key(i) for i in instructions if i["op"] == "forward"}
    readers = collections.Counter()
    for i in instructions:
        if i["op"] == "send" and i["dir"] == "act":
            readers[tensor_key(i)] += 1
        elif (i["op"] == "forward" and i.get("step") != 1) or (i["op"] == "backward" and tensor_key(i) not in here):
            readers[tensor_key(i, -1)] += 1
    return readers


class Rank:
    def __init__(self, plan, rank, adapter, config, device, dp_group=None, replica=0):
        self.plan, self.rank, self.adapter, self.config, self.device = plan, rank, adapter, config, device
        self.m = plan["pipeline"]["microbatches"]
        self.last_stage = len(plan["stages"]) - 1
        self.modules = {}
        for s in plan["stages"]:
            if s.get("rank") == rank or s.get("ranks") == "all":
                self.modules[s["id"]] = adapter.build(range(*s["layers"]), config["kinds"], config).to(device)
        self.region_of = {s["id"]: s["region"] for s in plan["stages"]}
        params = [p for m in self.modules.values() for p in m.parameters() if p.requires_grad]
        self.optimizer = torch.optim.SGD(params, lr=config.get("lr", 0.05)) if params else None
        self.dp_group = dp_group
        # Replica d's microbatch j is the data's microbatch d * M + j.
        self.first_mb = replica * self.m
        self.mailbox = {}
        # Lookahead: features encoded during a step (or the prologue) for the step after it.
        self.carried = {}
        # Per step: the seconds each instruction took, in list order (--profile).
        self.timings = []
        # Told (step, instruction index) before each instruction: what a dead or hung rank was doing.
        self.progress = lambda step, k: None
        # (stage, mb) -> (images, tokens) of each part a gathered input was made of.
        self.slices = {}

    def params(self, region=None):
        for s, m in sorted(self.modules.items()):
            if region is None or self.region_of[s] == region:
                for p in m.parameters():
                    if p.requires_grad:
                        yield p

    def batches(self, step):
        """Microbatch -> its batch of `step`, loaded on first use."""
        cache = {}
        on_device = lambda b: {k: v.to(self.device) for k, v in b.items()}
        return lambda mb: cache.setdefault(mb, on_device(self.adapter.batch(self.first_mb + mb, step, self.config)))

    def encode_ahead(self, i, ahead, batch):
        """A lookahead encoder forward: no backward follows, its output waits for the next step."""
        s, mb = i["stage"], i["mb"]
        with torch.no_grad():
            ahead[(s, mb)] = self.modules[s](ahead.pop((s - 1, mb), None), batch(mb))

    def prologue(self, instructions):
        """Before the first step: the first step's features, as every later step gets them."""
        batch, ahead = self.batches(0), {}
        for i in instructions:
            self.encode_ahead(i, ahead, batch)
        self.carried = ahead

    def part(self, i, batch):
        """An encoder part's batch: only its images (plan.json's `images`)."""
        if "images" not in i:
            return batch
        return self.adapter.images(batch, *i["images"], self.config)

    def forward(self, i, acts, batch, readers):
        """A stage's forward on its input (none for the model's first stage): (input, output),
        the output the loss on the last stage."""
        s, mb = i["stage"], i["mb"]
        images = tuple(i.get("images", ()))
        x = self.read(acts, (s - 1, mb) + images, readers) if images else self.gather(acts, s, mb, readers)
        if x is not None:
            x = x.detach().requires_grad_(True)
        out = self.modules[s](x, self.part(i, batch(mb)))
        if s == self.last_stage:
            out = self.adapter.loss(out, batch(mb)) / self.m
        return x, out

    @staticmethod
    def read(acts, key, readers):
        """An activation for one of its readers: it leaves `acts` with the last."""
        readers[key] -= 1
        return acts.pop(key, None) if readers[key] <= 0 else acts.get(key)

    def gather(self, acts, s, mb, readers):
        """The first body stage's input when parts of the encode made it: the parts in image
        order, concatenated along the tokens; where each part sits is kept for its gradient."""
        keys = sorted(k for k in acts if len(k) == 4 and k[:2] == (s - 1, mb))
        if not keys:
            return self.read(acts, (s - 1, mb), readers)
        parts = [acts.pop(k) for k in keys]
        self.slices[(s, mb)] = [(k[2:], p.shape[1]) for k, p in zip(keys, parts)]
        return torch.cat(parts, dim=1)

    def scatter(self, grads, s, mb, g):
        """The gradient of a gathered input back into one slice per part."""
        at = 0
        for images, size in self.slices.pop((s, mb)):
            grads[(s, mb) + images] = g[:, at : at + size]
            at += size

    def step(self, step, instructions, fail_at=None):
        acts, grads, kept, pending, losses, sends = dict(self.carried), {}, {}, [], [], []
        # Asynchronous gradient reductions (buckets) not yet waited for.
        reducing = []
        ahead, batch, next_batch = {}, self.batches(step), self.batches(step + 1)
        behind, readers = backward_keys(instructions), activation_readers(instructions)
        durations = []
        self.timings.append(durations)
        for k, i in enumerate(instructions):
            op = i["op"]
            started = time.perf_counter()
            self.progress(step, k)
            try:
                if fail_at is not None and fail_at[0] == k:
                    inject_failure(fail_at[1])
                if op == "forward" and i.get("step") == 1:
                    self.encode_ahead(i, ahead, next_batch)
                elif op == "forward":
                    s, mb = i["stage"], i["mb"]
                    # A part of an encode keys its tensors by its images too.
                    images = tuple(i.get("images", ()))
                    key = (s, mb) + images
                    # Where the backward runs on another rank, nothing here needs the graph.
                    with torch.set_grad_enabled(key in behind):
                        x, out = self.forward(i, acts, batch, readers)
                    if s == self.last_stage:
                        losses.append(out.detach())
                    if key in behind:
                        kept[key] = (x, out)
                    if s != self.last_stage:
                        acts[key] = out
                elif op in ("backward", "backward_input", "backward_weight"):
                    s, mb = i["stage"], i["mb"]
                    images = tuple(i.get("images", ()))
                    if (s, mb) + images not in kept:
                        # Away from its forward (an encoder chunk that recomputes): run the
                        # forward again from the chunk's input, received or the data itself.
                        kept[(s, mb) + images] = self.forward(i, acts, batch, readers)
                    x, out = kept[(s, mb) + images]
                    g = None if s == self.last_stage else grads.pop((s + 1, mb) + images) if op != "backward_weight" else kept[("g", s, mb)]
                    if op == "backward":
                        torch.autograd.backward(out, g)
                        del kept[(s, mb) + images]
                    elif op == "backward_input":
                        kept[("g", s, mb)] = g
                        if x is not None and x.requires_grad:
                            torch.autograd.backward(out, g, inputs=[x], retain_graph=True)
                    else:
                        params = list(self.modules[s].parameters())
                        trainable = [p for p in params if p.requires_grad]
                        if trainable:
                            torch.autograd.backward(out, g, inputs=trainable)
                        del kept[(s, mb)], kept[("g", s, mb)]
                    if op != "backward_weight" and x is not None and x.grad is not None:
                        grads[(s, mb) + images] = x.grad
                        if (s, mb) in self.slices:
                            self.scatter(grads, s, mb, grads.pop((s, mb)))
                elif op == "send":
                    key = (i["stage"], i["mb"]) + tuple(i.get("images", ()))
                    t = (self.read(acts, key, readers) if i["dir"] == "act" else grads.pop(key)).detach().contiguous()
                    header = torch.zeros(HEADER, dtype=torch.int64)
                    header[:5] = torch.tensor([DIRS[i["dir"]], i["stage"], i["mb"], DTYPES.index(t.dtype), t.dim()])
                    header[5 : 5 + t.dim()] = torch.tensor(t.shape)
                    peer = self.global_rank(i["peer"])
                    # NCCL and HCCL send device tensors only: the header travels there too.
                    header = header.to(self.device)
                    sends += [dist.P2POp(dist.isend, header, peer), dist.P2POp(dist.isend, t, peer)]
                    # A run of sends goes out as one batch (one NCCL group call).
                    if k + 1 == len(instructions) or instructions[k + 1]["op"] != "send":
                        # The ops keep their tensors alive until the works are waited on.
                        pending.append((dist.batch_isend_irecv(sends), sends))
                        sends = []
                elif op == "recv":
                    key = (i["dir"], i["stage"], i["mb"])
                    t = self.receive(self.global_rank(i["peer"]), key)
                    (acts if i["dir"] == "act" else grads)[(i["stage"], i["mb"]) + tuple(i.get("images", ()))] = t
                elif op == "all_reduce":
                    if not i.get("async"):
                        # What reads reduced gradients waits for the buckets still in flight.
                        for work in reducing:
                            work.wait()
                        reducing = []
                    params = self.modules[i["stage"]].parameters() if "stage" in i else self.params(i.get("region"))
                    for p in (p for p in params if p.requires_grad):
                        if p.grad is None:
                            p.grad = torch.zeros_like(p)
                        if i.get("async"):
                            reducing.append(dist.all_reduce(p.grad, group=self.pp_group, async_op=True))
                        elif i["group"] == "pp":
                            dist.all_reduce(p.grad, group=self.pp_group)
                        elif self.dp_group is not None:
                            dist.all_reduce(p.grad, group=self.dp_group)
                            p.grad /= dist.get_world_size(self.dp_group)
                elif op == "optimizer_step":
                    for work in reducing:
                        work.wait()
                    reducing = []
                    self.before_step(step, losses)
                    if self.optimizer is not None:
                        self.optimizer.step()
                        self.optimizer.zero_grad(set_to_none=True)
                else:
                    raise RuntimeError(f"unknown op {op}")
            except Exception as e:
                raise RuntimeError(f"rank {self.rank}, instruction {k} ({describe(i)}): {e}") from e
            durations.append(time.perf_counter() - started)
        for works, _ in pending:
            for work in works:
                work.wait()
        self.carried = ahead
        return losses

    def receive(self, peer, key):
        """The message `key` from `peer`. Messages between two ranks arrive in the order they
        were sent (NCCL and HCCL match point-to-point messages in order, not by tag), which
        need not be the order this rank wants them: earlier arrivals wait in a mailbox."""
        while key not in self.mailbox.setdefault(peer, {}):
            header = torch.zeros(HEADER, dtype=torch.int64, device=self.device)
            dist.recv(header, peer)
            header = header.cpu()
            d, stage, mb, dtype, ndim = (int(v) for v in header[:5])
            t = torch.empty([int(v) for v in header[5 : 5 + ndim]], dtype=DTYPES[dtype], device=self.device)
            dist.recv(t, peer)
            self.mailbox[peer][(DIR_NAMES[d], stage, mb)] = t
        return self.mailbox[peer].pop(key)

    def before_step(self, step, losses):
        pass


def inject_failure(mode):
    """MPIPE_FAIL_AT=RANK:INSTRUCTION[:MODE]'s failure: an exception (`raise`, the default), a
    process that dies (`exit`), or one that hangs (`hang`)."""
    if mode == "exit":
        os._exit(3)
    if mode == "hang":
        time.sleep(TIMEOUT.total_seconds() * 100)
    raise RuntimeError("failure injected by MPIPE_FAIL_AT")


def init(backend=None, init_method=None, rank=-1, world=-1):
    """The process group, and this process's device: its local GPU or NPU, else the CPU. The
    group meets as torchrun says (env://) unless `init_method` names another rendezvous."""
    if backend is None:
        backend = "gloo"
        if torch.cuda.is_available():
            backend = "nccl"
        else:
            try:
                import torch_npu  # noqa: F401
                backend = "hccl"
            except ImportError:
                pass
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    elif backend == "hccl":
        device = torch.device("npu", local)
        torch.npu.set_device(device)
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world, timeout=TIMEOUT)
    return device


def run(plan, adapter, config, steps, out_dir=None, fail_at=None, device=torch.device("cpu"), progress=None):
    """One process of a launched plan (torchrun sets RANK and WORLD_SIZE)."""
    if dist.get_world_size() != len(plan["rank_map"]):
        raise SystemExit(f"the plan has {len(plan['rank_map'])} ranks; this job has {dist.get_world_size()} processes")
    me = dist.get_rank()
    coord = next(c for c in plan["rank_map"] if c["global"] == me)
    if coord["tp"] != 0 or plan["pipeline"]["tp"] != 1:
        raise SystemExit("the mpipe torch runtime runs tp = 1 plans; tensor parallelism is the stack's (see docs/backends.md)")
    pp, dp = plan["pipeline"]["ranks"], plan["pipeline"]["dp"]
    glob = lambda p, d: next(c["global"] for c in plan["rank_map"] if c["pp"] == p and c["dp"] == d and c["tp"] == 0)
    groups = {d: dist.new_group([glob(p, d) for p in range(pp)], timeout=TIMEOUT) for d in range(dp)}
    dp_groups = {p: dist.new_group([glob(p, d) for d in range(dp)], timeout=TIMEOUT) for p in range(pp)} if dp > 1 else {}
    r = Rank(plan, coord["pp"], adapter, config, device, dp_groups.get(coord["pp"]), coord["dp"])
    r.pp_group = groups[coord["dp"]]
    if progress is not None:
        r.progress = progress
    r.global_rank = lambda peer: glob(peer, coord["dp"])
    record = {"grads": [], "losses": []}

    def before_step(step, losses):
        g = {}
        for s, m in r.modules.items():
            replicated = plan["stages"][s].get("ranks") == "all"
            if replicated and r.rank != 0:
                continue
            for name, p in m.named_parameters():
                if p.requires_grad and p.grad is not None:
                    g[name] = p.grad.detach().clone()
        record["grads"].append(g)
        loss = None
        if losses:
            # The replicas' mean, as the gradients are after the dp all-reduce.
            total = torch.stack(losses).sum()
            if r.dp_group is not None:
                dist.all_reduce(total, group=r.dp_group)
                total /= dp
            loss = float(total)
        record["losses"].append(loss)

    r.before_step = before_step
    instructions = plan["ranks"][coord["pp"]]["instructions"]
    r.prologue(plan["ranks"][coord["pp"]].get("prologue", []))
    record["step_seconds"] = []
    for step in range(steps):
        # Every rank starts the step together, so the slowest rank's time is the step's.
        dist.barrier()
        started = time.perf_counter()
        r.step(step, instructions, fail_at if step == 0 else None)
        record["step_seconds"].append(time.perf_counter() - started)
        if out_dir is None and record["losses"][-1] is not None and coord["dp"] == 0:
            print(f"step {step}: loss {record['losses'][-1]:.6f} ({record['step_seconds'][-1]:.3f} s on rank {me})", flush=True)
    params = {}
    for s, m in r.modules.items():
        if plan["stages"][s].get("ranks") == "all" and r.rank != 0:
            continue
        for name, p in m.named_parameters():
            params[name] = p.detach().clone()
    record["params"] = params
    record["timings"] = r.timings
    if out_dir is not None and coord["dp"] == 0:
        torch.save(record, os.path.join(out_dir, f"rank{r.rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


def reference(plan, adapter, config, steps):
    """The same microbatches in one process, without pipelining."""
    layers = sum((s["layers"][1] - s["layers"][0]) for s in plan["stages"])
    model = adapter.build(range(0, layers), config["kinds"], config)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=config.get("lr", 0.05)) if params else None
    # Every replica's microbatches, each weighted as the dp average weighs it.
    m = plan["pipeline"]["microbatches"] * plan["pipeline"]["dp"]
    out = {"grads": [], "losses": []}
    for step in range(steps):
        total = 0.0
        for mb in range(m):
            b = adapter.batch(mb, step, config)
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


def _worker(rank, world, rendezvous, plan, config, steps, out_dir, fail, progress):
    torch.manual_seed(0)
    device = init("gloo", f"file://{rendezvous}", rank, world)
    fail_at = None
    if fail and int(fail.split(":")[0]) == rank:
        at, mode = (fail.split(":") + ["raise"])[1:3]
        fail_at = (int(at), mode)

    def report(step, k):
        progress[2 * rank], progress[2 * rank + 1] = step, k

    try:
        run(plan, load_adapter(config.get("adapter", "miniature")), config, steps, out_dir, fail_at, device, report)
        progress[2 * rank + 1] = DONE
    except Exception as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        os._exit(1)


# A process's progress once it has run every step.
DONE = -2


def unfinished(plan, progress):
    """A note per process that did not finish: the instruction it was at when the run ended (a
    rank that died or hung is the one whose peers waited on it)."""
    for c in sorted(plan["rank_map"], key=lambda c: c["global"]):
        step, k = progress[2 * c["global"]], progress[2 * c["global"] + 1]
        if k == DONE:
            continue
        if k < 0:
            yield f"note: process {c['global']} (rank {c['pp']}) stopped before its first instruction"
        else:
            i = plan["ranks"][c["pp"]]["instructions"][k]
            yield f"note: process {c['global']} (rank {c['pp']}) stopped at step {step}, instruction {k} ({describe(i)})"


def verify(plan, config, steps, out_dir, profile=False):
    """Runs the plan in P processes (gloo, CPU) and once without pipelining; compares. Each
    rank gets one thread: P ranks share the machine's cores, as ranks own their device."""
    import torch.multiprocessing as mp
    # The ranks meet through a file of this run's own, not a TCP port: a port picked free here
    # can be taken by a concurrent run before the ranks bind it.
    rendezvous = os.path.abspath(os.path.join(out_dir, "rendezvous"))
    if os.path.exists(rendezvous):
        os.remove(rendezvous)
    world = len(plan["rank_map"])
    # The reference first: it pays torch's one-time start-up (kernel registration, autograd)
    # in this process, before the ranks fork from it. One thread, so that no OpenMP pool
    # exists at the fork.
    torch.set_num_threads(1)
    ref = reference(plan, load_adapter(config.get("adapter", "miniature")), config, steps)
    import multiprocessing
    # Each process's (step, instruction) before it starts one; -1 before its first.
    progress = multiprocessing.Array("q", [-1] * 2 * world, lock=False)
    try:
        # fork, not spawn: the children inherit the imported, started torch (and `progress`)
        mp.start_processes(_worker, args=(world, rendezvous, plan, config, steps, out_dir, os.environ.get("MPIPE_FAIL_AT"), progress), nprocs=world, join=True, start_method="fork")
    except Exception as e:
        print(f"error: the pipelined run failed: {str(e).strip().splitlines()[-1]}", file=sys.stderr)
        for line in unfinished(plan, progress):
            print(line, file=sys.stderr)
        return 1
    ranks = [torch.load(os.path.join(out_dir, f"rank{r}.pt")) for r in range(plan["pipeline"]["ranks"])]
    worst = {"loss": (0.0, 0.0, ""), "grad": (0.0, 0.0, ""), "param": (0.0, 0.0, "")}

    def compare(kind, name, a, b):
        diff = float((a - b).abs().max()) if a.numel() else 0.0
        # A tensor that is zero up to round-off (a key projection's bias, which softmax ignores)
        # is measured against FLOOR, not against its own noise.
        scale = max(float(b.abs().max()) if b.numel() else 0.0, FLOOR)
        rel = diff / scale
        if rel >= worst[kind][1]:
            worst[kind] = (diff, rel, name)

    for step in range(steps):
        losses = [r["losses"][step] for r in ranks if r["losses"][step] is not None]
        pipe_loss = sum(losses)
        compare("loss", f"step {step}", torch.tensor([pipe_loss]), torch.tensor([ref["losses"][step]]))
        merged = {}
        for r in ranks:
            merged.update(r["grads"][step])
        missing = set(ref["grads"][step]) - set(merged)
        if missing:
            print(f"error: step {step}: no pipelined gradient for {sorted(missing)[:3]}", file=sys.stderr)
            return 1
        for name, g in ref["grads"][step].items():
            compare("grad", f"step {step} {name}", merged[name], g)
        print(f"step {step}: loss {pipe_loss:.6f} (single process {ref['losses'][step]:.6f}); worst gradient {worst['grad'][2]}: abs {worst['grad'][0]:.3e}, rel {worst['grad'][1]:.3e}")
    params = {}
    for r in ranks:
        params.update(r["params"])
    for name, p in ref["params"].items():
        compare("param", name, params[name], p)
    for kind in ("loss", "grad", "param"):
        d, rel, name = worst[kind]
        print(f"max {kind} difference: abs {d:.3e}, rel {rel:.3e} ({name})")
    kind = max(("loss", "grad", "param"), key=lambda k: worst[k][1])
    if worst[kind][1] > TOLERANCE:
        print(f"error: outside tolerance (fp32: rel {TOLERANCE:g} on loss, gradients and parameters): worst {worst[kind][2]}", file=sys.stderr)
        return 1
    print("ok: loss, gradients and parameters match the single-process run")
    if profile:
        # What `mpipec verify --profile` reads back (src/sim/measured.rs).
        steps_of = lambda r: [{"seconds": t, "instructions": d} for t, d in zip(r["step_seconds"], r["timings"])]
        with open(os.path.join(out_dir, "profile.json"), "w") as f:
            json.dump({"ranks": [{"rank": k, "steps": steps_of(r)} for k, r in enumerate(ranks)]}, f)
    return 0


def verify_cases(dirs):
    """Every run `mpipec verify --prepare DIR` wrote, one after another in this process, which
    imports torch (and transformers) once for all of them. Each case's output ends with a line
    `case DIR: ok` or `case DIR: failed`; the exit status is 1 when one failed."""
    failed = 0
    for d in dirs:
        with open(os.path.join(d, "case.json")) as f:
            case = json.load(f)
        with open(os.path.join(d, "config.json")) as f:
            config = json.load(f)
        print(case["title"], flush=True)
        status = verify(load_plan(os.path.join(d, "plan.json")), config, case["steps"], d)
        print(f"case {d}: {'ok' if status == 0 else 'failed'}", flush=True)
        sys.stderr.flush()
        failed += status != 0
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", metavar="DIR", help="verify the runs `mpipec verify --prepare DIR` wrote, in one process")
    ap.add_argument("--plan")
    ap.add_argument("--config", help="adapter configuration (JSON)")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--verify", metavar="DIR", help="run P processes and a single-process reference, compare (CPU, gloo)")
    ap.add_argument("--profile", action="store_true", help="with --verify: write each instruction's time to DIR/profile.json")
    a = ap.parse_args()
    if a.cases:
        sys.exit(verify_cases(a.cases))
    if not a.plan:
        ap.error("--plan is required")
    plan = load_plan(a.plan)
    config = json.load(open(a.config)) if a.config else {}
    if a.verify:
        sys.exit(verify(plan, config, a.steps, a.verify, a.profile))
    device = init()
    run(plan, load_adapter(config.get("adapter", "miniature")), config, a.steps, device=device)


if __name__ == "__main__":
    main()
