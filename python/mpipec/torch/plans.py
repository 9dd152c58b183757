"""Per-batch plans of an ``owner adaptive`` plan, derived one step ahead.

An adaptive plan runs, each step, the plan its batch's image sizes call for: the compiler
places the encoder's work again from the batch's per-microbatch image tokens (or keeps the
static plan where that is not faster, does not fit, or nothing moves). :class:`Plans` keeps one
``mpipec adapt PLAN`` process beside this one (the plan is read, checked and built once; each
request is a line) and asks it, on a background thread, for the next step's plan while the
current step runs (:class:`OneStepAhead` is that loop's part)::

    plans = Plans(command, static_plan)
    plans.prepare(tokens(0))                     # while the stage modules are built
    ex = Executor(static_plan, ...)
    plans.decode = ex.decode                     # each rank's lists made in the background too
    for step in range(steps):
        this = plans.get(tokens(step))           # ready: derived while the last step ran
        if step + 1 < steps:
            plans.prepare(tokens(step + 1))      # the loader knows the next batch's sizes
        ex.step(batch(step), plan=this)

Every process derives its own plans: the compiler's output is a function of the plan and the
tokens alone (byte for byte), so every rank runs the same lists without a message between them.
Answers are kept by their token vector (least recently used first out), so a repeated batch
shape costs nothing. ``get`` measures how long it waited; a step that waits is one whose plan was
not derived while the previous step ran.
"""

import collections
import concurrent.futures
import hashlib
import json
import os
import subprocess
import time
from dataclasses import dataclass

from .actions import PlanError


@dataclass(frozen=True)
class StepPlan:
    """The plan one batch runs: ``plan`` (the static plan.json's dict, or the batch's own),
    ``runs`` (``adaptive`` or ``static``), ``fallback`` (why the static plan runs, or None),
    ``digest`` (of the lists that run: equal on every rank), the simulated steps of both, the
    seconds deriving it took (in the background), and ``lists``: this rank's share decoded
    (``Executor.decode``) in the background too, when the Plans was given ``decode``."""

    plan: dict
    runs: str
    fallback: str
    digest: str
    static_s: float
    adaptive_s: float
    derive_s: float
    lists: object = None


def batch_tokens(image_tokens, step, microbatches, dp):
    """One step's image tokens per microbatch index for the plan, given `image_tokens(mb,
    step)` of each microbatch of the data (replica d's j-th is mb = d * M + j): every replica
    runs the same plan, so microbatch j counts as the largest of the replicas' j-th."""
    return [max(image_tokens(d * microbatches + j, step) for d in range(dp)) for j in range(microbatches)]


