"""What `mpipec profile` makes of its measurements (mpipec.torch.profile), on hand numbers: each
op's layer times scaled by that op's ratio of run to isolated time, and a message's flight as
the median delivery from its posting to the waiting rank. And the deliveries themselves, timed
between two gloo processes.

    python -m unittest discover -s tests/python -p test_profile.py
"""

import unittest
from unittest import mock

import torch

import pair
from mpipec.torch import host_speed, profile

# Two stages of two layers on two ranks: a forward and a fused backward each.
PLAN = {
    "stages": [{"layers": [0, 2]}, {"layers": [2, 4]}],
    "pipeline": {"images": 1},
    "ranks": [{"instructions": [{"op": "forward", "stage": s}, {"op": "send", "stage": s},
                                {"op": "backward", "stage": s}]} for s in (0, 1)],
}
KINDS = ["a", "a", "a", "a"]


def layers():
    return {"a": {"forward_s": 1.0, "backward_s": 2.0, "backward_input_s": 1.0, "backward_weight_s": 1.0}}


def ranks(forward, backward):
    """Each rank's steps: a slow warm-up step, then the step `steady` takes (the only one after it)."""
    step = [forward, 0.5, backward]
    return [{"rank": r, "dp_rank": 0, "step_seconds": [99.0, 9.0], "timings": [[9.0, 9.0, 9.0], step]}
            for r in (0, 1)]


class Calibrate(unittest.TestCase):
    def test_each_op_scales_by_its_own_ratio(self):
        # A stage's forward is 2 layers of 1 s alone and took 3 s in the run: 1.5; its fused
        # backward, 2 × 2 s alone, took 4 s: 1. The halves the run did not hold take the ratio
        # over every compute instruction, (3 + 4) / (2 + 4).
        row = layers()
        scales = profile.calibrate(PLAN, ranks(3.0, 4.0), row, KINDS)
        every = 7.0 / 6.0
        self.assertEqual(scales, {"forward_s": 1.5, "backward_s": 1.0, "backward_input_s": every,
                                  "backward_weight_s": every})
        self.assertEqual(row["a"]["forward_s"], 1.5)
        self.assertEqual(row["a"]["backward_s"], 2.0)
        self.assertAlmostEqual(row["a"]["backward_input_s"], every)

    def test_an_ops_call_is_paid_once_an_instruction_and_scaled_with_its_layers(self):
        # The layers' times are per layer, each op's call on top once an instruction: a forward
        # of 0.5 + 2 × 1 s alone took 3 s (1.2), a fused backward of 1 + 2 × 2 s took 4 s (0.8).
        calls = lambda: {"forward_s": 0.5, "backward_s": 1.0, "backward_input_s": 0.0, "backward_weight_s": 0.0}
        row = layers()
        scales = profile.calibrate(PLAN, ranks(3.0, 4.0), row, KINDS, calls())
        self.assertEqual((scales["forward_s"], scales["backward_s"]), (1.2, 0.8))
        self.assertEqual(row["a"]["forward_s"], 1.2)
        costs = profile.runtime_costs(PLAN, ranks(3.0, 4.0), layers(), KINDS, cpu=True, calls=calls())
        self.assertEqual((costs["call_s"]["forward_s"], costs["call_s"]["backward_s"]), (0.6, 0.8))

    def test_no_constant_per_instruction(self):
        costs = profile.runtime_costs(PLAN, ranks(3.0, 4.0), layers(), KINDS, cpu=True)
        self.assertEqual(costs["compute_s"], 0.0)
        self.assertEqual(costs["clock"], "cpu")
        self.assertEqual(costs["send_s"], 0.5)


