"""``mpipec.compile`` and the ``Plan`` it returns."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Iterable, Mapping, Optional, Union

from . import _binary

Source = Union[str, "os.PathLike[str]"]
Value = Union[bool, int, float, str]

# The plan path the binary reads from standard input.
STDIN = "-"


def _is_text(source: Source) -> bool:
    """A str holding a newline or a brace is a plan's text; any other str, and any path
    object, names a file (no plan fits on one line without braces)."""
    return isinstance(source, str) and ("\n" in source or "{" in source)


def _value_text(key: str, value: Value) -> str:
    """A Python value as the text ``--set KEY=VALUE`` takes. A str is passed as written: it is
    plan syntax (``"interleaved(2)"``, ``"round_robin"``, ``"enc | llm"``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"set[{key!r}] is {value}: a plan value must be finite")
        return repr(value)
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"set[{key!r}] is empty: give the value as plan text, such as \"4\" or \"1f1b\"")
        return value
    raise ValueError(
        f"set[{key!r}] is a {type(value).__name__}: a plan value is a bool, an int, a float, "
        f"or a str of plan text"
    )


def _set_args(overrides: Mapping[str, Value]) -> list[str]:
    args: list[str] = []
    for key, value in overrides.items():
        if not isinstance(key, str) or not key.strip() or "=" in key:
            raise ValueError(f"set key {key!r} is not a dotted path such as \"cluster.pp\"")
        args += ["--set", f"{key}={_value_text(key, value)}"]
    return args


def _plan_args(source: Source, overrides: Mapping[str, Value]) -> tuple[list[str], Optional[str]]:
    """The binary's plan argument and --set options, and its standard input."""
    if _is_text(source):
        return [STDIN, *_set_args(overrides)], source
    path = os.fspath(source)
    # A relative path that starts with `-` would read as an option.
    if path.startswith("-"):
        path = os.path.join(os.curdir, path)
    return [path, *_set_args(overrides)], None


class Plan:
    """A checked, derived and simulated plan.

    ``report`` is what report.json holds (the simulated step: step time, bounds, MFU, per-rank
    busy, idle, slack, spill and memory), ``ir`` what plan.json holds (the per-rank instruction
    lists; docs/plan-json.md), ``diagnostics`` the warnings the compiler reported (dicts like
    ``CompileError.diagnostics``).
    """

    def __init__(self, source: Source, overrides: dict, report: dict, ir: dict, diagnostics: list):
        self._source = source
        self._overrides = overrides
        self.report = report
        self.ir = ir
        self.diagnostics = diagnostics

    def build(
        self,
        out_dir: Union[str, "os.PathLike[str]"],
        target: Union[None, str, Iterable[str]] = None,
        *,
        nearest: bool = False,
        force: bool = False,
    ) -> Path:
        """Writes into ``out_dir`` what ``mpipec build`` writes: plan.json, plan.txt,
        report.json, the timelines and one directory per target (``target``: a name or several;
        None: the plan's own ``target``). A plan read from a file is read again, as it is now.
        ``nearest`` and ``force`` are ``mpipec build``'s options. Returns ``out_dir``.
        """
        targets = [target] if isinstance(target, str) else list(target or [])
        if not all(isinstance(t, str) and t for t in targets):
            raise ValueError(f"target must be a target name or a list of them, found {target!r}")
        plan, stdin = _plan_args(self._source, self._overrides)
        args = ["build", *plan, "--out", os.fspath(out_dir)]
        if targets:
            args += ["--target", ",".join(targets)]
        if nearest:
            args.append("--nearest")
        if force:
            args.append("--force")
        _binary.check(_binary.run(args, stdin))
        return Path(out_dir)

    def __repr__(self) -> str:
        step = self.report.get("step_time_s")
        return f"<mpipec.Plan {self.ir.get('source', '?')}: {len(self.ir.get('ranks', []))} ranks, step {step:.4g} s>"


def compile(source: Source, set: Optional[Mapping[str, Value]] = None) -> Plan:  # noqa: A001 - the API's name
    """Checks, derives and simulates a plan, as ``mpipec build`` does, without writing files.

    ``source`` is a path (a ``pathlib.Path``, or a str naming a file) or the plan's text (a str
    holding a newline or a brace; its ``use "…"`` paths resolve against the working directory).
    ``set`` overrides plan values as ``--set KEY=VALUE`` does: ``{"cluster.pp": 4,
    "schedule": "interleaved(2)"}``. Raises ``CompileError`` when the plan does not compile and
    ``ValueError`` for a ``set`` the command line could not take.
    """
    overrides = dict(set or {})
    args, stdin = _plan_args(source, overrides)
    outcome = _binary.check(_binary.run(["sim", *args, "--json", "--ir"], stdin))
    return Plan(source, overrides, outcome.result["report"], outcome.result["ir"], outcome.diagnostics)
