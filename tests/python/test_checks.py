"""The executor's check of stage modules against the plan's layers (mpipec.torch.checks), on the
built-in miniature: a stage missing a layer, holding the next stage's, or with a layer of the
wrong width is refused naming the stage and the layer; through the Executor, before any step,
naming the process and its pipeline rank too (a one-process gloo group, no other processes).

    python -m unittest discover -s tests/python -p test_checks.py
"""

import json
import os
import tempfile
import unittest
from pathlib import Path

import torch

import mpipec
from mpipec.torch import Executor, PlanError, checks, devices, miniature
from mpipec.torch.adapter import layer_shapes
from solo import OneProcessGroup

ROOT = Path(__file__).resolve().parents[2]


def setUpModule():
    global PLAN, CONFIG, SHAPES
    plan = mpipec.compile(ROOT / "tests" / "verify" / "vlm.mpipe", set={"cluster.pp": 2, "cluster.devices": 2, "batch.microbatches": 2})
    with tempfile.TemporaryDirectory() as out:
        plan.build(out, target="torch")
        with open(os.path.join(out, "torch", "config.json")) as f:
            CONFIG = json.load(f)
    PLAN, SHAPES = plan.ir, layer_shapes(miniature, CONFIG)


def stage(layers, **config):
    return miniature.build(range(*layers), CONFIG["kinds"], dict(CONFIG, **config))


class Layers(unittest.TestCase):
    def test_the_adapters_own_stages_fit(self):
        for s in PLAN["stages"]:
            self.assertEqual(checks.layer_problems(PLAN, s["id"], stage(s["layers"]), SHAPES), [], s)

    def test_a_missing_layer_is_named(self):
        lo, hi = PLAN["stages"][1]["layers"]
        problems = checks.layer_problems(PLAN, 1, stage((lo, hi - 1)), SHAPES)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn(f"stage 1 (region `llm`, layers [{lo}, {hi})): layer {hi - 1} lacks 12 of its 12 parameters: "
                      f"`blocks.{hi - 1}.norm1.weight`", problems[0])

    def test_a_layer_of_another_stage_is_named_with_its_stage(self):
        lo, hi = PLAN["stages"][1]["layers"]
        problems = checks.layer_problems(PLAN, 1, stage((lo, hi + 1)), SHAPES)
        self.assertEqual(problems, [f"stage 1 (region `llm`, layers [{lo}, {hi})): holds parameters of layer {hi}, which the "
                                    f"plan puts on stage 2: `blocks.{hi}.norm1.weight`, `blocks.{hi}.norm1.bias`, "
                                    f"`blocks.{hi}.qkv.weight` and 9 more"])

    def test_a_layer_of_the_wrong_width_is_named_with_its_shapes(self):
        lo, hi = PLAN["stages"][0]["layers"]
        problems = checks.layer_problems(PLAN, 0, stage((lo, hi), enc_width=CONFIG["enc_width"] * 2), SHAPES)
        width = CONFIG["enc_width"]
        self.assertIn(f"stage 0 (region `enc`, layers [0, {hi})): layer 0's `blocks.0.norm1.weight` has shape [{2 * width}], "
                      f"the model's has [{width}]", problems)
        self.assertTrue(all("layer" in p for p in problems), problems)

    def test_a_parameter_of_no_layer_is_named(self):
        lo, hi = PLAN["stages"][2]["layers"]
        module = stage((lo, hi))
        module.scale = torch.nn.Parameter(torch.ones(1))
        self.assertEqual(checks.layer_problems(PLAN, 2, module, SHAPES),
                         [f"stage 2 (region `llm`, layers [{lo}, {hi})): holds parameters of none of the model's layers: `scale`"])


class Executor_(OneProcessGroup):
    def test_refuses_before_any_step_naming_process_rank_stage_and_layer(self):
        # This process as pipeline rank 1 of the 2-rank plan (the check is per process).
        groups = devices.Groups(pp_rank=1, dp_rank=0, pp=None, dp=None, globals=[0, 0])
        lo, hi = PLAN["stages"][2]["layers"]
        modules = {0: stage(PLAN["stages"][0]["layers"]), 2: stage((lo, hi - 1))}
        with self.assertRaises(PlanError) as e:
            Executor(PLAN, 1, modules, miniature.loss, groups, layer_shapes=SHAPES)
        self.assertIn(f"process 0 (pp 1, dp 0): stage 2 (region `llm`, layers [{lo}, {hi})): layer {hi - 1} lacks", str(e.exception))
        modules[2] = stage((lo, hi))
        Executor(PLAN, 1, modules, miniature.loss, groups, layer_shapes=SHAPES)


if __name__ == "__main__":
    unittest.main()