class Calls(unittest.TestCase):
    def test_the_first_run_of_four_layers_of_one_kind_else_the_longest(self):
        self.assertEqual(profile.same_kind_run(["a", "b", "b", "b", "b", "b", "c"]), range(1, 5))
        self.assertEqual(profile.same_kind_run(["a", "a", "b", "b", "b", "c"]), range(2, 5))
        self.assertIsNone(profile.same_kind_run(["a", "b", "a"]))

    def miniature(self, kinds_of):
        kinds = [{"encoder": False, "trainable": True, "part_first": i == 0, "part_last": i + 1 == len(kinds_of)}
                 for i in range(len(kinds_of))]
        config = {"adapter": "miniature", "seed": 1, "width": 16, "enc_width": 12, "patch_dim": 10, "vocab": 32,
                  "image_tokens": 4, "images": 1, "text_tokens": 6, "micro_batch_size": 1, "lr": 0.05,
                  "kinds": kinds}
        plan = {"stages": [{"layers": [0, len(kinds_of)]}], "pipeline": {"microbatches": 2}}
        return profile.measure_calls(plan, config, kinds_of, torch.device("cpu"))

    def test_a_backward_pays_its_call_once_however_many_layers_it_runs(self):
        # On a small decoder layer an autograd call's start is a good part of its backward
        # (60 to 90 us of 140 to 270 on the 2-core VM); a forward calls nothing.
        torch.set_num_threads(1)
        calls = self.miniature(["decoder:first"] + ["decoder"] * 4 + ["decoder:last"])
        self.assertEqual(sorted(calls), sorted(profile.FIELD.values()))
        self.assertTrue(all(c >= 0.0 for c in calls.values()), calls)
        self.assertGreater(calls["backward_s"], 10e-6, calls)
        self.assertLess(calls["backward_s"], 1e-3, calls)

    def test_none_without_two_neighbours_of_one_kind(self):
        calls = self.miniature(["decoder:first", "decoder:last"])
        self.assertEqual(set(calls.values()), {0.0})


class SpeedTrace(unittest.TestCase):
    # After the warm-up, rank 0's forward took 2, 3 and 4 s (median 3) and its backward 4, 4 and
    # 8 s (median 4); rank 1 ran at its medians, 1 and 2 s, each step; the sends are not
    # compute. A second replica of rank 0 is left out.
    RUN = [{"rank": 1, "dp_rank": 0, "timings": [[9.0, 9.0, 9.0]] + [[1.0, 0.5, 2.0]] * 3},
           {"rank": 0, "dp_rank": 0, "timings": [[9.0, 9.0, 9.0], [2.0, 0.5, 4.0], [3.0, 0.7, 4.0],
                                                 [4.0, 0.5, 8.0]]},
           {"rank": 0, "dp_rank": 1, "timings": [[9.0, 9.0, 9.0]] * 4}]

    def test_each_compute_instruction_over_its_median_in_the_order_it_ran(self):
        trace = profile.speed_trace(PLAN, self.RUN)
        self.assertEqual(trace, [[[3.0, 0.6667], [4.0, 1.0], [3.0, 1.0], [4.0, 1.0], [3.0, 1.3333], [4.0, 2.0]],
                                 [[1.0, 1.0], [2.0, 1.0]] * 3])

    def test_the_layers_are_calibrated_to_each_instructions_median(self):
        # Forwards: medians of 3 and 1 s against two stages of 2 layers of 1 s alone, 4 / 4;
        # fused backwards: 4 and 2 s against 2 x 2 x 2 s, 6 / 8.
        scales = profile.calibrate(PLAN, self.RUN, layers(), KINDS)
        self.assertEqual((scales["forward_s"], scales["backward_s"]), (1.0, 0.75))


class SendWait(unittest.TestCase):
    def test_the_mean_busy_delivery_less_the_median_idle_one(self):
        # Deliveries of 0.5, 0.2 and 1.5 ms with the sender computing on (mean 0.733 ms), 0.2 ms
        # with it waiting, at the same size: 0.533 ms; never below 0.
        sent, got = [(64, [0.0, 1.0, 2.0])], [(64, [0.0005, 1.0002, 2.0015])]
        idle = [(64, 0.0002), (16384, 0.0003)]
        self.assertAlmostEqual(profile.send_wait(sent, got, idle), 0.0005333333, places=9)
        self.assertEqual(profile.send_wait(sent, got, [(64, 0.01)]), 0.0)


