"""The outbox as Prometheus gauges, read from the database when scraped (with a short cache).

Every process that serves metrics (worker, scheduler, ``herald serve``) can answer these: they
describe the shared database, not the process, so with several workers scrape one of them (or
``herald serve``) for these, or aggregate with ``max``. Labels stay bounded: a campaign's name
and a job state (7 values); a relay's redacted URL.

A scrape that cannot read the database still answers: ``herald_database_up`` is 0 and the
database's gauges are left out (a gauge of 0 would read as "nothing pending").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from dispatch.models import send_event, send_job
from dispatch.states import LEASED, State
from dispatch.store import OutboxStore
from herald.db import reading as read_only

STATES = tuple(state.value for state in State)


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class OutboxReading:
    """One read of the database: what the gauges show."""

    jobs: dict[tuple[str, str], int] = field(default_factory=dict)  # (campaign, state) -> n
    oldest_lease_at: datetime | None = None  # when the oldest live lease was claimed
    relays: dict[str, bool] = field(default_factory=dict)  # relay -> reachable
    read_at: datetime | None = None


def read_outbox(engine: Engine, now: datetime) -> OutboxReading:
    """Jobs by campaign and state, the oldest live lease, the relays' recorded states."""
    store = OutboxStore(engine.dialect.name)
    with read_only(engine) as conn:
        jobs: dict[tuple[str, str], int] = {}
        for campaign, _step, state, n in store.counts(conn):
            jobs[(campaign, state)] = jobs.get((campaign, state), 0) + n
        oldest = conn.scalar(_oldest_lease())
        relays = {row.relay: row.state == "ok" for row in store.relay_statuses(conn)}
    return OutboxReading(jobs, oldest, relays, now)


def _oldest_lease() -> sa.Select[Any]:
    """When the oldest lease still held (claimed or sending) was taken: its claim's journal row
    (the claim is the event whose token is the job's current lease token)."""
    j, e = send_job.c, send_event.c
    return (
        sa.select(sa.func.min(e.at))
        .select_from(send_job.join(send_event, e.job_id == j.id))
        .where(
            j.state.in_([state.value for state in LEASED]),
            e.token == j.lease_token,
            e.to_state == State.CLAIMED.value,
        )
    )


class OutboxCollector(Collector):
    """A prometheus_client collector reading ``engine`` at most once per ``cache_seconds``."""

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Callable[[], datetime] | None = None,
        cache_seconds: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.clock = clock or _utc_now
        self.cache_seconds = cache_seconds
        self.monotonic = monotonic
        self._lock = threading.Lock()  # scrapes may come from several server threads
        self._cached: tuple[float, OutboxReading | None] | None = None

    def describe(self) -> Iterable[Metric]:
        # Registration must not read the database: the names only.
        return [_database_up(), *outbox_families(None, None)]

    def collect(self) -> Iterable[Metric]:
        reading = self.reading()
        up = _database_up()
        up.add_metric([], 0 if reading is None else 1)
        return [up, *(outbox_families(reading, self.clock()) if reading is not None else [])]

    def reading(self) -> OutboxReading | None:
        """The cached reading if fresh, else a new one; None if the database cannot be read."""
        with self._lock:
            now = self.monotonic()
            if self._cached is not None and now - self._cached[0] < self.cache_seconds:
                return self._cached[1]
            try:
                reading: OutboxReading | None = read_outbox(self.engine, self.clock())
            except SQLAlchemyError:
                reading = None
            self._cached = (now, reading)
            return reading


def _database_up() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "herald_database_up", "1 if this scrape could read the database, else 0."
    )


def outbox_families(reading: OutboxReading | None, now: datetime | None) -> Sequence[Metric]:
    jobs = GaugeMetricFamily(
        "herald_jobs",
        "Jobs in the outbox, by campaign and state (read from the database at scrape time).",
        labels=["campaign", "state"],
    )
    in_doubt = GaugeMetricFamily(
        "herald_jobs_in_doubt",
        "Jobs in doubt (sent or not, unknown): each needs an operator's decision.",
    )
    lease_age = GaugeMetricFamily(
        "herald_lease_oldest_age_seconds",
        "Age of the oldest lease held by any worker (0 when none is held).",
    )
    relay = GaugeMetricFamily(
        "herald_relay_reachable",
        "1 if the relay was last recorded reachable by a worker, 0 if unreachable.",
        labels=["relay"],
    )
    if reading is not None and now is not None:
        campaigns = sorted({campaign for campaign, _ in reading.jobs})
        for campaign in campaigns:
            for state in STATES:  # every state, 0 included: absent would not read as 0
                jobs.add_metric([campaign, state], reading.jobs.get((campaign, state), 0))
        in_doubt.add_metric(
            [], sum(n for (_, state), n in reading.jobs.items() if state == State.IN_DOUBT.value)
        )
        oldest = reading.oldest_lease_at
        age = 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())
        lease_age.add_metric([], age)
        for name, reachable in sorted(reading.relays.items()):
            relay.add_metric([name], 1 if reachable else 0)
    return [jobs, in_doubt, lease_age, relay]