class Plans:
    """One ``mpipec adapt`` process and its answers, by token vector (at most `keep`).
    ``decode`` (set it to ``Executor.decode`` once the executor exists): each answer's lists
    for this rank are made on the background thread too, so a step starts on them at once."""

    def __init__(self, command, static_plan, keep=256):
        self.decode = None
        self.static = static_plan
        self.static_digest = hashlib.sha256(json.dumps(static_plan["ranks"], sort_keys=True).encode()).hexdigest()
        self.keep = keep
        self.command = _find_binary(command)
        try:
            self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        except OSError as e:
            raise PlanError(f"cannot start `{' '.join(self.command)}` for the plan's per-batch plans: {e}") from None
        # One thread asks, so requests and answers pair up in order on the pipe.
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="mpipec-plans")
        self.ready = self.pool.submit(self._read_line)
        self.cache = collections.OrderedDict()
        self.waits = []
        self.derives = []

    def prepare(self, tokens):
        """Starts deriving the plan of a batch with these image tokens per microbatch, unless it
        is known or under way; returns at once."""
        key = tuple(int(t) for t in tokens)
        if key in self.cache:
            self.cache.move_to_end(key)
            return
        self.cache[key] = self.pool.submit(self._derive, key)
        while len(self.cache) > self.keep:
            self.cache.popitem(last=False)

    def get(self, tokens):
        """The plan of a batch with these image tokens per microbatch (a :class:`StepPlan`);
        waits for its derivation if it is still running (the wait is recorded in ``waits``)."""
        key = tuple(int(t) for t in tokens)
        self.prepare(key)
        started = time.perf_counter()
        answer = self.cache[key].result()
        self.waits.append(time.perf_counter() - started)
        return answer

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait()
        self.pool.shutdown(wait=False)

    def _read_line(self):
        line = self.proc.stdout.readline()
        if not line:
            status = self.proc.wait()
            raise PlanError(f"`{' '.join(self.command)}` ended (exit status {status}) without a plan; its errors are above")
        return json.loads(line)

    def _derive(self, key):
        self.ready.result()
        started = time.perf_counter()
        self.proc.stdin.write(json.dumps(list(key)) + "\n")
        self.proc.stdin.flush()
        answer = self._read_line()
        seconds = time.perf_counter() - started
        self.derives.append(seconds)
        if "error" in answer:
            raise PlanError(f"per-batch plan for image tokens {list(key)}: {answer['error']}")
        plan = answer["plan"]
        if plan is None:
            plan, digest = self.static, self.static_digest
        else:
            digest = hashlib.sha256(json.dumps(plan["ranks"], sort_keys=True).encode()).hexdigest()
            if plan["stages"] != self.static["stages"] or plan["rank_map"] != self.static["rank_map"]:
                raise PlanError(f"the per-batch plan for image tokens {list(key)} has other stages than the plan this job was built for")
        lists = self.decode(plan) if self.decode is not None else None
        return StepPlan(plan, answer["runs"], answer["fallback"], digest, answer["static_s"], answer["adaptive_s"], seconds, lists)


class OneStepAhead:
    """A training loop's per-batch plans: `tokens(step)` gives a step's image tokens per
    microbatch (the loader's knowledge of the batch); the plan of step `first` starts deriving
    at once (while the stages are built), each next one while the step before runs."""

    def __init__(self, command, static_plan, tokens, first=0):
        self.plans = Plans(command, static_plan)
        self.tokens, self.ran = tokens, []
        if first is not None:
            self.plans.prepare(tokens(first))

    def attach(self, ex):
        """Later plans come with `ex`'s lists of them, decoded in the background."""
        self.plans.decode = ex.decode

    def plan(self, step, more):
        """Step `step`'s StepPlan; starts deriving the next step's when `more`."""
        self.ran.append(self.plans.get(self.tokens(step)))
        if more:
            self.plans.prepare(self.tokens(step + 1))
        return self.ran[-1]

    @property
    def digests(self):
        return [p.digest for p in self.ran]

    def close(self):
        """Stops the deriving process; returns the run's summary line."""
        self.plans.close()
        return summary(self.ran, self.plans.waits, self.plans.derives)


def summary(steps, waits, derives):
    """One line on a run's per-batch plans: `steps` the StepPlans run, `waits` the seconds each
    step waited for its plan (the first step's plan is derived before the run: it is left out),
    `derives` the seconds each derivation took."""
    ms = lambda s: f"{1e3 * s:.2f} ms"
    adaptive = sum(p.runs == "adaptive" for p in steps)
    median = sorted(derives)[len(derives) // 2] if derives else 0.0
    later = waits[1:]
    return (
        f"per-batch plans: {len(steps)} steps, {adaptive} on their own plan, {len({p.digest for p in steps})} distinct; "
        f"deriving one took {ms(median)} (median of {len(derives)}, in the background); "
        f"steps after the first waited {ms(sum(later))} in all (longest {ms(max(later, default=0.0))})"
    )


def _find_binary(command):
    """The command with a binary that exists here: the one that prepared the run, else the
    ``mpipec`` this Python finds (mpipec._binary.find: the wheel's, $MPIPEC_BINARY, PATH)."""
    if os.access(command[0], os.X_OK):
        return list(command)
    from .._binary import find

    return [find()] + list(command[1:])