class HostSpeed(unittest.TestCase):
    def test_the_median_over_every_ranks_steps_after_the_first(self):
        # Each rank's first kernel ran before the warm-up step; an accelerator's ranks time none.
        run = [{"host_speed_seconds": [9.0, 1.0, 3.0]}, {"host_speed_seconds": [9.0, 2.0, 2.5]}]
        self.assertEqual(profile.host_speed_seconds(run), 2.25)
        self.assertIsNone(profile.host_speed_seconds([{"host_speed_seconds": []}]))

    def test_the_kernel_leaves_the_models_random_state_alone(self):
        torch.manual_seed(5)
        state = torch.random.get_rng_state()
        kernel = host_speed.for_device(torch.device("cpu"))
        seconds = kernel()
        self.assertTrue(torch.equal(torch.random.get_rng_state(), state))
        self.assertGreater(seconds, 0.0)
        self.assertLess(seconds, 1.0)

    def test_the_first_pass_is_not_timed(self):
        # The first pass after a step pays for the caches the step left (26 % more after 61 of
        # the miniature's decoder layers than after nothing, on the 2-core VM): only the passes
        # after it count.
        kernel, clock = host_speed.ReferenceKernel(), [0.0]
        passes = iter([10.0] + [1.0] * host_speed.REPEATS)

        def block():
            clock[0] += next(passes)

        kernel._block = block
        with mock.patch.object(host_speed.time, "thread_time", lambda: clock[0]):
            self.assertEqual(kernel(), 1.0)

    def test_no_kernel_on_an_accelerator(self):
        self.assertIsNone(host_speed.for_device(torch.device("meta")))


class Reduction(unittest.TestCase):
    # One replicated stage of 2 layers of 1000 bytes of gradients each, reduced at the end of
    # the step over the pipeline's 2 ranks; a ring of 2 at α = 1 ms, β = 2000 bytes/s takes
    # 2·1 ms + 2000 / 2000 s = 1.002 s by the fit.
    PLAN = {
        "stages": [{"region": "enc", "layers": [0, 2]}],
        "pipeline": {"ranks": 2},
        "ranks": [{"instructions": [{"op": "forward", "stage": 0},
                                    {"op": "all_reduce", "group": "pp", "region": "enc"}]} for _ in (0, 1)],
    }
    LAYERS = {"a": {"grad_bytes": 1000}}
    FIT = {"alpha_s": 0.001, "beta_bytes_per_s": 2000.0}

    def run_of(self, reductions):
        """Ranks whose steps' reductions took `reductions[rank]`, a warm-up step first."""
        return [{"rank": r, "dp_rank": 0, "timings": [[0.0, 99.0]] + [[0.0, t] for t in ts]}
                for r, ts in enumerate(reductions)]

    def test_the_last_to_arrive_per_step_its_median(self):
        # Per step the faster of the two (the other waited for it): 2, 3 and 4 s; the median,
        # 3 s, against the fit's 1.002 s.
        run = self.run_of([[2.0, 5.0, 4.0], [7.0, 3.0, 9.0]])
        scale = profile.reduction_scale(self.PLAN, run, self.LAYERS, ["a", "a"], self.FIT)
        self.assertAlmostEqual(scale, 3.0 / 1.002)

    def test_none_without_a_reduction_the_rank_waits_for(self):
        plan = {**self.PLAN, "ranks": [{"instructions": [{"op": "forward", "stage": 0},
                                                         {"op": "all_reduce", "group": "pp", "region": "enc",
                                                          "async": True}]} for _ in (0, 1)]}
        run = self.run_of([[2.0, 5.0], [7.0, 3.0]])
        self.assertIsNone(profile.reduction_scale(plan, run, self.LAYERS, ["a", "a"], self.FIT))
        self.assertIsNone(profile.reduction_scale({**self.PLAN, "pipeline": {"ranks": 1}}, run[:1], self.LAYERS,
                                                  ["a", "a"], self.FIT))


class Steady(unittest.TestCase):
    def test_the_median_step_after_the_warm_up(self):
        # The steps after the warm-up took 5, 9 and 7 s: the 7 s one is the median, the one a
        # run's median step is set beside; neither the fastest nor the warm-up.
        rank = {"rank": 0, "dp_rank": 0, "step_seconds": [99.0, 5.0, 9.0, 7.0],
                "timings": [["warm-up"], ["fast"], ["slow"], ["median"]]}
        self.assertEqual(list(profile.steady([rank])), [(0, 7.0, ["median"])])

    def test_the_middle_half_of_many_steps(self):
        # Eight steps after the warm-up, 1 to 8 s in some order: the middle four by time (3 to
        # 6 s), not the two fastest or the two slowest, each with its own instruction times.
        seconds = [99.0, 8.0, 1.0, 5.0, 3.0, 7.0, 2.0, 6.0, 4.0]
        rank = {"rank": 0, "dp_rank": 0, "step_seconds": seconds, "timings": [[s] for s in seconds]}
        self.assertEqual(list(profile.steady([rank])), [(0, s, [s]) for s in (3.0, 4.0, 5.0, 6.0)])

    def test_replicas_other_than_the_first_are_left_out(self):
        rank = {"rank": 0, "dp_rank": 1, "step_seconds": [9.0, 1.0], "timings": [[], []]}
        self.assertEqual(list(profile.steady([rank])), [])


