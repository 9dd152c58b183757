"""The check `mpipec verify` and `mpipec train --check` apply (mpipec.torch.verify): a tensor
within rel 1e-5 of the fp32 process passes without more; past it, it passes only if it is as
near a float64 run of the same steps as the fp32 process is (within a multiple that grows as
the tensor shrinks), and the float64 run is made only then. The float64 reference runs both adapters (the miniature and
transformers' families) in float64 end to end.

    python -m unittest discover -s tests/python -p test_verify.py
"""

import contextlib
import io
import json
import os
import tempfile
import unittest
from pathlib import Path

import torch

import mpipec
from mpipec.torch import hf, miniature, verify

ROOT = Path(__file__).resolve().parents[2]


def record(grad, loss=1.0):
    return {"losses": [loss], "grads": [{"w": grad}]}


def judged(pipelined, single, exact):
    """(verdict, whether the float64 run was asked for) of one step's loss and gradient `w`."""
    worst, asked = verify.Worst(), []

    def run():
        asked.append(True)
        return exact

    with contextlib.redirect_stdout(io.StringIO()):
        verify.compare_steps([pipelined], single, 1, worst)
        failed = verify.verdict(worst, run, "the loss and every gradient")
    return failed, bool(asked)


# A gradient whose entries are sums that nearly cancel: its exact value is small against the
# round-off that two fp32 summation orders leave, which differ from each other by more than
# rel 1e-5 while each stays as near the exact value as the other.
EXACT = torch.tensor([1e-3, -2e-3, 5e-4, 3e-3], dtype=torch.float64)
ONE_ORDER = (EXACT + torch.tensor([4e-8, -3e-8, 5e-8, -4e-8], dtype=torch.float64)).float()
OTHER_ORDER = (EXACT + torch.tensor([-5e-8, 4e-8, -3e-8, 5e-8], dtype=torch.float64)).float()


class Rule(unittest.TestCase):
    def test_within_tolerance_needs_no_float64_run(self):
        g = torch.tensor([1.0, 2.0, 3.0])
        failed, asked = judged(record(g * (1 + 1e-7)), record(g), None)
        self.assertIsNone(failed)
        self.assertFalse(asked)

    def test_round_off_past_tolerance_passes_against_float64(self):
        worst = verify.Worst()
        with contextlib.redirect_stdout(io.StringIO()):
            verify.compare_steps([record(OTHER_ORDER)], record(ONE_ORDER), 1, worst)
        self.assertGreater(worst.worst()[0], verify.TOLERANCE)
        failed, asked = judged(record(OTHER_ORDER), record(ONE_ORDER), record(EXACT))
        self.assertTrue(asked)
        self.assertIsNone(failed)

    def test_a_wrong_gradient_fails_against_float64_naming_it(self):
        wrong = ONE_ORDER + torch.tensor([0.0, 0.0, 1e-5, 0.0])
        failed, asked = judged(record(wrong), record(ONE_ORDER), record(EXACT))
        self.assertTrue(asked)
        self.assertIn("error: outside tolerance", failed)
        self.assertIn("step 0 w", failed)

    def test_a_wrong_loss_fails(self):
        g = torch.tensor([1.0])
        failed, _ = judged(record(g, loss=1.001), record(g, loss=1.0), record(g.double(), loss=1.0))
        self.assertIn("worst step 0", failed)

    def test_the_multiple_allowed_grows_as_the_tensor_shrinks(self):
        # Four times the fp32 process's distance: within what a 16-entry LayerNorm weight may
        # be (one rms over few entries is a noisy draw), not what a 1024-entry one may.
        for n, ok in ((16, True), (1024, False)):
            with self.subTest(entries=n):
                exact = torch.linspace(1e-3, 3e-3, n, dtype=torch.float64)
                off = torch.full((n,), 1e-8, dtype=torch.float64)
                single, pipelined = (exact + off).float(), (exact - 4 * off).float()
                failed, asked = judged(record(pipelined), record(single), record(exact))
                self.assertTrue(asked)
                self.assertEqual(failed is None, ok, failed)

    def test_past_tolerance_where_the_fp32_process_is_exact_fails(self):
        failed, _ = judged(record(OTHER_ORDER), record(EXACT.float()), record(EXACT.float().double()))
        self.assertIsNotNone(failed)


def close(a, b, rel):
    scale = max(float(t.abs().max()) for t in b.values())
    return all(float((a[n].double() - b[n].double()).abs().max()) <= rel * scale for n in b)


class Float64Reference(unittest.TestCase):
    """Each adapter's one-process run in float64: every gradient float64 and near the fp32 one."""

    def same_in_both(self, adapter, plan, config, steps):
        single = verify.reference(plan, adapter, config, steps)
        exact = verify.reference(plan, adapter, config, steps, torch.float64)
        for step in range(steps):
            self.assertTrue(all(g.dtype == torch.float64 for g in exact["grads"][step].values()))
            self.assertAlmostEqual(single["losses"][step], exact["losses"][step], delta=1e-5 * exact["losses"][step])
            self.assertTrue(close(single["grads"][step], exact["grads"][step], 1e-4), f"step {step}")
        self.assertTrue(close(single["params"], exact["params"], 1e-5))

    def test_the_miniature(self):
        plan = mpipec.compile(ROOT / "tests" / "verify" / "vlm.mpipe", set={"cluster.pp": 2, "cluster.devices": 2, "batch.microbatches": 2})
        with tempfile.TemporaryDirectory() as out:
            plan.build(out, target="torch")
            with open(os.path.join(out, "torch", "config.json")) as f:
                config = json.load(f)
        self.same_in_both(miniature, plan.ir, dict(config, kinds=[dict(k, trainable=True) for k in config["kinds"]]), 2)

    def test_transformers_families(self):
        vision, text = 2, 2
        plan = {"stages": [{"layers": [0, vision + text]}], "pipeline": {"microbatches": 2, "dp": 1}}
        for family in hf.FAMILIES:
            with self.subTest(family=family):
                config = dict(family=family, seed=1, vision_layers=vision, text_layers=text, micro_batch_size=1,
                              kinds=[{"trainable": True}] * (vision + text))
                self.same_in_both(hf, plan, config, 2)


if __name__ == "__main__":
    unittest.main()
