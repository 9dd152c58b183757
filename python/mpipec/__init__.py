"""mpipec: the compiler for Mpipe pipeline-parallel training plans, from Python.

``compile`` checks, derives and simulates a plan and returns a ``Plan`` (its ``report``, its
per-rank ``ir``, and ``build`` to write what ``mpipec build`` writes). It runs the ``mpipec``
binary that the wheel installs beside this interpreter (docs/python.md says how it is found).
This package needs only the standard library; ``mpipec.torch`` (the runtime) needs torch.
"""

from .errors import BinaryNotFoundError, CompileError
from .plan import Plan, compile

# The crate's version (Cargo.toml), which is also the wheel's; tests/wheel.rs holds them equal.
__version__ = "0.1.0"

__all__ = ["compile", "Plan", "CompileError", "BinaryNotFoundError", "__version__"]
