"""The ``herald`` command: one small module per command group, each parse → call → print.

The use cases themselves live in the application layer (``herald.app``); a command parses its
options, calls one use case, and prints the result through ``herald.output``. Importing this
package registers every command on ``app`` (the modules below add themselves to it), and
imports nothing heavy: a command imports what it needs when it runs, so ``herald --help``
starts quickly.

Exit codes: 0 success, 1 operational failure, 2 invalid input. Errors are printed as one line
(plus a hint); tracebacks are for bugs only.
"""

from __future__ import annotations

# In the order `herald --help` lists them.
from herald.cli import launch, preview, enroll, plan, worker, scheduler  # isort: skip
from herald.cli import status, operator, suppress, feedback, serve, dkim  # isort: skip
from herald.cli import audience, db, sink, config, prune  # isort: skip
from herald.cli.base import app

__all__ = ["app", "main"]
# Each module registered its commands when imported above; named here so none is dropped.
COMMAND_MODULES = (
    launch,
    preview,
    enroll,
    plan,
    worker,
    scheduler,
    status,
    operator,
    suppress,
    feedback,
    serve,
    dkim,
    audience,
    db,
    sink,
    config,
    prune,
)


def main() -> None:
    app()
