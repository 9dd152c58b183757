"""Runs an emitted launch.sh as written, with its launcher (torchrun or msrun) replaced by a
shim that records the command line and the environment instead of starting processes: what
the stack's launcher would receive. Shared by the backend checks of tests/backends.rs."""

import json
import os
import subprocess
import sys
import tempfile

SHIM = """#!/usr/bin/env bash
python3 - "$@" <<'PY'
import json, os, sys
with open(os.environ["MPIPEC_LAUNCH_RECORD"], "w") as f:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, f)
PY
"""


def run(launch, env=None, launcher="TORCHRUN"):
    """(argv, environment) the launcher gets from `launch` run with `env` added."""
    with tempfile.TemporaryDirectory() as tmp:
        shim = os.path.join(tmp, "launcher")
        with open(shim, "w") as f:
            f.write(SHIM)
        os.chmod(shim, 0o755)
        record = os.path.join(tmp, "record.json")
        full = {k: v for k, v in os.environ.items() if k not in ("NNODES", "NODE_RANK", "NPROC_PER_NODE")}
        full.update(env or {})
        full[launcher] = shim
        full["MPIPEC_LAUNCH_RECORD"] = record
        done = subprocess.run(["bash", launch], env=full, cwd=tmp, capture_output=True, text=True)
        if done.returncode != 0:
            raise AssertionError(f"{launch} exited {done.returncode}: {done.stderr}")
        with open(record) as f:
            got = json.load(f)
        return got["argv"], got["env"]


def split_torchrun(argv):
    """torchrun's own options, the script, and the script's arguments."""
    options = {}
    i = 0
    while i < len(argv) and argv[i].startswith("--"):
        options[argv[i]] = argv[i + 1]
        i += 2
    return options, argv[i], argv[i + 1:]


def flags(args):
    """`--name value` and `--switch` arguments as {name: value or True}, in order."""
    out = {}
    i = 0
    while i < len(args):
        name = args[i]
        assert name.startswith("--"), f"expected a flag, got {name!r} in {args}"
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[name] = args[i + 1]
            i += 2
        else:
            out[name] = True
            i += 1
    return out


def check_all(stack, check):
    """Runs `check` (which returns the case's name) on every case of the file named on the
    command line, printing `<stack> ok: <name>` for each: tests/backends.rs counts those lines."""
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    assert cases, "no cases"
    for case in cases:
        print(f"{stack} ok:", check(case))
