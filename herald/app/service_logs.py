"""The start-up and shutdown lines of the long-running commands (docs/operations/logging.md).

A worker in service mode says when it starts (version, database and relay redacted, its
settings) and when it stops (what it did); ``--until-idle`` says both at debug only: it is a
batch command whose stdout line already reports the run, and a wrong relay must stay one line.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from functools import cache
from typing import TYPE_CHECKING

from dispatch.egress.redact import redact_setting

if TYPE_CHECKING:
    from dispatch.worker import WorkerReport
    from herald.app.worker import WorkerOptions

worker_log = logging.getLogger("herald.worker")
scheduler_log = logging.getLogger("herald.scheduler")


@cache
def herald_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("herald")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def worker_started(
    database_url: str, smtp_url: str, options: WorkerOptions, worker: str, *, command: str
) -> None:
    level = logging.DEBUG if options.until_idle else logging.INFO
    database, relay = redact_setting(database_url), redact_setting(smtp_url)
    worker_log.log(
        level,
        "herald %s %s started: database %s, relay %s",
        herald_version(),
        command,
        database,
        relay,
        extra={
            "event": "worker_started",
            "worker": worker,
            "version": herald_version(),
            "command": command,
            "database": database,
            "relay": relay,
            "settings": asdict(options),
        },
    )


def worker_stopped(report: WorkerReport, options: WorkerOptions, worker: str) -> None:
    level = logging.DEBUG if options.until_idle else logging.INFO
    counts = report.as_dict()
    worker_log.log(
        level,
        "worker stopped: %d sent, %d to retry, %d failed, %d in doubt, %d released",
        report.sent,
        report.retried,
        report.failed,
        report.in_doubt,
        report.released,
        extra={"event": "worker_stopped", "worker": worker, **counts},
    )


def scheduler_started(database_url: str, tick: float, *, command: str) -> None:
    database = redact_setting(database_url)
    scheduler_log.info(
        "herald %s %s started: database %s",
        herald_version(),
        command,
        database,
        extra={
            "event": "scheduler_started",
            "version": herald_version(),
            "command": command,
            "database": database,
            "settings": {"tick": tick},
        },
    )
