"""The Python API (`mpipec.compile`, `Plan`, `CompileError`) against the binary it runs.

tests/wheel.rs runs these against the installed wheel; by hand, against a checkout:
    MPIPEC_BINARY=target/debug/mpipec PYTHONPATH=python python3 -m unittest discover -s tests/python
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

import mpipec
from mpipec import _binary

ROOT = Path(__file__).resolve().parents[2]
PAPER_SMALL = ROOT / "examples" / "paper_small.mpipe"
UNKNOWN_SKELETON = ROOT / "tests" / "ui" / "algebra" / "unknown_skeleton.mpipe"
KEYS = {"code", "severity", "message", "file", "line", "column", "help", "rendered"}


def cli(*args):
    """The binary's own run, as a user's terminal shows it (without colour)."""
    return subprocess.run([_binary.find(), "--color", "never", *args], capture_output=True, text=True, cwd=ROOT)


class Compile(unittest.TestCase):
    def test_a_path_gives_the_report_and_the_plan_build_writes(self):
        plan = mpipec.compile(PAPER_SMALL)
        self.assertEqual(len(plan.ir["ranks"]), 8)
        self.assertGreater(plan.report["step_time_s"], plan.report["lower_bound_s"] * 0.999)
        self.assertEqual(plan.diagnostics, [])
        with tempfile.TemporaryDirectory() as out:
            written = plan.build(out)
            self.assertEqual(written, Path(out))
            self.assertEqual(json.loads((written / "plan.json").read_text()), plan.ir)
            self.assertEqual(json.loads((written / "report.json").read_text()), plan.report)

    def test_a_str_path_and_the_text_give_the_same_plan(self):
        by_path = mpipec.compile(str(PAPER_SMALL))
        by_text = mpipec.compile(PAPER_SMALL.read_text())
        self.assertEqual(by_text.report, by_path.report)
        self.assertEqual(by_text.ir["ranks"], by_path.ir["ranks"])
        self.assertEqual(by_text.ir["source"], "<stdin>")

    def test_set_overrides_plan_values_of_every_type(self):
        plan = mpipec.compile(PAPER_SMALL, set={"cluster.pp": 4, "cluster.dp": 2, "model.enc.frozen": False})
        self.assertEqual((plan.ir["pipeline"]["ranks"], plan.ir["pipeline"]["dp"]), (4, 2))
        self.assertTrue(plan.ir["stages"][0]["backward"], "the encoder trains once it is not frozen")
        again = mpipec.compile(PAPER_SMALL, set={"batch.microbatches": 32, "owner": "round_robin"})
        self.assertNotEqual(again.report["step_time_s"], mpipec.compile(PAPER_SMALL).report["step_time_s"])

    def test_warnings_come_with_the_plan(self):
        plan = mpipec.compile(PAPER_SMALL, set={"batch.microbatches": 4})
        self.assertEqual([d["code"] for d in plan.diagnostics], ["W0002"])
        self.assertEqual(plan.diagnostics[0]["severity"], "warning")

    def test_build_writes_a_target(self):
        plan = mpipec.compile(PAPER_SMALL.read_text())
        with tempfile.TemporaryDirectory() as out:
            plan.build(out, target=["torch"])
            self.assertTrue((Path(out) / "torch" / "launch.sh").is_file())


class BadInput(unittest.TestCase):
    def test_a_compile_error_carries_the_diagnostics_and_renders_as_the_cli(self):
        with self.assertRaises(mpipec.CompileError) as caught:
            mpipec.compile(UNKNOWN_SKELETON)
        error = caught.exception
        first = error.diagnostics[0]
        self.assertEqual(set(first), KEYS)
        self.assertEqual(
            (first["code"], first["file"], first["line"], first["column"]), ("E0306", str(UNKNOWN_SKELETON), 24, 21)
        )
        self.assertIn("1f1b", first["help"])
        self.assertEqual(str(error), cli("sim", str(UNKNOWN_SKELETON)).stderr)

    def test_a_refused_target_renders_as_the_cli_and_writes_nothing(self):
        cannot_run = ROOT / "tests" / "ui" / "backends" / "cannot_run.mpipe"
        plan = mpipec.compile(cannot_run)
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch) / "out"
            with self.assertRaises(mpipec.CompileError) as caught:
                plan.build(out)
            self.assertEqual([d["code"] for d in caught.exception.diagnostics], ["E0402"])
            self.assertEqual(str(caught.exception), cli("build", str(cannot_run), "-o", str(out)).stderr)
            self.assertFalse(out.exists())

    def test_a_path_that_does_not_exist(self):
        with self.assertRaises(mpipec.CompileError) as caught:
            mpipec.compile(ROOT / "examples" / "no_such_plan.mpipe")
        (problem,) = caught.exception.diagnostics
        self.assertIn("no_such_plan.mpipe`: no such file", problem["message"])
        self.assertIsNone(problem["code"])
        self.assertEqual(str(caught.exception), cli("sim", str(ROOT / "examples" / "no_such_plan.mpipe")).stderr)

    def test_an_unknown_set_key(self):
        with self.assertRaises(mpipec.CompileError) as caught:
            mpipec.compile(PAPER_SMALL, set={"cluster.ppp": 4})
        self.assertIn("ppp", str(caught.exception))
        with self.assertRaises(mpipec.CompileError) as caught:
            mpipec.compile(PAPER_SMALL, set={"pp": 4})
        self.assertEqual(caught.exception.diagnostics[0]["code"], "E0109")

    def test_a_value_of_the_wrong_type(self):
        with self.assertRaises(mpipec.CompileError) as caught:
            mpipec.compile(PAPER_SMALL, set={"cluster.pp": "four"})
        self.assertEqual(caught.exception.diagnostics[0]["code"], "E0201")
        self.assertEqual(caught.exception.diagnostics[0]["file"], "--set cluster.pp=four")
        for value, says in [([4], "is a list"), (None, "is a NoneType"), (float("nan"), "must be finite"), ("", "empty")]:
            with self.assertRaisesRegex(ValueError, says):
                mpipec.compile(PAPER_SMALL, set={"cluster.pp": value})
        with self.assertRaisesRegex(ValueError, "dotted path"):
            mpipec.compile(PAPER_SMALL, set={"cluster.pp=4": 4})

    def test_an_unknown_target_writes_nothing(self):
        plan = mpipec.compile(PAPER_SMALL)
        with tempfile.TemporaryDirectory() as out:
            with self.assertRaisesRegex(mpipec.CompileError, "unknown target `tensorflow`: targets are torch"):
                plan.build(Path(out) / "plan", target="tensorflow")
            self.assertFalse((Path(out) / "plan").exists())
            with self.assertRaisesRegex(ValueError, "target must be"):
                plan.build(out, target=[3])

    def test_no_binary_is_a_clear_error(self):
        with mock.patch.dict(os.environ, {"MPIPEC_BINARY": str(ROOT / "no" / "mpipec")}):
            with self.assertRaisesRegex(mpipec.BinaryNotFoundError, "MPIPEC_BINARY is .*not an executable"):
                mpipec.compile(PAPER_SMALL)
        environment = {k: v for k, v in os.environ.items() if k != "MPIPEC_BINARY"}
        environment["PATH"] = ""
        with mock.patch.dict(os.environ, environment, clear=True), mock.patch.object(_binary, "_scripts_dirs", list):
            with self.assertRaisesRegex(mpipec.BinaryNotFoundError, "cannot find the `mpipec` binary.*MPIPEC_BINARY"):
                mpipec.compile(PAPER_SMALL)


    def test_a_binary_that_refuses_the_options_is_reported_in_its_words(self):
        with tempfile.TemporaryDirectory() as scratch:
            old = Path(scratch) / "mpipec"
            old.write_text("#!/bin/sh\necho \"error: unexpected argument '--ir' found\" >&2\nexit 2\n")
            old.chmod(0o755)
            with mock.patch.dict(os.environ, {"MPIPEC_BINARY": str(old)}):
                with self.assertRaises(mpipec.CompileError) as caught:
                    mpipec.compile(PAPER_SMALL)
        self.assertEqual(str(caught.exception), "error: unexpected argument '--ir' found\n")
        self.assertEqual(caught.exception.diagnostics[0]["message"], "error: unexpected argument '--ir' found")


class Package(unittest.TestCase):
    def test_it_imports_without_torch(self):
        code = "import sys; sys.modules['torch'] = None; import mpipec; print(mpipec.__version__)"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.strip(), mpipec.__version__)

    def test_the_binary_is_the_package_version(self):
        self.assertEqual(cli("--version").stdout.split(), ["mpipec", mpipec.__version__])


if __name__ == "__main__":
    unittest.main()
