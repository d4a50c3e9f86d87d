"""Prometheus metrics of one Herald process (docs/operations/metrics.md lists every name).

``ProcessMetrics`` owns a private ``CollectorRegistry`` (never prometheus_client's global one,
so two in one process — tests — do not collide) holding:

- what this process counts as it happens: a worker's sends, transport durations, claim batches,
  recoveries and relay circuits (``WorkerMetrics``, the ``dispatch.observer.WorkerObserver``
  the worker is built with); a scheduler's passes, fires and materialised jobs
  (``SchedulerMetrics``);
- what the database says at scrape time (``herald.metrics_outbox.OutboxCollector``): jobs by
  campaign and state, in-doubt jobs, the oldest live lease, relays as last recorded.

Counters only ever count what this process did since it started; Prometheus' ``rate()`` and
``increase()`` turn them into sends per second across restarts.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from herald.metrics_outbox import OutboxCollector

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from dispatch.outbox.jobs import RecoveryReport

EMAIL = "email"  # the channel of SMTP sends (dispatch.transport)
OUTCOMES = ("sent", "failed", "retry", "in_doubt")
RECOVERY_CATEGORIES = ("released", "in_doubt", "dead", "resent")
# A send's transport call: a local relay answers in milliseconds, a remote MX in seconds; a
# minute and over is a stuck connection.
SEND_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
# A claim takes at most twice the concurrency (at most 1000 sends at once).
CLAIM_BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)


class WorkerMetrics:
    """A worker's ``WorkerObserver``: each call one counter or gauge update, nothing else."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.sends = Counter(
            "herald_sends",
            "Send outcomes this process recorded, by outcome.",
            ["outcome"],
            registry=registry,
        )
        for outcome in OUTCOMES:
            self.sends.labels(outcome)  # every outcome present from the start, at 0
        self.send_seconds = Histogram(
            "herald_smtp_send_seconds",
            "Duration of each email delivery after T4 (DATA to the receiver's answer), seconds.",
            buckets=SEND_SECONDS_BUCKETS,
            registry=registry,
        )
        self.claim_batch = Histogram(
            "herald_claim_batch_size",
            "Jobs returned by each claim that returned any.",
            buckets=CLAIM_BATCH_BUCKETS,
            registry=registry,
        )
        self.recoveries = Counter(
            "herald_recoveries",
            "Jobs this process's recovery passes moved, by category.",
            ["category"],
            registry=registry,
        )
        for category in RECOVERY_CATEGORIES:
            self.recoveries.labels(category)
        self.relay_up = Gauge(
            "herald_relay_up",
            "1 while this worker's circuit to the relay is closed (reachable), 0 while open.",
            ["relay"],
            registry=registry,
        )

    def on_claim_batch(self, size: int) -> None:
        self.claim_batch.observe(size)

    def on_outcome(self, outcome: str) -> None:
        self.sends.labels(outcome).inc()

    def on_transport_call(self, channel: str, seconds: float) -> None:
        if channel == EMAIL:  # webhook steps' requests would blur the relay's latency
            self.send_seconds.observe(seconds)

    def on_recovery(self, report: RecoveryReport) -> None:
        for category in RECOVERY_CATEGORIES:
            moved = int(getattr(report, category))
            if moved:
                self.recoveries.labels(category).inc(moved)

    def on_relay_state(self, relay: str, up: bool) -> None:
        self.relay_up.labels(relay).set(1 if up else 0)


class PassResult(Protocol):
    """What the scheduler's metrics read of a pass (herald.app.scheduler.PassOutcome)."""

    def as_dict(self) -> dict[str, object]: ...


class SchedulerMetrics:
    """The scheduler loop's observer (herald.app.scheduler.SchedulerObserver)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.passes = Counter(
            "herald_scheduler_passes",
            "Scheduler passes run by this process.",
            registry=registry,
        )
        self.pass_errors = Counter(
            "herald_scheduler_pass_errors",
            "Scheduler passes that ended in a database error (retried with backoff).",
            registry=registry,
        )
        self.fires = Counter(
            "herald_scheduler_fires",
            "Occurrences this process fired (fanned out into jobs), by campaign.",
            ["campaign"],
            registry=registry,
        )
        self.materialised = Counter(
            "herald_jobs_materialised",
            "Jobs this process's passes inserted into the outbox, by campaign.",
            ["campaign"],
            registry=registry,
        )

    def on_pass(self, outcome: PassResult) -> None:
        self.passes.inc()
        campaigns = outcome.as_dict().get("campaigns")
        if not isinstance(campaigns, list):
            return  # a pass without per-campaign detail (a test's stand-in)
        for campaign in campaigns:
            name = str(campaign.get("campaign", ""))
            fired = campaign.get("fired") or []
            new_jobs = int(campaign.get("new_jobs") or 0)
            if fired:
                self.fires.labels(name).inc(len(fired))
            if new_jobs:
                self.materialised.labels(name).inc(new_jobs)

    def on_pass_failed(self) -> None:
        self.pass_errors.inc()


class ProcessMetrics:
    """One process's registry: the database's view, plus the worker's and the scheduler's
    counters when the process runs them."""

    def __init__(
        self,
        engine: Engine | None = None,
        *,
        worker: bool = False,
        scheduler: bool = False,
        clock: Callable[[], datetime] | None = None,
        cache_seconds: float = 2.0,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.worker = WorkerMetrics(self.registry) if worker else None
        self.scheduler = SchedulerMetrics(self.registry) if scheduler else None
        self.outbox: OutboxCollector | None = None
        if engine is not None:
            self.outbox = OutboxCollector(engine, clock=clock, cache_seconds=cache_seconds)
            self.registry.register(self.outbox)
