"""The executor: runs one rank's share of an mpipec plan inside the user's training loop.

    from mpipec.torch import Executor, devices
    device = devices.init()                       # under torchrun: nccl, hccl or gloo
    plan = mpipec.torch.load_plan("OUT/plan.json")
    groups = devices.groups(plan)                 # collective: every process calls it
    modules = {s: build_stage(s).to(device) for s in mpipec.torch.stage_ids(plan, groups.pp_rank)}
    ex = Executor(plan, groups.pp_rank, modules, loss_fn, groups, device=device)
    opt = torch.optim.AdamW([p for m in modules.values() for p in m.parameters()])
    for batch in data:                            # the user's loop, optimizer and schedule
        losses = ex.step(microbatches(batch))     # this rank's instruction list, once
        ex.clip_grad_norm_(1.0)                   # optional: the global norm over pp and dp
        opt.step(); opt.zero_grad()

The stage modules are the user's: any ``nn.Module`` per stage this rank holds (its own and
every replicated stage), whose ``forward(x, batch)`` takes the previous stage's output (None
on the model's first stage) and this microbatch's batch dict. ``loss_fn(output, batch)`` gives
the last stage's loss of one microbatch. The gradients the step leaves are those of the mean
loss over the step's microbatches and, with dp, over the replicas; the executor runs what the
plan says between forward and backward: sends and receives (device tensors as they are), the
replicated encoder's all-reduce over the pipeline group, the dp reduction. The optimizer may
step once ``step()`` returns, or at the plan's ``optimizer_step`` through ``on_optimizer_step``.
"""

import collections
import contextlib
import queue
import threading
import time

import torch
import torch.distributed as dist

from . import wire
from .actions import Action, Dir, Group, Op, PlanError, load_plan, rank_actions, replicated, stage_ids
from .checks import check_modules
from .devices import batch_to


# Per-batch plans whose lists an executor keeps decoded (an adaptive run's recent batch shapes).
KEEP_LISTS = 16


class _Lists:
    """What one plan asks of one rank: its prologue and instructions as actions, the messages
    each peer sends it a step, and where each lookahead feature is encoded."""

    def __init__(self, plan, rank, globals_):
        self.plan, self.rank = plan, rank
        self.prologue, self.actions = rank_actions(plan, rank)
        self.expected = {}
        for a in self.actions:
            if a.op is Op.RECV:
                peer = globals_[a.peer]
                self.expected[peer] = self.expected.get(peer, 0) + 1
        self.holders = _holders(plan)


def _holders(plan):
    """Each lookahead feature (the last encoder stage's output of a next-step encode) -> the
    pipeline rank that encodes it, and so sends it in the step after."""
    encoded = {}
    for r in plan["ranks"]:
        for i in r["instructions"]:
            if i["op"] == "forward" and i.get("step") == 1:
                a = Action.from_json(i)
                encoded[a.key] = r["rank"]
    return {key: rank for key, rank in encoded.items() if (key[0] + 1,) + key[1:] not in encoded}


class _Step:
    """What one step holds between its actions."""

    def __init__(self, batch, next_batch, actions):
        self.batch, self.next_batch = batch, next_batch
        self.acts, self.grads, self.kept = {}, {}, {}
        self.losses, self.sends, self.pending, self.reducing, self.ahead = [], [], [], [], {}
        self.behind = {a.key for a in actions if a.op.is_backward}
        self.readers = _activation_readers(actions)
        self.index = 0


def _activation_readers(actions):
    """How many of the step's actions read each activation: the next stage's forward, a send,
    a backward recomputing away from its forward (it reads the previous stage's output)."""
    here = {a.key for a in actions if a.op is Op.FORWARD}
    readers = {}
    for a in actions:
        key = None
        if a.op is Op.SEND and a.dir is Dir.ACT:
            key = a.key
        elif (a.op is Op.FORWARD and not a.ahead) or (a.op is Op.BACKWARD and a.key not in here):
            key = a.input_key
        if key is not None:
            readers[key] = readers.get(key, 0) + 1
    return readers


