"""How a CPU host's scheduler shares its cores (mpipec.torch.scheduler), measured on this machine:
the interval between its balancings, a number where two cores can be used, none on one; and the
time slice two processes on one core take turns at.

    python -m unittest discover -s tests/python -p test_scheduler.py
"""

import os
import unittest

from mpipec.torch import scheduler


@unittest.skipUnless(hasattr(os, "sched_getaffinity"), "core affinity is Linux's")
class Interval(unittest.TestCase):
    def test_an_interval_on_two_cores(self):
        cores = sorted(os.sched_getaffinity(0))
        self.assertGreaterEqual(len(cores), 2, "the test machines have two cores or more")
        interval = scheduler.balance_interval(trials=4)
        # Each trial waits at most its window for a move, so the mean is under it.
        self.assertIsNotNone(interval)
        self.assertTrue(0.0 <= interval <= 2 * scheduler.WINDOW_S, interval)
        self.assertEqual(sorted(os.sched_getaffinity(0)), cores, "the process's cores are given back")

    def test_none_on_one_core(self):
        cores = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(cores)})
        try:
            self.assertIsNone(scheduler.balance_interval(trials=1))
        finally:
            os.sched_setaffinity(0, cores)


@unittest.skipUnless(hasattr(os, "sched_getaffinity"), "core affinity is Linux's")
class Slice(unittest.TestCase):
    def test_two_processes_on_one_core_take_turns_of_a_slice(self):
        cores = sorted(os.sched_getaffinity(0))
        turn = scheduler.slice_length(window=0.3)
        # A turn is longer than the gap that ends it and no longer than the window; Linux's
        # slices are milliseconds (EEVDF's base slice, 0.75 ms times a factor of the cores).
        self.assertIsNotNone(turn)
        self.assertTrue(scheduler.TURN_GAP_S < turn < 0.3, turn)
        self.assertEqual(sorted(os.sched_getaffinity(0)), cores, "this process's cores are untouched")


if __name__ == "__main__":
    unittest.main()