class Clock(unittest.TestCase):
    def test_cpu_seconds_only_where_processes_outnumber_the_cores(self):
        import torch

        cores, cpu = profile.host_cores(), torch.device("cpu")
        self.assertFalse(profile.cpu_clock(cpu, cores))
        self.assertTrue(profile.cpu_clock(cpu, cores + 1))
        self.assertFalse(profile.cpu_clock(torch.device("cuda", 0), cores + 1))


class MessageCpu(unittest.TestCase):
    def test_the_other_threads_cpu_per_message_received_after_the_warm_up(self):
        # Rank 0 receives 1 message a step, rank 1 none; steps after the first spent 0.3 and
        # 0.5 s beyond the main thread, rank 1's 0.2: (0.3 + 0.5 + 0.2) / (2 receives).
        plan = {"ranks": [{"instructions": [{"op": "recv"}, {"op": "forward"}]}, {"instructions": [{"op": "send"}]}]}
        ranks = [{"rank": 0, "dp_rank": 0, "other_threads": [9.0, 0.3, 0.5]},
                 {"rank": 1, "dp_rank": 0, "other_threads": [9.0, 0.2, 0.0]},
                 {"rank": 0, "dp_rank": 1, "other_threads": [9.0, 7.0, 7.0]}]
        self.assertAlmostEqual(profile.message_cpu(plan, ranks), 0.5)

    def test_no_receives_no_cost(self):
        plan = {"ranks": [{"instructions": [{"op": "forward"}]}]}
        self.assertEqual(profile.message_cpu(plan, [{"rank": 0, "dp_rank": 0, "other_threads": [1.0, 1.0]}]), 0.0)


class Flights(unittest.TestCase):
    def test_a_flight_is_the_median_from_posted_to_received(self):
        # Rank 0's posting times and rank 1's arrivals, of one clock: per size the median of
        # the differences (0.2, 0.3 and 5 ms: 0.3 ms), not the fewest, nor the mean the one
        # late message pulls up.
        sent = [(64, [1.0, 2.0, 3.0]), (4096, [1.0, 2.0, 3.0])]
        received = [(64, [1.0002, 2.0003, 3.005]), (4096, [1.001, 2.001, 3.001])]
        got = profile.flights(sent, received)
        self.assertEqual([n for n, _ in got], [64, 4096])
        self.assertAlmostEqual(got[0][1], 3e-4)
        self.assertAlmostEqual(got[1][1], 1e-3)


def _deliver(rank):
    return profile.deliveries(rank, torch.device("cpu"), lambda: None)


class Deliveries(unittest.TestCase):
    def test_each_message_is_timed_from_its_posting_to_the_waiting_rank(self):
        sent, received = pair.on_two_ranks(_deliver)
        sizes = [n * 4 for n in profile.P2P_ELEMENTS]
        self.assertEqual([n for n, _ in sent], sizes)
        for (_, posted), (_, got) in zip(sent, received):
            self.assertEqual((len(posted), len(got)), (profile.DELIVERY_REPEATS,) * 2)
            # One clock, the host's: each arrival within a second of its posting. Not always
            # after it: a sender descheduled once its send is posted stamps it late.
            self.assertTrue(all(abs(b - a) < 1.0 for a, b in zip(posted, got)))
        # The largest message's median delivery is after its posting. The smallest ones' can
        # come out at 0 or below on a loaded host, where the sender's thread is put off the core
        # by the sending thread it just woke more often than not.
        self.assertGreater(profile.flights(sent, received)[-1][1], 0.0)


if __name__ == "__main__":
    unittest.main()
