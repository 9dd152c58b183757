"""The interval between a CPU host's balancings of its cores (mpipec.torch.scheduler), measured
on this machine: a number where two cores can be used, none on one.

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


if __name__ == "__main__":
    unittest.main()
