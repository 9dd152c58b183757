"""The check a `python -m mpipec...` entry point runs before it imports torch or transformers:
a Python without them is told how to get them, and mpipec reports the exit status as a missing
package, not as a failed run."""

import importlib
import sys

EXIT_MISSING = 2


def packages(names, help):
    """Exits with EXIT_MISSING, naming the packages of `names` this Python cannot import and
    saying `help` (its lines after the first indented under `help: `), when there are any."""
    missing = [name for name in names if not _imports(name)]
    if missing:
        sys.stderr.write(f"error: `{sys.executable}` cannot import {', '.join(missing)}\nhelp: {help}\n")
        sys.exit(EXIT_MISSING)


def _imports(name):
    # Imported, not only found: a package that is present but broken is as missing (the entry
    # point imports it next anyway).
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True
