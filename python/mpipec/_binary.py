"""Finding the ``mpipec`` binary and running it with JSON output.

The Python API is thin over the compiler's command line: every call runs the binary once and
reads its JSON (diagnostics one object a line, then the result). The wheel installs the binary
in the scripts directory of the environment it is installed into (beside ``python``), which is
where it is looked for first.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
from dataclasses import dataclass
from typing import Optional

from .errors import BinaryNotFoundError, CompileError

ENV = "MPIPEC_BINARY"
NAME = "mpipec"


def _scripts_dirs() -> list[str]:
    """The scripts directories where pip puts a wheel's commands for this interpreter: the
    environment's own, then the user scheme's (``pip install --user``)."""
    dirs = [sysconfig.get_path("scripts")]
    try:
        dirs.append(sysconfig.get_path("scripts", f"{os.name}_user"))
    except KeyError:
        pass
    return [d for d in dirs if d]


def find() -> str:
    """The binary to run: ``$MPIPEC_BINARY`` when set, else the one beside this interpreter's
    scripts (a wheel install), else the first ``mpipec`` on ``PATH`` (``cargo install``)."""
    explicit = os.environ.get(ENV)
    if explicit:
        if shutil.which(explicit) is None:
            raise BinaryNotFoundError(f"${ENV} is `{explicit}`, which is not an executable file")
        return explicit
    for directory in _scripts_dirs():
        found = shutil.which(NAME, path=directory)
        if found:
            return found
    found = shutil.which(NAME)
    if found:
        return found
    looked = ", ".join(_scripts_dirs() + ["PATH"])
    raise BinaryNotFoundError(
        f"cannot find the `{NAME}` binary (looked in {looked}); install the wheel "
        f"(`pip install mpipec`), put one on PATH (`cargo install --path .` in the repository), "
        f"or set ${ENV} to its path"
    )


@dataclass
class Run:
    """One run of the binary: its exit status, what it reported, and its result, if any (the
    last object it printed that is not a report)."""

    status: int
    diagnostics: list
    rendered: str
    result: Optional[dict]


def _diagnostic(obj: dict) -> dict:
    """A diagnostic as the API gives it: the primary label's place flattened into it."""
    labels = obj.get("labels") or []
    primary = next((label for label in labels if label.get("primary")), labels[0] if labels else None)
    return {
        "code": obj.get("code"),
        "severity": obj.get("severity", "error"),
        "message": obj["message"],
        "file": primary["file"] if primary else None,
        "line": primary["line_start"] if primary else None,
        "column": primary["column_start"] if primary else None,
        "help": obj.get("help"),
        "rendered": obj.get("rendered", ""),
    }


def run(args: list[str], stdin: Optional[str] = None) -> Run:
    """Runs ``mpipec ARGS`` with JSON diagnostics; ``stdin`` is the plan's text when the plan
    argument is ``-``."""
    command = [find(), *args, "--message-format", "json", "--color", "never"]
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, encoding="utf-8")
    diagnostics, rendered, result = [], [], None
    for line in done.stdout.splitlines():
        if not line.strip():
            continue
        obj = json.loads(line)
        kind = obj.get("type") if isinstance(obj, dict) else None
        if kind in ("diagnostic", "error"):
            diagnostics.append(_diagnostic(obj))
        if kind in ("diagnostic", "error", "summary"):
            rendered.append(obj.get("rendered") or "")
        else:
            result = obj
    if done.returncode != 0:
        # What the binary says as text comes after its diagnostics, as on a terminal: that
        # nothing was written, or all there is when it stopped before reading the plan (a usage
        # error, a binary too old for these options) or crashed.
        text = done.stderr or ("" if rendered else f"error: mpipec exited with status {done.returncode}\n")
        if not diagnostics:
            diagnostics.append(_diagnostic({"message": text.strip(), "rendered": text}))
        rendered.append(text)
    return Run(done.returncode, diagnostics, "".join(rendered), result)


def check(outcome: Run) -> Run:
    """The run, when it succeeded; otherwise its diagnostics raised as a CompileError."""
    if outcome.status != 0:
        raise CompileError(outcome.diagnostics, outcome.rendered)
    return outcome


__all__ = ["find", "run", "check", "Run", "ENV"]
