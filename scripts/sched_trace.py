"""The two halves of scripts/sched-trace: `run DIR OUT` runs a prepared `mpipec verify` run
(`--run DIR --profile`) with each instruction's start and end stamped on the host's monotonic
clock into OUT/stamps-PID-RANK.jsonl; `report OUT` sets those stamps against the scheduler's
events (OUT/sched.txt, `perf script` of a `perf sched record -k CLOCK_MONOTONIC`) and prints
where the ranks' main threads waited for a core (docs/costs.md quotes it)."""

import bisect
import collections
import glob
import json
import os
import re
import statistics
import sys
import time


def run(run_dir, out):
    """The verify harness with the executor's instructions and steps stamped; the ranks are
    forked from this process, so they inherit the patch. Each step's stamps are appended as
    it ends (forked ranks leave without running exit handlers)."""
    from mpipec.torch import executor, verify

    init, step = executor.Executor.__init__, executor.Executor.step
    stamps = []

    def stamped_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        for op, act in list(self._run.items()):
            def timed(a, st, act=act, op=op):
                began = time.perf_counter()
                act(a, st)
                stamps.append(("instruction", str(op), began, time.perf_counter()))
            self._run[op] = timed

    def stamped_step(self, *args, **kwargs):
        began = time.perf_counter()
        losses = step(self, *args, **kwargs)
        stamps.append(("step", "", began, time.perf_counter()))
        with open(os.path.join(out, f"stamps-{os.getpid()}-{self.rank}.jsonl"), "a") as f:
            f.write(json.dumps(stamps) + "\n")
        stamps.clear()
        return losses

    executor.Executor.__init__, executor.Executor.step = stamped_init, stamped_step
    return verify.main(["--run", run_dir, "--profile"])


EVENT = re.compile(r"\s*(.+?)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:(\w+):\s*(.*)")


def events(path):
    """(time, cpu, event, fields) of each scheduler event `perf script` printed."""
    with open(path) as f:
        for line in f:
            m = EVENT.match(line)
            if m:
                _, _, _, cpu, t, name, rest = m.groups()
                yield float(t), int(cpu), name, dict(re.findall(r"(\w+)=(\S+)", rest))


class Host:
    """Which thread each core runs, which threads wait to run and on which core, as the
    events say: a woken thread waits on the core it was woken for until it runs or moves."""

    def __init__(self):
        self.current, self.waiting, self.core_of = {}, set(), {}

    def apply(self, cpu, name, f):
        if name == "sched_switch":
            prev, nxt = f["prev_pid"], f["next_pid"]
            if prev != "0" and f["prev_state"].startswith("R"):
                self.waiting.add(prev)
                self.core_of[prev] = cpu
            self.waiting.discard(nxt)
            self.core_of[nxt] = cpu
            self.current[cpu] = nxt
        elif name in ("sched_waking", "sched_wakeup_new"):
            self.waiting.add(f["pid"])
            self.core_of[f["pid"]] = int(f["target_cpu"])
        elif name == "sched_migrate_task":
            self.core_of[f["pid"]] = int(f["dest_cpu"])

    def runnable_on(self, cpu, threads):
        # A thread woken while still on its core (about to sleep) runs; it does not also wait.
        waiting = (self.waiting & threads) - set(self.current.values())
        return (self.current.get(cpu) in threads) + sum(1 for t in waiting if self.core_of.get(t) == cpu)


def load_stamps(out):
    """Each rank's main thread (its pid) and its steps after the first, each a list of
    instructions (op, start, end) and the step's (start, end)."""
    ranks = {}
    for path in glob.glob(os.path.join(out, "stamps-*.jsonl")):
        pid = os.path.basename(path).split("-")[1]
        with open(path) as f:
            steps = [json.loads(line) for line in f][1:]
        ranks[pid] = [([(op, a, b) for kind, op, a, b in s if kind == "instruction"],
                       next((a, b) for kind, _, a, b in s if kind == "step")) for s in steps]
    return ranks


