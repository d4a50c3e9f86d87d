"""A worker whose lease was taken over is fenced: every later write matches zero rows and it
never reaches DATA. Plus the store-level guards each transition relies on."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.control import change_status, register
from campaigns.spec import load_campaign
from dispatch.instrumentation import NullInstrumentation
from dispatch.models import send_job
from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.states import State
from dispatch.store import ClaimedJob, Completion, NewJob, OutboxStore
from dispatch.worker import Worker
from scheduler.fanout import materialise
from tests.support.campaign_files import fast_config, run_worker
from tests.support.smtp_server import LedgerSMTPServer

ONE = """\
name: fenced
from: news@herald.test
audience: [alice@example.com]
steps:
  - id: hello
    subject: Hello
    text: Hello there
"""


def launch(engine: Engine, folder: Path, text: str = ONE) -> None:
    folder.mkdir(exist_ok=True)
    (folder / "c.yaml").write_text(text)
    loaded = load_campaign(folder / "c.yaml")
    registration = register(engine, loaded, now=datetime.now(UTC))
    materialise(engine, loaded, registration.campaign.launched_at)


def expire_all_leases(engine: Engine) -> None:
    """What a long pause looks like from the database: the lease ran out."""
    with engine.begin() as conn:
        conn.execute(
            sa.update(send_job)
            .where(send_job.c.lease_expires_at.is_not(None))
            .values(lease_expires_at=datetime.now(UTC) - timedelta(minutes=5))
        )


def test_a_paused_worker_whose_lease_was_taken_over_never_sends(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    launch(engine, tmp_path / "c")
    paused = threading.Event()
    resume = threading.Event()
    zombie_job: list[ClaimedJob] = []

    class PauseBeforeT4(NullInstrumentation):
        async def before_t4(self, job: ClaimedJob) -> None:
            zombie_job.append(job)
            # Stopped only once its database thread is idle too: a claim that thread was still
            # running when the loop stopped could take the job the test releases below (seen
            # on a slow machine: the zombie claimed it twice).
            deadline = time.monotonic() + 30
            while not zombie.committer.quiet() and time.monotonic() < deadline:
                time.sleep(0.001)  # noqa: ASYNC251 - the whole zombie waits, on purpose
            paused.set()
            # The whole zombie stops, as a paused process does: blocking its event loop, not
            # just this send. Otherwise it keeps claiming, heartbeating and recovering, and on
            # a busy machine it re-claims the job the test releases below before the other
            # worker starts (whose --until-idle then waits forever on that live lease), or
            # releases it itself first.
            resume.wait()

    transport = SmtpTransport(SmtpConfig(smtp_server.host, smtp_server.port, data_timeout=10))
    config = fast_config(owner="zombie")
    zombie = Worker(engine, {"email": transport}, config, instrumentation=PauseBeforeT4())
    zombie_thread = threading.Thread(target=lambda: asyncio.run(zombie.run()))
    zombie_thread.start()
    try:
        assert paused.wait(timeout=30), "the zombie never reached T4"
        expire_all_leases(engine)
        store = OutboxStore(engine.dialect.name)
        with engine.begin() as conn:
            report = store.recover(conn, grace_seconds=0, actor="test-recovery")
        assert report.released == 1

        # Another worker takes the job over and sends it.
        taken_over = run_worker(engine, smtp_server.host, smtp_server.port)
        assert taken_over.sent == 1
    finally:
        resume.set()
        zombie_thread.join(timeout=30)
    assert not zombie_thread.is_alive()

    assert zombie.report.sent == 0
    assert zombie.report.lost_leases == 1
    (job,) = zombie_job
    assert smtp_server.seen(job.message_id) == 1, "the zombie reached DATA"

    # Every write the zombie could still attempt matches zero rows.
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        assert (
            store.start_sends(conn, [job.lease], margin_seconds=0, actor="zombie").keys() == set()
        )
        assert store.heartbeat(conn, [job.lease], lease_seconds=60) == set()
        for target in (State.SENT, State.FAILED, State.IN_DOUBT, State.PENDING):
            assert store.complete(conn, [Completion(job.lease, target)], actor="zombie") == set()
        assert store.release_claims(conn, [job.lease], actor="zombie") == set()
        assert store.settle_unstartable(conn, [job.lease], actor="zombie") == {}
        events = store.events(conn, [job.id])
    assert [e.actor for e in events if e.token == job.token] == ["zombie", "test-recovery"]
    assert events[-1].to_state == "sent"
    assert events[-1].token == job.token + 1


def _new_job(key: str, when: datetime) -> NewJob:
    return NewJob(
        key=key,
        key_tuple="[]",
        campaign="fenced",
        step="hello",
        occurrence_at=when,
        channel="email",
        sender="news@herald.test",
        recipient=f"{key}@example.com",
        message_id=f"<{key}@herald.test>",
        payload=b"Subject: x\r\n\r\nbody\r\n",
        not_before=when,
    )


def _claim_one(engine: Engine, store: OutboxStore, lease_seconds: float = 60) -> ClaimedJob:
    with engine.begin() as conn:
        store.enqueue(conn, [_new_job("k1", datetime.now(UTC) - timedelta(seconds=1))])
        (job,) = store.claim(conn, owner="w", limit=10, lease_seconds=lease_seconds)
    return job


def test_heartbeat_never_revives_an_expired_lease(engine: Engine) -> None:
    store = OutboxStore(engine.dialect.name)
    job = _claim_one(engine, store)
    with engine.begin() as conn:
        assert store.heartbeat(conn, [job.lease], lease_seconds=60) == {job.id}
    expire_all_leases(engine)
    with engine.begin() as conn:
        assert store.heartbeat(conn, [job.lease], lease_seconds=60) == set()
        expires = conn.execute(sa.select(send_job.c.lease_expires_at)).scalar_one()
    assert expires < datetime.now(UTC)


def test_recovery_ignores_a_live_lease_however_old_the_job(engine: Engine) -> None:
    store = OutboxStore(engine.dialect.name)
    job = _claim_one(engine, store, lease_seconds=600)
    with engine.begin() as conn:
        # The job was created long ago and claimed long ago: irrelevant, only the lease counts.
        conn.execute(sa.update(send_job).values(created_at=datetime.now(UTC) - timedelta(days=3)))
        assert store.start_sends(conn, [job.lease], margin_seconds=1, actor="w").keys() == {job.id}
        report = store.recover(conn, grace_seconds=0, actor="r")
    assert (report.released, report.in_doubt, report.dead) == (0, 0, 0)
    expire_all_leases(engine)
    with engine.begin() as conn:
        report = store.recover(conn, grace_seconds=0, actor="r")
        state = conn.execute(sa.select(send_job.c.state)).scalar_one()
    assert report.in_doubt == 1
    assert state == "in_doubt"


def test_t4_refuses_when_too_little_lease_is_left(engine: Engine) -> None:
    store = OutboxStore(engine.dialect.name)
    job = _claim_one(engine, store, lease_seconds=5)
    with engine.begin() as conn:
        assert store.start_sends(conn, [job.lease], margin_seconds=30, actor="w").keys() == set()
        assert store.settle_unstartable(conn, [job.lease], actor="w") == {job.id: State.PENDING}


def test_a_cancelled_campaigns_claimed_job_never_reaches_data(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    launch(engine, tmp_path / "c")
    cancelled = threading.Event()

    class CancelCampaignBeforeT4(NullInstrumentation):
        async def before_t4(self, job: ClaimedJob) -> None:
            await asyncio.to_thread(change_status, engine, "fenced", "cancel", actor="test")
            cancelled.set()

    instrumentation = CancelCampaignBeforeT4()
    report = run_worker(engine, smtp_server.host, smtp_server.port, instrumentation=instrumentation)
    assert cancelled.is_set()
    assert report.sent == 0
    assert smtp_server.accepted_ids() == []
    with engine.connect() as conn:
        state = conn.execute(sa.select(send_job.c.state)).scalar_one()
    assert state == "cancelled"


def test_a_paused_campaign_is_not_claimed_and_resumes(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    launch(engine, tmp_path / "c")
    change_status(engine, "fenced", "pause", actor="test")
    assert run_worker(engine, smtp_server.host, smtp_server.port).claimed == 0
    change_status(engine, "fenced", "resume", actor="test")
    assert run_worker(engine, smtp_server.host, smtp_server.port).sent == 1


def test_a_suppressed_recipient_is_cancelled_at_t4(engine: Engine) -> None:
    store = OutboxStore(engine.dialect.name)
    job = _claim_one(engine, store)
    with engine.begin() as conn:
        store.suppress(conn, job.recipient, "unsubscribed")
        assert store.start_sends(conn, [job.lease], margin_seconds=1, actor="w").keys() == set()
        assert store.settle_unstartable(conn, [job.lease], actor="w") == {job.id: State.CANCELLED}
        text = conn.execute(sa.select(send_job.c.outcome_text)).scalar_one()
    assert text == "suppressed"
