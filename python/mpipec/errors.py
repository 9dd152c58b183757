"""The exceptions of the `mpipec` package."""

from __future__ import annotations


class CompileError(Exception):
    """The compiler refused the plan or the request.

    ``diagnostics`` holds one dict per problem, in the order the compiler reported them, with
    the keys ``code``, ``message``, ``file``, ``line``, ``column``, ``help``, ``severity`` and
    ``rendered``. A problem outside any source file (a file that cannot be read, an unknown
    target) has ``code``, ``file``, ``line``, ``column`` and ``help`` set to None. ``str()`` is
    what ``mpipec`` prints for the same run on a terminal, without colour.
    """

    def __init__(self, diagnostics: list[dict], rendered: str):
        super().__init__(rendered)
        self.diagnostics = diagnostics
        self.rendered = rendered

    def __str__(self) -> str:
        return self.rendered


class BinaryNotFoundError(RuntimeError):
    """No ``mpipec`` binary could be found to run (see ``mpipec._binary.find``)."""