def scan(out, mains, start, end):
    """One pass over the scheduler's events: each main thread's states in time order
    (running, preempted, asleep), the seconds of [start, end] with each count of runnable main
    threads (and whether a core had none while another had two or more), and how long each
    core left without a main thread while another held two waited until one moved there."""
    host, cores, last = Host(), set(), None
    states = {p: [] for p in mains}
    occupancy, moves, idle_since = collections.Counter(), [], {}
    for t, cpu, name, f in events(os.path.join(out, "sched.txt")):
        cores.add(cpu)
        if last is not None and start <= t <= end:
            counts = [host.runnable_on(c, mains) for c in sorted(cores)]
            occupancy[(sum(counts), 0 in counts and max(counts) >= 2)] += t - max(last, start)
        last = t
        host.apply(cpu, name, f)
        if name == "sched_switch":
            for pid, state in ((f["prev_pid"], "preempted" if f["prev_state"].startswith("R") else "asleep"),
                               (f["next_pid"], "running")):
                if pid in states:
                    states[pid].append((t, state))
        counts = {c: host.runnable_on(c, mains) for c in cores}
        for c in cores:
            uneven = counts[c] == 0 and max(counts.values()) >= 2
            if uneven and c not in idle_since:
                idle_since[c] = t
            elif not uneven and c in idle_since:
                began = idle_since.pop(c)
                if name == "sched_migrate_task" and f["pid"] in mains and int(f["dest_cpu"]) == c:
                    moves.append(t - began)
    return states, occupancy, moves, cores


def report(out):
    ranks = load_stamps(out)
    start = min(st[0] for steps in ranks.values() for _, st in steps)
    end = max(st[1] for steps in ranks.values() for _, st in steps)
    states, occupancy, moves, cores = scan(out, set(ranks), start, end)
    print(f"{len(ranks)} ranks, {len(next(iter(ranks.values())))} steps after the first, {len(cores)} cores")
    for pid, steps in sorted(ranks.items()):
        print_gaps(pid, steps, states[pid])
    total = sum(occupancy.values())
    for (n, stacked), t in sorted(occupancy.items()):
        print(f"{n} main threads runnable{' (a core with none, another with two or more)' if stacked else ''}: "
              f"{100 * t / total:.1f} % of the time")
    if moves:
        q = statistics.quantiles(moves, n=4) if len(moves) > 1 else [moves[0]] * 3
        print(f"a main thread moved to a core left without one: {len(moves)} times, after "
              f"{ms(q[1])} at the median (quartiles {ms(q[0])} and {ms(q[2])})")


def print_gaps(pid, steps, states):
    """A rank's median step, time between its instructions a step, and how much of that its
    main thread was runnable and not running."""
    times = [t for t, _ in states]
    gaps, preempted = [], []
    for instructions, _ in steps:
        between = [(a, b) for (_, _, a), (_, b, _) in zip(instructions, instructions[1:])]
        gaps.append(sum(b - a for a, b in between))
        preempted.append(sum(state_time(states, times, a, b, "preempted") for a, b in between))
    print(f"main thread {pid}: step {ms(statistics.median(b - a for _, (a, b) in steps))}, "
          f"between instructions {ms(statistics.median(gaps))} a step, "
          f"of it runnable and not running {ms(statistics.median(preempted))}")


def state_time(states, times, a, b, wanted):
    """Seconds of [a, b] the thread spent in state `wanted`."""
    i = bisect.bisect_right(times, a) - 1
    state = states[i][1] if i >= 0 else None
    spent, t = 0.0, a
    for k in range(i + 1, len(states)):
        when, nxt = states[k]
        if when >= b:
            break
        if state == wanted:
            spent += when - t
        state, t = nxt, when
    return spent + (b - t if state == wanted else 0.0)


def ms(seconds):
    return f"{seconds * 1e3:.2f} ms"


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "run":
        sys.exit(run(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 3 and sys.argv[1] == "report":
        report(sys.argv[2])
        sys.exit(0)
    sys.exit(__doc__)
