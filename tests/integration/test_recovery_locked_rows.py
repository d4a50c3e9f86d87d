"""Recovery never waits for a row another transaction holds (dispatch/outbox/recovery.py).

A worker frozen in the middle of a transaction (SIGSTOP, a paused VM, a process swapped out)
keeps the rows it wrote locked until it resumes or its connection dies. Recovery used to wait
for them: its transaction runs alone in its worker (the committer's exclusive rule), so that
worker stopped altogether, and so did every other worker at its next recovery pass. Here an
open transaction plays the frozen worker: it holds rows of every kind recovery takes (R1–R4),
and recovery must take the others at once and leave those for a pass after the lock is gone.

PostgreSQL only: SQLite has one writer, so a transaction left open there holds the whole
database, recovery included (Herald's SQLite is one host's embedded outbox).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from bench.drain import NoopTransport, bench_jobs, enqueue
from dispatch.models import send_job
from dispatch.store import OutboxStore
from dispatch.worker import Worker, WorkerConfig
from tests.support.outboxes import empty_outbox, new_job

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
# Long enough that a recovery which waits for the held rows fails with an error (instead of
# hanging the test); one that does not wait never comes near it.
LOCK_TIMEOUT = "5s"
DEADLINE_SECONDS = 30.0  # for the worker's drain beside the held row

# Each kind of job recovery takes, and where R1–R4 put it.
KINDS = {
    "claimed": "pending",  # R1: an expired claim, never started
    "sending": "in_doubt",  # R2: an expired send, past the grace
    "exhausted": "failed",  # R3: pending with no attempt left
    "resend": "pending",  # R4: in doubt, on a channel whose receiver dedupes
}


# Jobs recovery must leave alone, locked or not: a live claim, a pending job with budget left.
UNTOUCHED = ("live", "due")


def _place(conn: sa.Connection, ids: list[int], kind: str) -> None:
    """Put jobs where a crashed worker or an exhausted budget leaves them (behind the outbox's
    back, as a test of recovery alone may)."""
    if not ids or kind == "due":
        return
    expired = sa.func.now() - sa.text("interval '5 minutes'")
    values: dict[str, dict[str, object]] = {
        "live": {
            "state": "claimed",
            "lease_owner": "alive",
            "lease_expires_at": sa.func.now() + sa.text("interval '5 minutes'"),
        },
        "claimed": {"state": "claimed", "lease_owner": "frozen", "lease_expires_at": expired},
        "sending": {
            "state": "sending",
            "lease_owner": "frozen",
            "lease_expires_at": expired,
            "send_started_at": expired,
            "send_attempts": 1,
        },
        "exhausted": {"send_attempts": send_job.c.max_send_attempts},
        "resend": {"state": "in_doubt", "send_attempts": 1},
    }
    conn.execute(sa.update(send_job).where(send_job.c.id.in_(ids)).values(values[kind]))


@pytest.fixture
def jobs_of_every_kind(pg: Engine) -> dict[str, tuple[int, int]]:
    """Two jobs of each kind: (the one the frozen transaction will hold, a free one)."""
    store = OutboxStore("postgresql")
    found: dict[str, tuple[int, int]] = {}
    with pg.begin() as conn:
        for kind in KINDS:
            policy = "resend" if kind == "resend" else "hold"
            store.enqueue(conn, [new_job(f"{kind}-{i}", EPOCH, policy=policy) for i in (0, 1)])
            ids = conn.execute(
                sa.select(send_job.c.id).where(send_job.c.key.like(f"{kind}-%")).order_by("id")
            ).scalars()
            held, free = ids
            _place(conn, [held, free], kind)
            found[kind] = (held, free)
    return found


@pytest.fixture
def frozen(pg: Engine) -> Iterator[sa.Connection]:
    """A transaction left open, as a frozen worker's: whatever it writes stays locked until
    the test ends it (rolled back at the end in any case)."""
    with pg.connect() as conn:
        conn.begin()
        try:
            yield conn
        finally:
            conn.rollback()


def _hold(conn: sa.Connection, ids: list[int]) -> None:
    """Write the rows, as a worker's T4 or outcome statement would, and not commit."""
    conn.execute(sa.update(send_job).where(send_job.c.id.in_(ids)).values(updated_at=sa.func.now()))


def _states(engine: Engine) -> dict[int, str]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(send_job.c.id, send_job.c.state))
        return {row.id: row.state for row in rows}


