"""The cyclic garbage collector waits while a command starts.

Starting a command makes tens of thousands of objects that live as long as the process: the
modules of typer, rich and SQLAlchemy, their classes, functions and tables. Python's collector
ran about a hundred times over them while they were imported and once more at exit, finding
nothing: about a fifth of ``herald status``'s start-up time. So ``herald`` (``main``) pauses
the collector until the command begins its work (its first ``errors_mapped()`` block, after it
imported what it needs), then freezes what start-up made (``gc.freeze``: no later collection,
the one at exit included, looks at it again) and collects as before. A command that ends
without beginning its work (``--help``, a usage error) resumes when ``main`` returns.

Only ``main`` pauses: code that imports ``herald.cli`` (the tests, typer's CliRunner) runs
with the collector as it found it.
"""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    """Stop automatic collection, if it runs, until ``resume``."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """Start-up is over: freeze what it made and collect as before. Does nothing unless
    ``pause`` stopped the collector (so, also, the second time)."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
