"""``herald scheduler`` and ``herald run``: fire schedules into the outbox (and send, for run)."""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Annotated

import typer

from herald.cli.base import (
    DatabaseUrl,
    DatabaseWait,
    JsonFlag,
    SmtpUrl,
    app,
    errors_mapped,
    opened_waiting,
    reexec_if_reloading,
)
from herald.cli.log_options import LogFormat, LogFormatName, LogLevel, LogLevelName, start_logging
from herald.cli.metrics_options import DEFAULT_METRICS_HOST, MetricsHost, MetricsPort
from herald.cli.worker import (
    Concurrency,
    Lease,
    Poll,
    RecoveryInterval,
    RetryBase,
    ShutdownGrace,
)
from herald.defaults import DEFAULT_DATABASE_URL, DEFAULT_SMTP_URL
from herald.output import out

if TYPE_CHECKING:
    from herald.app.scheduler import SchedulerService
    from herald.metrics import ProcessMetrics

Tick = Annotated[
    float,
    typer.Option(
        min=0.1,
        help="Seconds between passes when nothing falls due sooner: how soon campaigns "
        "launched, paused or changed elsewhere are noticed.",
    ),
]


@app.command()
def scheduler(
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    tick: Tick = 30.0,
    once: Annotated[
        bool, typer.Option("--once", help="Run one pass and exit (for cron, or a check).")
    ] = False,
    as_json: JsonFlag = False,
    metrics_port: MetricsPort = None,
    metrics_host: MetricsHost = DEFAULT_METRICS_HOST,
    database_wait: DatabaseWait = None,
    log_level: LogLevel = LogLevelName.info,
    log_format: LogFormat = LogFormatName.text,
) -> None:
    """Fire due schedules, one-shots and drip steps into the outbox, until SIGTERM/SIGINT
    (SIGHUP: stop the same way, then start again with the same command).

    High availability: run two or more on one database (no leader; a fire made twice is one).
    """
    start_logging(log_level, log_format)
    from herald.app.readiness import not_ready
    from herald.app.scheduler import run_scheduler, run_scheduler_once
    from herald.app.service_logs import scheduler_started
    from herald.metrics_http import metrics_served

    with errors_mapped():
        service, metrics = _service(database_url, tick, database_wait, service_mode=not once)
        if once:
            report = run_scheduler_once(service)
            if as_json:
                out.print_json(json.dumps(report.as_dict()))
            else:
                out.print(report.line())
            return
        ready = functools.partial(not_ready, service.engine)  # /readyz beside /metrics
        served = metrics_served(
            metrics.registry, metrics_host, metrics_port, command="herald scheduler", ready=ready
        )
        with served:
            scheduler_started(database_url, tick, command="scheduler")
            totals = run_scheduler(
                service, handle_signals=True, on_stopping=_say_scheduler_stopping
            )
        if as_json:
            out.print_json(json.dumps(totals.as_dict()))
        else:
            out.print(
                f"scheduler done: {totals.passes} pass(es), {totals.busy_passes} fired "
                f"something, {totals.errors} database error(s)"
            )
    reexec_if_reloading()


@app.command()
def run(
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    smtp_url: SmtpUrl = DEFAULT_SMTP_URL,
    tick: Tick = 30.0,
    concurrency: Concurrency = 20,
    lease: Lease = 120.0,
    recovery_interval: RecoveryInterval = 5.0,
    shutdown_grace: ShutdownGrace = 30.0,
    retry_base: RetryBase = 30.0,
    poll: Poll = 1.0,
    as_json: JsonFlag = False,
    metrics_port: MetricsPort = None,
    metrics_host: MetricsHost = DEFAULT_METRICS_HOST,
    database_wait: DatabaseWait = None,
    log_level: LogLevel = LogLevelName.info,
    log_format: LogFormat = LogFormatName.text,
) -> None:
    """Scheduler, worker and recovery in one process: one machine, the embedded database.
    SIGHUP: stop gracefully, then start again with the same command (a reload).

    To scale out, run `herald scheduler` and `herald worker` as separate processes instead.
    """
    start_logging(log_level, log_format)
    from herald.app.readiness import not_ready
    from herald.app.run import run_all
    from herald.app.service_logs import worker_started, worker_stopped
    from herald.app.worker import WorkerOptions, build_worker
    from herald.metrics_http import metrics_served

    options = WorkerOptions(
        concurrency=concurrency,
        lease=lease,
        recovery_interval=recovery_interval,
        shutdown_grace=shutdown_grace,
        retry_base=retry_base,
        poll=poll,
    )
    with errors_mapped():
        service, metrics = _service(
            database_url, tick, database_wait, service_mode=True, worker=True
        )
        worker = build_worker(service.engine, smtp_url, options, observer=metrics.worker)
        owner = worker.config.owner
        ready = functools.partial(not_ready, service.engine)
        with metrics_served(
            metrics.registry, metrics_host, metrics_port, command="herald run", ready=ready
        ):
            worker_started(database_url, smtp_url, options, owner, command="run")
            report = run_all(worker, service, handle_signals=True, on_stopping=_say_run_stopping)
        worker_stopped(report.worker, options, owner)
        if as_json:
            out.print_json(json.dumps(report.as_dict()))
        else:
            w, s = report.worker, report.scheduler
            out.print(
                f"run done: {s.passes} scheduler pass(es); {w.sent} sent, {w.retried} to retry, "
                f"{w.failed} failed, {w.in_doubt} in doubt, {w.released} released"
            )
    reexec_if_reloading()


def _service(
    database_url: str,
    tick: float,
    database_wait: str | None,
    *,
    service_mode: bool,
    worker: bool = False,
) -> tuple[SchedulerService, ProcessMetrics]:
    """The scheduler loop and the process's metrics (with a worker's, for ``herald run``)."""
    from herald.app.scheduler import SchedulerOptions, SchedulerService
    from herald.app.unsubscribe import links_from_env
    from herald.metrics import ProcessMetrics

    links = links_from_env()  # a malformed setting stops here, before any pass
    engine = opened_waiting(database_url, database_wait, service=service_mode)
    metrics = ProcessMetrics(engine, worker=worker, scheduler=True)
    service = SchedulerService(
        engine,
        options=SchedulerOptions(tick=tick),
        say=_say_pass,
        links=links,
        observer=metrics.scheduler,
    )
    return service, metrics


def _say_pass(line: str) -> None:
    import logging

    from herald.app.scheduler import STARTED
    from herald.logs import say

    if line.startswith(STARTED):
        say(line, "scheduler_running")
    elif line.startswith("database error"):
        say(line, "database_error", level=logging.WARNING)
    else:
        say(line, "scheduler_pass")


def _say_scheduler_stopping() -> None:
    from herald.logs import say

    say("stopping: finishing the current pass (again to force)", "stopping")


def _say_run_stopping() -> None:
    from herald.logs import say

    say(
        "stopping: finishing the current pass and started sends, releasing the rest "
        "(again to force)",
        "stopping",
    )
