"""``herald prune``: drop the messages of old finished jobs, keep their keys (herald.app.prune)."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from herald.cli.base import CampaignOption, DatabaseUrl, JsonFlag, app, errors_mapped, opened
from herald.cli.log_options import LogFormat, LogFormatName, LogLevel, LogLevelName, start_logging
from herald.defaults import DEFAULT_DATABASE_URL
from herald.output import err, out

if TYPE_CHECKING:
    from herald.app.prune import PruneReport

DEFAULT_BATCH = 1000  # herald.app.prune.DEFAULT_BATCH, without importing it for --help
EXIT_INTERRUPTED = 130  # the shell's code for a command stopped by Ctrl-C


@app.command()
def prune(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            help="Prune jobs finished and unchanged for this long (e.g. 90d, 12w; at least 1d).",
        ),
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would be pruned; change nothing.")
    ] = False,
    campaign: CampaignOption = None,
    batch_size: Annotated[
        int, typer.Option("--batch-size", help="Jobs per transaction (1-5000).")
    ] = DEFAULT_BATCH,
    keep_journal: Annotated[
        bool,
        typer.Option(
            "--keep-journal", help="Keep the pruned jobs' whole journal, not only its final event."
        ),
    ] = False,
    vacuum: Annotated[
        bool,
        typer.Option(
            "--vacuum",
            help="Then VACUUM (PostgreSQL: space reusable; SQLite: the file shrinks, locked "
            "meanwhile).",
        ),
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Allow --older-than under one day.")
    ] = False,
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    as_json: JsonFlag = False,
    log_level: LogLevel = LogLevelName.info,
    log_format: LogFormat = LogFormatName.text,
) -> None:
    """Drop the messages of old sent, failed and cancelled jobs; keep their keys."""
    from herald.app.common import operator_name
    from herald.app.prune import PruneOptions, retention_age, start
    from herald.app.prune import prune as run_prune

    start_logging(log_level, log_format)  # the operator's record: event outbox_pruned
    with errors_mapped():
        options = PruneOptions(
            older_than=retention_age(older_than, force=force),
            campaign=campaign,
            batch_size=batch_size,
            dry_run=dry_run,
            keep_journal=keep_journal,
            vacuum=vacuum and not dry_run,
        )
        engine = opened(database_url)
        report = start(engine, options)
        with _stop_on_signals() as stop:
            try:
                run_prune(engine, options, report, actor=f"prune:{operator_name()}", stop=stop)
            except KeyboardInterrupt:
                report.stopped = True  # the second Ctrl-C: the open batch was rolled back
        if report.stopped:
            err.print(
                f"stopped: {report.batches} batch(es) committed, {report.jobs} job(s) pruned, "
                "nothing half-done; run the same command again to continue"
            )
        _print(report, engine.dialect.name, as_json)
        if report.stopped:
            raise typer.Exit(EXIT_INTERRUPTED)


@contextmanager
def _stop_on_signals() -> Iterator[Callable[[], bool]]:
    """Ctrl-C or SIGTERM: finish the batch that is running, then stop. A second Ctrl-C stops at
    once (its batch rolls back). Either way every committed batch is whole."""
    asked = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        if asked.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        asked.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield asked.is_set
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _print(report: PruneReport, dialect: str, as_json: bool) -> None:
    if as_json:
        out.print_json(json.dumps(report.as_dict()))
        return
    verb = "would prune" if report.dry_run else "pruned"
    out.print(
        f"{verb} {report.jobs} job(s) finished before {report.cutoff:%Y-%m-%d %H:%M:%S} UTC: "
        f"{_size(report.payload_bytes)} of messages dropped, "
        f"{report.events} journal row(s) deleted"
    )
    if report.dry_run or not report.jobs:
        return
    if report.vacuumed:
        out.print("vacuumed: " + _sizes(report))
    elif dialect == "postgresql":
        out.print(
            "PostgreSQL reuses the freed space for new rows once (auto)vacuum has run; the "
            "files do not shrink (VACUUM FULL or pg_repack would, under an exclusive lock). "
            "See docs/operations/retention.md."
        )
    else:
        out.print("SQLite reuses the freed pages; `--vacuum` shrinks the file.")


def _sizes(report: PruneReport) -> str:
    return ", ".join(
        f"{name} {_size(report.sizes_before.get(name, 0))} → {_size(size)}"
        for name, size in report.sizes_after.items()
    )


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "kB", "MB"):
        if value < 1000:
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"
