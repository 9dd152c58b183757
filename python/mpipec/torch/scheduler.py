"""How a CPU host's scheduler shares its cores, as a profile records it (docs/costs.md): how long
it leaves one of its cores idle while another holds two processes that could run
(`device.balance_s`), and the time slice two processes on one core take turns at
(`device.slice_s`).

Where a pipeline's ranks are more processes than the host has cores, a rank that wakes from a
wait while the cores are busy is put behind a process on its own core or its waker's, and
there it stays when another core goes idle a moment later: the idle core does not pull a
process that has just run, and takes one only at the scheduler's next balancing (Linux's
periodic load balance). The simulator shares a host's cores that way (src/ir/interpret/host.rs)
and needs the interval between balancings.

One trial: two processes spinning on core b, the measuring process on core a. The two are let
run on either core, then the measuring process blocks, leaving core a idle; each spinner records
when it first runs on a core other than b. The trials' block times step through a balancing
interval's phases; the interval reported is twice the mean delay, the interval whose
balancings at a random phase keep a core waiting as long on average (the delays themselves are
not uniform: on the 2-core VM about a third came within 0.1 ms and most of the rest after
6 to 12 ms). Linux only (core affinity, `sched_getcpu`); no
answer elsewhere or on one core.

The time slice (`device.slice_s`): two processes pinned to one core, each doing a few
microseconds of work between system calls (`time.thread_time()`, as the runtime calls between
instructions) and noting each gap in its own progress; a gap is the other's turn. The kernel
switches a process whose slice has run out at its next system call (else only at the timer
tick: on the 2-core VM turns of 1.40 ms with the calls, 3.98 ms without), so where the
pipeline's ranks share a core they hand it over at their instruction boundaries, a slice at a
time. The slice reported is the median turn of the two.

    python -m mpipec.torch.scheduler    prints the interval and the slice in milliseconds
"""

import ctypes
import os
import struct
import sys
import time

TRIALS = 24
# Long enough to see a move after any balancing interval Linux uses on a small host.
WINDOW_S = 0.05
SETTLE_S = 0.02
# The block times step through this span, a balancing interval or more.
PHASES_S = 0.016


def _spin_until(t):
    while time.perf_counter() < t:
        pass


def _spinner(getcpu, cores, start, move_at, out):
    """Spin on core b until `start`, then anywhere until the window ends; write when this
    process first ran elsewhere (or nothing, as -1)."""
    a, b = cores
    os.sched_setaffinity(0, {b})
    _spin_until(start)
    os.sched_setaffinity(0, {a, b})
    moved, end = -1.0, time.perf_counter() + WINDOW_S + move_at
    while time.perf_counter() < end:
        if getcpu() != b:
            moved = time.perf_counter()
            break
    os.write(out, struct.pack("d", moved))
    os._exit(0)


def _forked(work, meanwhile=lambda: None):
    """The numbers two forked processes running `work(out)` (which ends with `os._exit`) wrote
    to the pipe `out`, once both have exited; this process runs `meanwhile`, then blocks until
    they are done."""
    read, write = os.pipe()
    children = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            os.close(read)
            work(write)
        children.append(pid)
    os.close(write)
    data = b""
    try:
        meanwhile()
    finally:
        while chunk := os.read(read, 1 << 16):
            data += chunk
        os.close(read)
        for pid in children:
            os.waitpid(pid, 0)
    return [x for (x,) in struct.iter_unpack("d", data)]


def _trial(getcpu, cores, phase):
    """Seconds from core a's going idle until a process waiting on core b ran there."""
    start = time.perf_counter() + SETTLE_S
    block = start + SETTLE_S + phase
    mine, idle_from = os.sched_getaffinity(0), []

    def until_block():
        os.sched_setaffinity(0, {cores[0]})
        _spin_until(block)
        idle_from.append(time.perf_counter())

    try:
        moves = _forked(lambda out: _spinner(getcpu, cores, start, block - start, out), until_block)
    finally:
        os.sched_setaffinity(0, mine)
    seen = [t for t in moves if t >= 0]
    return max(0.0, min(seen) - idle_from[0]) if seen else WINDOW_S


def balance_interval(trials=TRIALS):
    """Seconds between the host's balancings of its cores, or None where it cannot be measured
    (not Linux, fewer than two cores)."""
    try:
        cores = sorted(os.sched_getaffinity(0))[:2]
        getcpu = ctypes.CDLL(None, use_errno=True).sched_getcpu
    except (AttributeError, OSError):
        return None
    if len(cores) < 2:
        return None
    delays = [_trial(getcpu, cores, PHASES_S * i / trials) for i in range(trials)]
    return 2.0 * sum(delays) / len(delays)


SLICE_WINDOW_S = 1.0
# Longer than a work unit and its system call, shorter than any slice.
TURN_GAP_S = 100e-6


def _turns(core, until, out):
    """Work in small units between system calls on `core` until `until`; write the length of
    each whole turn this process had (the first and the last are cut by the window)."""
    os.sched_setaffinity(0, {core})
    turns, last = [], time.perf_counter()
    began = last
    while last < until:
        time.thread_time()
        sum(range(100))
        now = time.perf_counter()
        if now - last > TURN_GAP_S:
            turns.append(last - began)
            began = now
        last = now
    for t in turns[1:]:
        os.write(out, struct.pack("d", t))
    os._exit(0)


def slice_length(window=SLICE_WINDOW_S):
    """Seconds a process runs before the kernel switches to another on its core, or None where
    it cannot be measured (not Linux)."""
    try:
        core = sorted(os.sched_getaffinity(0))[0]
    except AttributeError:
        return None
    until = time.perf_counter() + window
    turns = sorted(_forked(lambda out: _turns(core, until, out)))
    return turns[len(turns) // 2] if turns else None


if __name__ == "__main__":
    interval, turn = balance_interval(), slice_length()
    if interval is None and turn is None:
        sys.exit("no scheduler to measure here: it needs Linux")
    print(f"balancing interval: {'-' if interval is None else f'{interval * 1e3:.1f} ms'}")
    print(f"slice: {'-' if turn is None else f'{turn * 1e3:.2f} ms'}")
