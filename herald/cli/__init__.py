"""The ``herald`` command: one small module per command group, each parse → call → print.

The use cases themselves live in the application layer (``herald.app``); a command parses its
options, calls one use case, and prints the result through ``herald.output``. Importing this
package imports no command module: ``herald.cli.registry`` names the module of each command,
imported when that command runs, and the one-line help ``herald --help`` lists. A command
imports the libraries it needs when it runs, so every command starts quickly.

Exit codes: 0 success, 1 operational failure, 2 invalid input. Errors are printed as one line
(plus a hint); tracebacks are for bugs only.
"""

from __future__ import annotations

# The app's own options (--config) and `herald config`: read before any command's options.
from herald.cli import global_options  # noqa: F401
from herald.cli.base import app

__all__ = ["app", "main"]


def main() -> None:
    app()
