"""One harness per outbox implementation, so the same contract tests drive memory, SQLite and
PostgreSQL: a transaction, the few things a test must do behind the outbox's back (expire
leases, set a campaign's status) and the raw journal and states to check invariants against."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.models import campaign_table
from dispatch.models import send_event, send_job, send_key
from dispatch.outbox import MemoryOutbox, NewJob, SqlOutbox


def empty_outbox(conn: sa.Connection) -> None:
    """Delete every job, its journal and its key (tests that reuse one database between
    examples: a key left in send_key would make its job exist already)."""
    for table in (send_event, send_key, send_job):
        conn.execute(sa.delete(table))


class Harness(Protocol):
    name: str
    outbox: Any  # Outbox[Tx] for this harness's Tx

    def begin(self) -> AbstractContextManager[Any]: ...
    def expire_leases(self, seconds_ago: float = 300) -> None: ...
    def set_campaign_status(self, campaign: str, status: str) -> None: ...
    def journal(self) -> list[tuple[int, str | None, str]]: ...  # (job id, from, to) by id
    def states(self) -> dict[int, str]: ...


@dataclass
class ManualClock:
    """A clock a test moves by hand (the memory outbox's ``clock`` parameter)."""

    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class MemoryHarness:
    name = "memory"

    def __init__(self, clock: ManualClock | None = None) -> None:
        self.clock = clock or ManualClock(datetime.now(UTC))
        self.outbox = MemoryOutbox(clock=self.clock)

    def begin(self) -> AbstractContextManager[Any]:
        return self.outbox.begin()

    def expire_leases(self, seconds_ago: float = 300) -> None:
        with self.outbox.begin() as tx:
            for job in tx.data.jobs.values():
                if job.lease_expires_at is not None:
                    job.lease_expires_at = self.clock() - timedelta(seconds=seconds_ago)

    def set_campaign_status(self, campaign: str, status: str) -> None:
        with self.outbox.begin() as tx:
            self.outbox.set_campaign_status(tx, campaign, status)

    def journal(self) -> list[tuple[int, str | None, str]]:
        with self.outbox.begin() as tx:
            return [(e.job_id, e.from_state, e.to_state) for e in tx.data.events]

    def states(self) -> dict[int, str]:
        with self.outbox.begin() as tx:
            return {job.id: job.state for job in tx.data.jobs.values()}


class SqlHarness:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.name = engine.dialect.name
        self.outbox = SqlOutbox(engine.dialect.name)

    def begin(self) -> AbstractContextManager[Any]:
        return self.engine.begin()

    def expire_leases(self, seconds_ago: float = 300) -> None:
        """What a long pause looks like from the database: the lease ran out."""
        with self.engine.begin() as conn:
            conn.execute(
                sa.update(send_job)
                .where(send_job.c.lease_expires_at.is_not(None))
                .values(lease_expires_at=datetime.now(UTC) - timedelta(seconds=seconds_ago))
            )

    def set_campaign_status(self, campaign: str, status: str) -> None:
        with self.engine.begin() as conn:
            changed = conn.execute(
                sa.update(campaign_table)
                .where(campaign_table.c.name == campaign)
                .values(status=status)
            ).rowcount
            if not changed:
                conn.execute(
                    sa.insert(campaign_table).values(
                        name=campaign,
                        spec="",
                        spec_hash="",
                        status=status,
                        launched_at=datetime.now(UTC),
                    )
                )

    def journal(self) -> list[tuple[int, str | None, str]]:
        E = send_event.c
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(E.job_id, E.from_state, E.to_state).order_by(E.id))
            return [(r.job_id, r.from_state, r.to_state) for r in rows]

    def states(self) -> dict[int, str]:
        with self.engine.connect() as conn:
            return dict(conn.execute(sa.select(send_job.c.id, send_job.c.state)).all())


def new_job(
    key: str,
    when: datetime,
    *,
    campaign: str = "c",
    step: str = "s",
    policy: str = "hold",
    max_send_attempts: int = 5,
    max_claims: int = 10,
    payload: bytes = b"Subject: x\r\n\r\nbody\r\n",
    list_scope: str | None = None,
) -> NewJob:
    return NewJob(
        key=key,
        key_tuple="[]",
        campaign=campaign,
        step=step,
        occurrence_at=when,
        channel="email" if policy == "hold" else "webhook",
        sender="news@herald.test",
        recipient=f"{key}@example.com",
        message_id=f"<{key}@herald.test>",
        payload=payload,
        not_before=when,
        max_send_attempts=max_send_attempts,
        max_claims=max_claims,
        in_doubt_policy=policy,
        list_scope=list_scope,
    )
