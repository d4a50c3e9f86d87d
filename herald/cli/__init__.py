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

from typing import TYPE_CHECKING, Any

from herald.cli import startup

if TYPE_CHECKING:
    from typer import Typer

    from herald.cli.base import app as app

__all__ = ["app", "main"]


def main() -> None:
    startup.pause()  # until the command begins its work (herald/cli/startup.py)
    try:
        _app()()
    finally:
        startup.resume()


def _app() -> Typer:
    # The app's own options (--config) and `herald config`: read before any command's options.
    from herald.cli import global_options  # noqa: F401
    from herald.cli.base import app

    return app


def __getattr__(name: str) -> Any:
    # `from herald.cli import app`: imported when first named, so that main() imports typer and
    # rich with the collector paused.
    if name == "app":
        return _app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
