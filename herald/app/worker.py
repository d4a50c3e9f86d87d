"""Use case ``run_worker``: claim and send due jobs until stopped (or idle)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from sqlalchemy.engine import Engine

from campaigns.error_threshold import ErrorThreshold
from dispatch.instrumentation import NULL_INSTRUMENTATION, Instrumentation
from dispatch.observer import NULL_OBSERVER, WorkerObserver
from dispatch.rates import RateError, parse_domain_rates
from dispatch.store import OutboxStore
from dispatch.transport import RelayUnavailable, TransportConfigError
from dispatch.worker import Worker, WorkerConfig, WorkerReport
from herald.app.reload import install_sighup, reload_request
from herald.errors import ConfigError, HeraldError
from herald.transports import build_transports


@dataclass(frozen=True)
class WorkerOptions:
    """What ``herald worker`` lets the operator choose (the CLI's options, same defaults)."""

    concurrency: int = 20
    lease: float = 120.0
    recovery_interval: float = 5.0
    shutdown_grace: float = 30.0
    until_idle: bool = False
    idle_horizon: float = 60.0
    retry_base: float = 30.0
    poll: float = 1.0

    def config(self) -> WorkerConfig:
        return WorkerConfig(
            concurrency=self.concurrency,
            lease_seconds=self.lease,
            t4_margin_seconds=min(10.0, self.lease / 4),
            until_idle=self.until_idle,
            idle_horizon_seconds=self.idle_horizon,
            retry_base_seconds=self.retry_base,
            poll_interval=self.poll,
            recovery_interval=self.recovery_interval,
            shutdown_grace_seconds=self.shutdown_grace,
        )


def build_worker(
    engine: Engine,
    smtp_url: str,
    options: WorkerOptions,
    *,
    environ: Mapping[str, str] | None = None,
    instrumentation: Instrumentation = NULL_INSTRUMENTATION,
    store: OutboxStore | None = None,
    observer: WorkerObserver | None = None,
) -> Worker:
    """A worker with the email and webhook transports; ConfigError for a bad setting. It
    pauses campaigns whose sends keep failing (``campaigns.error_threshold``).

    ``instrumentation`` and ``store`` are the seams the chaos suite's worker
    (tests/chaos/worker.py) uses to add crash points or a naive store; the CLI passes neither.
    ``observer`` counts what the worker does (herald.metrics; None: nothing counted).
    """
    transports = build_transports(smtp_url, environ, instrumentation=instrumentation)
    config = replace(options.config(), domain_rates=domain_rates(environ))
    return Worker(
        engine,
        transports,
        config,
        instrumentation=instrumentation,
        store=store,
        failure_watch=ErrorThreshold(),
        observer=observer or NULL_OBSERVER,
    )


def domain_rates(environ: Mapping[str, str] | None = None) -> dict[str, float]:
    """Sends per second by recipient domain: the defaults and ``HERALD_DOMAIN_RATES``
    (docs/deliverability/rate-limits.md); ConfigError for a value that cannot be read."""
    env = os.environ if environ is None else environ
    try:
        rates = parse_domain_rates(env.get("HERALD_DOMAIN_RATES"))
    except RateError as exc:
        raise ConfigError(f"HERALD_DOMAIN_RATES: {exc}", hint=exc.hint) from None
    return {domain: rate.per_second for domain, rate in rates.items()}


def run_worker(
    worker: Worker,
    *,
    handle_signals: bool = False,
    on_stopping: Callable[[], None] | None = None,
) -> WorkerReport:
    """Run ``worker`` to its end and return what it did.

    With ``handle_signals`` (the CLI), SIGTERM/SIGINT stop it gracefully (``on_stopping`` is
    told) and a second one exits at once: leases keep that safe (unstarted claims expire back
    to pending, started sends become in doubt through recovery). SIGHUP stops it gracefully
    too, for a reload (herald.app.reload).
    """
    try:
        return asyncio.run(_run(worker, handle_signals, on_stopping))
    except TransportConfigError as exc:
        raise ConfigError(exc.message, hint=exc.hint) from None
    except RelayUnavailable as exc:
        raise relay_down(exc, worker.report) from None


class RelayDown(HeraldError):
    """``--until-idle`` stopped because the relay could not be reached (exit 1: operational,
    the jobs are fine and will go out once it is back)."""


def relay_down(exc: RelayUnavailable, report: WorkerReport) -> RelayDown:
    """The one line ``herald worker --until-idle`` ends with when the relay is unreachable."""
    done = "nothing sent" if not report.sent else f"{report.sent} sent before it"
    return RelayDown(f"{exc.line}; {done}; the rest stay pending, no attempt counted")


async def _run(
    worker: Worker, handle_signals: bool, on_stopping: Callable[[], None] | None
) -> WorkerReport:
    if handle_signals:
        loop = asyncio.get_running_loop()
        signals_seen = 0

        def on_signal() -> None:
            nonlocal signals_seen
            signals_seen += 1
            if signals_seen == 1:
                if reload_request.cancel():
                    return  # stopping already, for a SIGHUP: now it stops for good
                if on_stopping is not None:
                    on_stopping()
                worker.stop()
            else:
                os._exit(130)

        def stop_for_reload() -> None:
            if on_stopping is not None:
                on_stopping()
            worker.stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        # SIGHUP: the same graceful stop, then the CLI re-executes the command.
        install_sighup(stop_for_reload, stopping=lambda: signals_seen > 0)
    return await worker.run()