def _checked_scaler(scaler):
    """torch's own GradScaler decides overflows per process, which would skip the optimizer
    step on some stages only: refused for the job-wide one."""
    if isinstance(scaler, torch.amp.GradScaler):
        raise TypeError("torch.amp.GradScaler skips steps per process, so stages would drift apart; "
                        "use mpipec.torch.amp.GradScaler, which decides for every process of the job")
    return scaler


def _batches(source, device):
    """Microbatch index -> its batch dict on `device`, moved on first use."""
    if source is None:
        return None
    cache = {}
    get = source if callable(source) else source.__getitem__

    def batch(mb):
        if mb not in cache:
            cache[mb] = batch_to(get(mb), device)
        return cache[mb]

    return batch


class Executor:
    """Runs pipeline rank `rank`'s instructions of `plan` (a path, a plan.json dict or an
    ``mpipec.Plan``) over `modules` ({stage id: nn.Module} or a list in stage order).

    groups: ``devices.groups(plan)`` (made here when None); device: where batches go (the
    modules' device is the caller's); images(batch, lo, hi): the part of a batch an encoder
    part encodes, for plans that split encodes by images; autocast: a dtype (torch.bfloat16,
    torch.float16) to run forwards under ``torch.autocast``; scaler: an ``amp.GradScaler`` whose
    scale multiplies each microbatch's loss before its backward (fp16); on_optimizer_step(losses): called
    where the plan places the optimizer step; on_action(step, index, action): called before
    each action (progress reports); layer_shapes(layer): {parameter name: shape} of one of the
    plan's global layers, as the stage modules name them (mpipec.torch.checks): given, every
    stage module must hold exactly its layers' parameters; synchronize(): waits for the device
    before each action's time is taken (``timings`` then hold a GPU's work, not its launches).
    Raises PlanError before any step when the plan does not fit the job or the modules.
    """

    def __init__(self, plan, rank, modules, loss_fn, groups=None, *, device=None, images=None, autocast=None,
                 scaler=None, on_optimizer_step=None, on_action=None, layer_shapes=None, synchronize=None):
        from . import devices

        self.plan = load_plan(plan)
        self.groups = groups if groups is not None else devices.groups(self.plan)
        self.rank = self.groups.pp_rank if rank is None else rank
        if self.rank != self.groups.pp_rank:
            raise PlanError(f"rank {rank} was given, but this process is pipeline rank {self.groups.pp_rank} of the plan")
        ids = stage_ids(self.plan, self.rank)
        self.modules = dict(zip(ids, modules)) if isinstance(modules, (list, tuple)) else dict(modules)
        self.loss_fn, self.images, self.autocast = loss_fn, images, autocast
        self.scaler = _checked_scaler(scaler)
        self.on_optimizer_step, self.on_action = on_optimizer_step, on_action
        self.synchronize = synchronize
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.m = self.plan["pipeline"]["microbatches"]
        self.last_stage = len(self.plan["stages"]) - 1
        self.region_of = {s["id"]: s["region"] for s in self.plan["stages"]}
        check_modules(self.plan, self.rank, self.modules, self.groups, layer_shapes)
        self.mailbox = {}
        # On gloo each peer's messages of a step are received by a thread of their own as they
        # come (an Inbox): gloo moves a tensor only once its receive is posted, so a receive
        # posted when the instruction runs would wait for the sender's side to be scheduled
        # again. NCCL runs a pair's sends and receives on one stream: a receive posted ahead
        # would hold back this rank's sends to that peer.
        self.inboxes_on = wire.inline_here()
        # The static plan's lists, and an adaptive plan's per-batch ones as steps bring them.
        self.lists = _Lists(self.plan, self.rank, self.groups.globals)
        self.known = collections.OrderedDict()
        self.inboxes = {}
        # Lookahead: features encoded during a step (or the prologue) for the step after it;
        # None until the prologue has run (or after a step that had no next batch to encode).
        self.carried = None
        # Where each carried feature was encoded: the lists of the step that encoded it.
        self.carried_by = None
        # Per step: the carried features moved to where that step's plan sends them from.
        self.handed_over = []
        # (stage, mb) -> (images, tokens) of each part a gathered input was made of.
        self.slices = {}
        # Per step: the seconds each action took, in list order, and the seconds of this
        # thread's CPU it took (what it needs of a core, whoever else runs on the host).
        self.timings = []
        self.cpu_timings = []
        self.steps = 0
        self._run = {
            Op.FORWARD: self._forward, Op.BACKWARD: self._backward, Op.BACKWARD_INPUT: self._backward,
            Op.BACKWARD_WEIGHT: self._backward, Op.SEND: self._send, Op.RECV: self._recv,
            Op.ALL_REDUCE: self._all_reduce, Op.OPTIMIZER_STEP: self._optimizer_step,
        }

    # ---- the public surface -------------------------------------------------------------------

    def step(self, microbatches, next_microbatches=None, plan=None):
        """Runs this rank's instructions once over `microbatches` (this replica's M batch dicts,
        a sequence or a function of the microbatch index); returns the losses of the
        microbatches whose last stage this rank runs (each unscaled, detached), else [].
        A lookahead plan's encoder also encodes `next_microbatches`, the next step's; without
        them the next step encodes its own first. `plan`: this step's own plan (an adaptive
        plan's per-batch plan.json, or a mpipec.torch.plans.StepPlan, whose lists `decode`
        may have made off the critical path), the same on every rank; None: the plan the
        executor was made with."""
        batch, next_batch = _batches(microbatches, self.device), _batches(next_microbatches, self.device)
        self.lists = lists = self._lists_of(plan)
        st = _Step(batch, next_batch, lists.actions)
        if self.carried is None:
            self.carried, self.carried_by = self._encode_ahead_all(lists.prologue, batch), lists
        self.handed_over.append(self._hand_over(st))
        if self.inboxes_on:
            self.inboxes = {peer: Inbox(peer, n, self.device) for peer, n in lists.expected.items()}
        st.acts = dict(self.carried)
        durations, cpu = [], []
        self.timings.append(durations)
        self.cpu_timings.append(cpu)
        for k, a in enumerate(lists.actions):
            started, cpu_started = time.perf_counter(), time.thread_time()
            st.index = k
            try:
                if self.on_action is not None:
                    self.on_action(self.steps, k, a)
                self._run[a.op](a, st)
            except Exception as e:
                raise RuntimeError(f"rank {self.rank}, instruction {k} ({a}): {e}") from e
            if self.synchronize is not None:
                self.synchronize()
            durations.append(time.perf_counter() - started)
            cpu.append(time.thread_time() - cpu_started)
        self._flush(st)
        for inbox in self.inboxes.values():
            inbox.join()
        self.inboxes = {}
        self._wait_reductions(st)
        for works, _ in st.pending:
            for work in works:
                work.wait()
        self.carried = st.ahead if next_batch is not None or not lists.prologue else None
        self.carried_by = lists
        self.steps += 1
        return st.losses

    @property
    def actions(self):
        """The actions this rank ran last (or runs next, before the first step)."""
        return self.lists.actions

    def decode(self, plan):
        """This rank's lists of `plan`, for ``step(plan=...)``; touches nothing of the
        executor's, so a thread may make them while a step runs (mpipec.torch.plans does)."""
        return _Lists(plan, self.rank, self.groups.globals)

    def _lists_of(self, plan):
        """This rank's lists of `plan` (None: the executor's own; a StepPlan: its plan, with the
        lists `decode` made of it), kept for the last few plans."""
        decoded = getattr(plan, "lists", None)
        plan = getattr(plan, "plan", plan)
        if plan is None:
            plan = self.plan
        known = self.known.get(id(plan))
        if known is not None and known[0] is plan:
            self.known.move_to_end(id(plan))
            return known[1]
        if plan is not self.plan and (plan["stages"] != self.plan["stages"] or plan["rank_map"] != self.plan["rank_map"]):
            raise PlanError("a step's plan has other stages or ranks than the plan the executor was made with")
        if decoded is not None and decoded.plan is plan and decoded.rank == self.rank:
            lists = decoded
        elif plan is self.lists.plan:
            lists = self.lists
        else:
            lists = self.decode(plan)
        # The plan is held beside its lists, so its id is not reused while it is here.
        self.known[id(plan)] = (plan, lists)
        while len(self.known) > KEEP_LISTS:
            self.known.popitem(last=False)
        return lists

    def _hand_over(self, st):
        """Lookahead features wait where the step that encoded them placed their encode; a step
        whose plan sends them from another rank (a per-batch plan with other owners) gets them
        there first: each holder sends, each new holder receives, in one order every rank
        derives from the two plans. Returns how many features moved."""
        if not self.carried or self.carried_by is self.lists:
            return 0
        before, after = self.carried_by.holders, self.lists.holders
        moves = sorted((key, before[key], after[key]) for key in before if key in after and before[key] != after[key])
        for key, src, _ in moves:
            if src == self.rank:
                t = self.carried.pop(key).detach().contiguous()
                peer = self.groups.globals[after[key]]
                st.sends += wire.sends(Dir.ACT, key[0], key[1], t, peer, self.inboxes_on)
        self._flush(st)
        for key, src, dst in moves:
            if dst == self.rank:
                _, self.carried[key] = wire.receive(self.groups.globals[src], self.device, self.inboxes_on)
        self.carried_by = self.lists
        return len(moves)

    def parameters(self, counted=False):
        """The trainable parameters of this rank's stages; `counted`: only those this process
        counts in a global sum (a replicated stage's on pipeline rank 0, each on dp replica 0)."""
        for s, module in sorted(self.modules.items()):
            if counted and (self.groups.dp_rank != 0 or (replicated(self.plan, s) and self.rank != 0)):
                continue
            yield from (p for p in module.parameters() if p.requires_grad)

    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        """Scales every gradient so that the global norm, over every pipeline and data-parallel
        rank with replicated parameters counted once, is at most `max_norm`; returns that norm."""
        from .clip import clip_grad_norm_

        return clip_grad_norm_(self, max_norm, norm_type)

    # ---- one method per op ----------------------------------------------------------------------

    def _call(self, s, x, batch):
        context = torch.autocast(self.device.type, dtype=self.autocast) if self.autocast else contextlib.nullcontext()
        with context:
            return self.modules[s](x, batch)

    def _encode_ahead(self, a, into, batch):
        """A lookahead encoder forward: no backward follows, its output waits for the next step."""
        with torch.no_grad():
            into[(a.stage, a.mb)] = self._call(a.stage, into.pop((a.stage - 1, a.mb), None), batch(a.mb))

    def _encode_ahead_all(self, actions, batch):
        into = {}
        for a in actions:
            self._encode_ahead(a, into, batch)
        return into

    def _part(self, a, batch):
        """An encoder part's batch: only its images."""
        if not a.images:
            return batch
        if self.images is None:
            raise PlanError("the plan splits encodes by images; give the executor `images=` (batch, lo, hi) -> batch")
        return self.images(batch, *a.images)

    def _run_forward(self, a, st):
        """A stage's forward on its input (none on the model's first stage): (input, output),
        the output the scaled loss on the last stage."""
        if a.images:
            x = self._read(st, a.input_key)
        else:
            x = self._gather(st, a.stage, a.mb)
        if x is not None:
            x = x.detach().requires_grad_(True)
        out = self._call(a.stage, x, self._part(a, st.batch(a.mb)))
        if a.stage == self.last_stage:
            loss = self.loss_fn(out, st.batch(a.mb))
            st.losses.append(loss.detach())
            out = (loss if self.scaler is None else self.scaler.scale(loss)) / self.m
        return x, out

    def _forward(self, a, st):
        if a.ahead:
            if st.next_batch is not None:
                self._encode_ahead(a, st.ahead, st.next_batch)
            return
        # Where the backward runs on another rank, nothing here needs the graph.
        with torch.set_grad_enabled(a.key in st.behind):
            x, out = self._run_forward(a, st)
        if a.key in st.behind:
            st.kept[a.key] = (x, out)
        if a.stage != self.last_stage:
            st.acts[a.key] = out

    def _backward(self, a, st):
        if a.key not in st.kept:
            # Away from its forward (an encoder chunk that recomputes): the forward again from
            # the chunk's input, received or the data itself.
            st.kept[a.key] = self._run_forward(a, st)
        x, out = st.kept[a.key]
        if a.op is Op.BACKWARD_WEIGHT:
            g = st.kept.pop(("g",) + a.key)
            trainable = [p for p in self.modules[a.stage].parameters() if p.requires_grad]
            if trainable:
                torch.autograd.backward(out, g, inputs=trainable)
            del st.kept[a.key]
            return
        g = None if a.stage == self.last_stage else st.grads.pop((a.stage + 1, a.mb) + a.images)
        if a.op is Op.BACKWARD:
            torch.autograd.backward(out, g)
            del st.kept[a.key]
        else:
            st.kept[("g",) + a.key] = g
            if x is not None and x.requires_grad:
                torch.autograd.backward(out, g, inputs=[x], retain_graph=True)
        if x is not None and x.grad is not None:
            st.grads[a.key] = x.grad
            if (a.stage, a.mb) in self.slices:
                self._scatter(st, a.stage, a.mb, st.grads.pop((a.stage, a.mb)))

    def _send(self, a, st):
        t = (self._read(st, a.key) if a.dir is Dir.ACT else st.grads.pop(a.key)).detach().contiguous()
        peer = self.groups.globals[a.peer]
        st.sends += wire.sends(a.dir, a.stage, a.mb, t, peer, self.inboxes_on)
        # A run of sends goes out as one batch (one NCCL group call).
        actions = self.lists.actions
        following = actions[st.index + 1] if st.index + 1 < len(actions) else None
        if following is None or following.op is not Op.SEND:
            self._flush(st)

    def _flush(self, st):
        if st.sends:
            # The ops keep their tensors alive until the works are waited on.
            st.pending.append((dist.batch_isend_irecv(st.sends), st.sends))
            st.sends = []

    def _recv(self, a, st):
        t = self._receive(self.groups.globals[a.peer], (a.dir, a.stage, a.mb))
        (st.acts if a.dir is Dir.ACT else st.grads)[a.key] = t

    def _receive(self, peer, key):
        """The message `key` from `peer`. Messages between two ranks arrive in the order they
        were sent, which need not be the order this rank wants them: earlier arrivals wait in
        a mailbox."""
        box = self.mailbox.setdefault(peer, {})
        while key not in box:
            got, t = self.inboxes[peer].next() if peer in self.inboxes else wire.receive(peer, self.device, self.inboxes_on)
            box[got] = t
        return box.pop(key)

    def _all_reduce(self, a, st):
        if not a.asynchronous:
            # What reads reduced gradients waits for the buckets still in flight.
            self._wait_reductions(st)
        if a.stage is not None:
            params = [p for p in self.modules[a.stage].parameters() if p.requires_grad]
        else:
            params = [p for s, m in sorted(self.modules.items()) if a.region in (None, self.region_of[s])
                      for p in m.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if a.asynchronous:
            st.reducing += [_Bucket(grads, self.groups.pp, async_op=True) for grads in _buckets(params)]
        elif a.group is Group.PP:
            for grads in _buckets(params):
                _Bucket(grads, self.groups.pp).wait()
        elif self.groups.dp is not None:
            for grads in _buckets(params):
                _Bucket(grads, self.groups.dp, divide=self.groups.dp_size).wait()

    def _wait_reductions(self, st):
        for bucket in st.reducing:
            bucket.wait()
        st.reducing = []

    def _optimizer_step(self, a, st):
        self._wait_reductions(st)
        if self.on_optimizer_step is not None:
            self.on_optimizer_step(st.losses)

    # ---- activations --------------------------------------------------------------------------

    @staticmethod
    def _read(st, key):
        """An activation for one of its readers: it leaves `acts` with the last."""
        st.readers[key] = st.readers.get(key, 0) - 1
        return st.acts.pop(key, None) if st.readers[key] <= 0 else st.acts.get(key)

    def _gather(self, st, s, mb):
        """The first body stage's input when parts of the encode made it: the parts in image
        order, concatenated along the tokens; where each part sits is kept for its gradient."""
        keys = sorted(k for k in st.acts if len(k) == 4 and k[:2] == (s - 1, mb))
        if not keys:
            return self._read(st, (s - 1, mb))
        parts = [st.acts.pop(k) for k in keys]
        self.slices[(s, mb)] = [(k[2:], p.shape[1]) for k, p in zip(keys, parts)]
        return torch.cat(parts, dim=1)

    def _scatter(self, st, s, mb, g):
        """The gradient of a gathered input back into one slice per part."""
        at = 0
        for images, size in self.slices.pop((s, mb)):
            st.grads[(s, mb) + images] = g[:, at : at + size]
            at += size


# The most bytes of gradients one all-reduce carries (DDP's default bucket): flattening costs a
# copy of what it carries. src/cost/profile.rs counts the calls with the same size.
BUCKET_BYTES = 25 * 2**20


def _buckets(params):
    """The parameters' gradients in lists of one dtype and device and at most BUCKET_BYTES
    (or one gradient), each reduced as one tensor."""
    out, filling = [], {}
    for p in params:
        g = p.grad
        key, size = (g.dtype, g.device), g.numel() * g.element_size()
        if key not in filling or filling[key][1] + size > BUCKET_BYTES:
            out.append([])
            filling[key] = [out[-1], 0]
        filling[key][0].append(g)
        filling[key][1] += size
    return out


class _Bucket:
    """One all-reduce of many gradients, flattened into one tensor: a collective costs its
    latency once per call, which over hundreds of small gradients (a stage's norms and biases)
    is most of the reduction; Megatron and DDP bucket their gradients for the same reason.
    `wait` copies the sums back into the gradients, divided by `divide`."""

    def __init__(self, grads, group, async_op=False, divide=1):
        self.grads, self.divide = grads, divide
        self.flat = torch._utils._flatten_dense_tensors(grads)
        self.work = dist.all_reduce(self.flat, group=group, async_op=async_op)

    def wait(self):
        if self.work is not None:
            self.work.wait()
        if self.divide != 1:
            self.flat /= self.divide
        for g, reduced in zip(self.grads, torch._utils._unflatten_dense_tensors(self.flat, self.grads)):
            g.copy_(reduced)


class Inbox:
    """One step's messages from one gloo peer, received on a thread as they come: the next
    message's receive is always posted (a small tensor comes inside it, `wire`), a larger
    tensor's receive at once once its header is in. gloo moves a message only once its receive
    is posted; posted here, it moves while this rank computes, and the instruction that needs
    it finds it there."""

    def __init__(self, peer, count, device):
        self.arrived = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, args=(peer, count, device), daemon=True)
        self.thread.start()

    def _run(self, peer, count, device):
        try:
            buf = wire.incoming(device, True)
            work = dist.irecv(buf, peer)
            for k in range(count):
                work.wait()
                key, t, rest = wire.decode(buf)
                data = dist.irecv(t, peer) if rest else None
                if k + 1 < count:
                    buf = wire.incoming(device, True)
                    work = dist.irecv(buf, peer)
                if data is not None:
                    data.wait()
                self.arrived.put((key, t))
        except Exception as e:  # the step raises it where it waits for the message
            self.arrived.put(e)

    def next(self):
        """The next message (key, tensor), waiting for it."""
        got = self.arrived.get()
        if isinstance(got, Exception):
            raise got
        return got

    def join(self):
        self.thread.join()
