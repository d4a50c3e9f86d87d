"""``herald worker``: claim and send due jobs."""

from __future__ import annotations

import functools
import json
from typing import Annotated

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
from herald.defaults import DEFAULT_DATABASE_URL, DEFAULT_SMTP_URL
from herald.output import out

# The sending options shared by `herald worker` and `herald run` (herald/cli/scheduler.py).
Concurrency = Annotated[int, typer.Option(min=1, max=1000, help="Sends at once.")]
Lease = Annotated[
    float, typer.Option(min=1.0, help="Lease length in seconds (heartbeats renew it).")
]
RecoveryInterval = Annotated[
    float, typer.Option(min=0.1, help="Seconds between this worker's recovery passes.")
]
ShutdownGrace = Annotated[
    float,
    typer.Option(min=0.0, help="On SIGTERM, how long started sends may take to finish."),
]
RetryBase = Annotated[
    float, typer.Option(min=0.0, help="First retry delay in seconds (doubles each time).")
]
Poll = Annotated[float, typer.Option(min=0.01, help="Idle poll interval, seconds.")]


@app.command()
def worker(
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    smtp_url: SmtpUrl = DEFAULT_SMTP_URL,
    concurrency: Concurrency = 20,
    lease: Lease = 120.0,
    recovery_interval: RecoveryInterval = 5.0,
    shutdown_grace: ShutdownGrace = 30.0,
    until_idle: Annotated[
        bool,
        typer.Option(
            "--until-idle",
            help="Exit 0 when nothing is running and nothing is due within --idle-horizon.",
        ),
    ] = False,
    idle_horizon: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="With --until-idle: keep waiting for jobs (e.g. retries) due within this many "
            "seconds; later steps are left for a later run.",
        ),
    ] = 60.0,
    retry_base: RetryBase = 30.0,
    poll: Poll = 1.0,
    as_json: JsonFlag = False,
    metrics_port: MetricsPort = None,
    metrics_host: MetricsHost = DEFAULT_METRICS_HOST,
    database_wait: DatabaseWait = None,
    log_level: LogLevel = LogLevelName.info,
    log_format: LogFormat = LogFormatName.text,
) -> None:
    """Claim and send due jobs. SIGTERM/SIGINT: finish started sends, release the rest.
    SIGHUP: the same, then start again with the same command (a reload)."""
    start_logging(log_level, log_format)
    from herald.app.readiness import not_ready
    from herald.app.service_logs import worker_started, worker_stopped
    from herald.app.worker import WorkerOptions, build_worker, run_worker
    from herald.metrics import ProcessMetrics
    from herald.metrics_http import metrics_served

    options = WorkerOptions(
        concurrency=concurrency,
        lease=lease,
        recovery_interval=recovery_interval,
        shutdown_grace=shutdown_grace,
        until_idle=until_idle,
        idle_horizon=idle_horizon,
        retry_base=retry_base,
        poll=poll,
    )
    with errors_mapped():
        engine = opened_waiting(database_url, database_wait, service=not until_idle)
        metrics = ProcessMetrics(engine, worker=True)
        the_worker = build_worker(engine, smtp_url, options, observer=metrics.worker)
        owner = the_worker.config.owner
        ready = functools.partial(not_ready, engine)  # /readyz beside /metrics
        with metrics_served(
            metrics.registry, metrics_host, metrics_port, command="herald worker", ready=ready
        ):
            worker_started(database_url, smtp_url, options, owner, command="worker")
            report = run_worker(the_worker, handle_signals=True, on_stopping=_say_stopping)
        worker_stopped(report, options, owner)
        if as_json:
            out.print_json(json.dumps(report.as_dict()))
        else:
            r = report
            line = (
                f"worker done: {r.sent} sent, {r.retried} to retry, {r.failed} failed, "
                f"{r.in_doubt} in doubt, {r.released} released"
            )
            if r.rate_limited:
                line += f", {r.rate_limited} held back by rate limits"
            out.print(line)
    reexec_if_reloading()


def _say_stopping() -> None:
    from herald.logs import say

    say("stopping: finishing started sends, releasing the rest (again to force)", "stopping")