def _recover(engine: Engine) -> None:
    store = OutboxStore("postgresql")
    with engine.begin() as conn:
        conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        store.recover(conn, grace_seconds=2, actor="recovery")


def test_recovery_takes_every_row_but_the_held_ones_and_those_once_released(
    pg: Engine, jobs_of_every_kind: dict[str, tuple[int, int]], frozen: sa.Connection
) -> None:
    before = _states(pg)
    held = [pair[0] for pair in jobs_of_every_kind.values()]
    _hold(frozen, held)

    _recover(pg)  # with the rows held: a recovery that waited would fail on lock_timeout

    after = _states(pg)
    for kind, (held_id, free_id) in jobs_of_every_kind.items():
        assert after[free_id] == KINDS[kind], kind
        assert after[held_id] == before[held_id], kind  # left for a later pass
    frozen.rollback()  # the frozen worker's connection dies: its locks go

    _recover(pg)

    after = _states(pg)
    for kind, (held_id, _) in jobs_of_every_kind.items():
        assert after[held_id] == KINDS[kind], kind


def test_a_worker_drains_beside_a_frozen_transaction_holding_an_expired_claim(
    pg: Engine, frozen: sa.Connection
) -> None:
    store = OutboxStore("postgresql")
    with pg.begin() as conn:
        store.enqueue(conn, [new_job("frozen", EPOCH, campaign="frozen")])
        (stuck,) = conn.execute(sa.select(send_job.c.id)).scalars()
        _place(conn, [stuck], "claimed")
    jobs = 200
    assert enqueue(pg, bench_jobs(jobs)) == jobs
    _hold(frozen, [stuck])
    config = WorkerConfig(concurrency=50, poll_interval=0.05)
    worker = Worker(pg, {"email": NoopTransport()}, config)

    async def drain_beside_it() -> int:
        running = asyncio.create_task(worker.run())
        deadline = time.monotonic() + DEADLINE_SECONDS
        try:
            while worker.report.sent < jobs and time.monotonic() < deadline:
                if running.done():
                    break  # run() ended early: its exception is raised below
                await asyncio.sleep(0.05)
            return worker.report.sent
        finally:
            # The frozen transaction ends first, so that a recovery that waited for it (the bug)
            # finishes and the worker can stop.
            frozen.rollback()
            worker.stop()
            await running

    sent = asyncio.run(drain_beside_it())

    assert sent == jobs  # before: 0, the worker's first recovery waited for the held row
    _recover(pg)  # the lock is gone: the frozen worker's expired claim is taken back
    assert _states(pg)[stuck] == "pending"


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    jobs=st.lists(
        st.tuples(st.sampled_from([*KINDS, *UNTOUCHED]), st.booleans()), min_size=1, max_size=12
    )
)
def test_recovery_moves_exactly_the_qualifying_rows_nobody_holds(
    pg_engine: Engine, jobs: list[tuple[str, bool]]
) -> None:
    """Any mix of jobs recovery takes and jobs it must not, any of them held by an open
    transaction: a pass takes exactly the qualifying rows nobody holds, and once the holder is
    gone, the next pass takes the rest."""
    store = OutboxStore("postgresql")
    with pg_engine.begin() as conn:
        empty_outbox(conn)
        kinds: dict[int, str] = {}
        for i, (kind, _) in enumerate(jobs):
            policy = "resend" if kind == "resend" else "hold"
            store.enqueue(conn, [new_job(f"{i}-{kind}", EPOCH, policy=policy)])
            (job_id,) = conn.execute(
                sa.select(send_job.c.id).where(send_job.c.key == f"{i}-{kind}")
            ).scalars()
            _place(conn, [job_id], kind)
            kinds[job_id] = kind
    held = [job_id for job_id, (_, locked) in zip(kinds, jobs, strict=True) if locked]
    before = _states(pg_engine)
    with pg_engine.connect() as frozen:
        frozen.begin()
        if held:
            _hold(frozen, held)
        _recover(pg_engine)
        after = _states(pg_engine)
        frozen.rollback()
    for job_id, kind in kinds.items():
        moved = kind in KINDS and job_id not in held
        assert after[job_id] == (KINDS[kind] if moved else before[job_id]), (kind, job_id in held)

    _recover(pg_engine)

    after = _states(pg_engine)
    for job_id, kind in kinds.items():
        assert after[job_id] == KINDS.get(kind, before[job_id]), kind
