"""A ``herald`` process started ahead of need, for a test that restarts a killed one at once:

    python -m tests.support.warm_herald COMMAND [ARGS...]

imports what ``herald COMMAND`` runs on, then waits for one line on stdin. ``go``: it runs
herald's own CLI (``herald.cli.main``, what the ``herald`` console script calls) as
``herald COMMAND ARGS...``; anything else, or end of input: it exits without running anything.

Why: a ``herald`` process spends 1-2 s of CPU importing before it does anything, several
seconds on a loaded machine. tests/processes/test_scheduler_processes.py SIGKILLs a scheduler
around every fire, every few seconds, and restarted ones were killed again while still
importing: their kills hit no scheduler at all and the work waited for the last start. A
spare that has already imported is running the scheduler's loop the moment it is told to go.
Nothing else differs from ``herald COMMAND``: same code, arguments, signals, output and exit
code; the imports only happen before the clock starts.
"""

from __future__ import annotations

import importlib
import sys

GO = "go"
# What each command imports when it runs (its command module, then the modules its body
# imports, then the libraries they need). Only a warm-up: a name that no longer exists is
# skipped (it costs time after `go`, never correctness).
PRELOAD: dict[str, tuple[str, ...]] = {
    "scheduler": (
        "herald.cli",
        "herald.cli.registry",
        "herald.cli.scheduler",
        "herald.app.readiness",
        "herald.app.scheduler",
        "herald.app.scheduler_pass",
        "herald.app.service_logs",
        "herald.app.unsubscribe",
        "herald.metrics",
        "herald.metrics_http",
        "scheduler.passes",
        "apscheduler.schedulers.asyncio",
        "apscheduler.triggers.date",
        "apscheduler.triggers.interval",
        "psycopg",
        "sqlalchemy.dialects.postgresql.psycopg",
        "typer.main",
    ),
}


def preload(command: str) -> None:
    for module in PRELOAD[command]:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise


def main() -> None:
    command, *args = sys.argv[1:]
    preload(command)
    if sys.stdin.readline().strip() != GO:
        return
    sys.argv = ["herald", command, *args]
    from herald.cli import main as herald_main

    herald_main()


if __name__ == "__main__":
    main()
