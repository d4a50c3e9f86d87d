"""Enrollment triggers (drips) through scheduler passes, on SQLite and PostgreSQL: each
recipient's steps count from their own enrollment and from the actual send of the previous
step; recipients who leave the audience or are suppressed get nothing more; send windows are
per recipient time zone."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from freezegun import freeze_time
from sqlalchemy.engine import Engine

from campaigns.suppression import suppress
from dispatch.models import send_job
from dispatch.states import State
from dispatch.store import Completion, OutboxStore
from herald.app.enroll import enroll
from herald.db import create_engine
from herald.errors import UsageError
from scheduler.models import enrollment_table
from scheduler.passes import run_pass
from tests.support.campaign_files import run_worker
from tests.support.schedules import (
    JobRow,
    jobs,
    launch_at,
    pass_at,
    write_people,
    write_scheduled,
)
from tests.support.smtp_server import LedgerSMTPServer

T0 = datetime(2026, 1, 6, 10, 0, 0, 123456, tzinfo=UTC)  # a Tuesday; enrolled_at drops the µs
T0S = T0.replace(microsecond=0)

DRIP = """\
timezone: Europe/Berlin
enrollment: audience
audience: people.csv
steps:
  - id: welcome
    subject: "Welcome {{ name }}"
    text: "Hi {{ name }}"
  - id: tips
    after: 2d
    subject: "Tips"
    text: "Tips for {{ name }}"
  - id: last
    after: 1d
    at: "09:00"
    timezone: recipient
    subject: "Last"
    text: "Bye {{ name }}"
"""


def enrollments(engine: Engine) -> dict[str, tuple[str, int, datetime, str | None]]:
    e = enrollment_table.c
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(e.mailbox, e.state, e.next_step, e.enrolled_at, e.ended_reason)
        )
        return {r.mailbox: (r.state, r.next_step, r.enrolled_at, r.ended_reason) for r in rows}


def close(a: datetime, b: datetime) -> bool:
    """Equal up to the float rounding of SQLite's epoch-seconds timestamps."""
    return abs(a - b) < timedelta(milliseconds=1)


def by_mailbox(found: Iterable[JobRow], step: str) -> dict[str, JobRow]:
    return {job.mailbox: job for job in found if job.step == step}


def settle(engine: Engine, keys: set[str], target: State = State.SENT) -> None:
    """Send (or fail) exactly these jobs through the outbox's own transitions, as if their due
    time had come (the database clock, which outcome_at is read from, cannot be frozen)."""
    store = OutboxStore(engine.dialect.name)
    j = send_job.c
    with engine.begin() as conn:
        conn.execute(
            sa.update(send_job)
            .where(j.key.in_(keys))
            .values(not_before=datetime(2000, 1, 1, tzinfo=UTC))
        )
        claimed = store.claim(conn, owner="test", limit=10_000, lease_seconds=60)
        mine = [job for job in claimed if job.key in keys]
        others = [job.lease for job in claimed if job.key not in keys]
        store.release_claims(conn, others, actor="test")
        store.start_sends(conn, [job.lease for job in mine], margin_seconds=1, actor="test")
    assert {job.key for job in mine} == keys
    code = 250 if target is State.SENT else 550
    with engine.begin() as conn:
        store.complete(
            conn, [Completion(job.lease, target, code=code) for job in mine], actor="test"
        )


def test_recipients_added_between_passes_get_their_own_drip(engine: Engine, tmp_path: Path) -> None:
    folder = tmp_path / "c"
    path = write_scheduled(folder, DRIP, ["ann@example.com", "bob@example.com"], name="drip")
    launched = launch_at(engine, path, T0)
    assert launched.scheduled is not None
    assert launched.scheduled.enrolled == 2
    welcome = by_mailbox(jobs(engine), "welcome")
    assert {m: (j.occurrence_at, j.not_before) for m, j in welcome.items()} == {
        "ann@example.com": (T0S, T0S),
        "bob@example.com": (T0S, T0S),
    }
    # Cy appears in the CSV a day later: her drip counts from her own enrollment.
    t1 = T0S + timedelta(days=1, hours=3)
    write_people(folder / "people.csv", ["ann@example.com", "bob@example.com", "cy@example.com"])
    report = pass_at(engine, t1)
    assert report.get("drip").enrolled == 1  # type: ignore[union-attr]
    cy = by_mailbox(jobs(engine), "welcome")["cy@example.com"]
    assert (cy.occurrence_at, cy.not_before) == (t1, t1)
    # Passes again change nothing: nobody is enrolled twice, no step materialised twice.
    assert pass_at(engine, t1 + timedelta(minutes=1)).new_jobs == 0
    assert len(jobs(engine)) == 3
    # Tips wait for the welcome's actual send: only Ann's has gone out.
    settle(engine, {welcome["ann@example.com"].key})
    assert pass_at(engine, t1 + timedelta(minutes=2)).new_jobs == 1
    found = jobs(engine)
    sent_at = by_mailbox(found, "welcome")["ann@example.com"].outcome_at
    assert sent_at is not None
    tips = by_mailbox(found, "tips")
    assert set(tips) == {"ann@example.com"}
    assert close(tips["ann@example.com"].not_before, sent_at + timedelta(days=2))
    assert tips["ann@example.com"].occurrence_at == T0S  # the drip's key: her enrollment


def test_a_recipient_who_leaves_gets_nothing_more(engine: Engine, tmp_path: Path) -> None:
    folder = tmp_path / "c"
    path = write_scheduled(folder, DRIP, ["ann@example.com", "bob@example.com"], name="drip")
    launch_at(engine, path, T0)
    write_people(folder / "people.csv", ["ann@example.com"])
    report = pass_at(engine, T0 + timedelta(hours=1))
    done = report.get("drip")
    assert done is not None
    assert (done.left, done.withdrawn) == (1, 1)
    bob = by_mailbox(jobs(engine), "welcome")["bob@example.com"]
    assert bob.state == "cancelled"
    assert enrollments(engine)["bob@example.com"][0] == "left"
    # Back in the list: a drip is run once per mailbox, so he is not enrolled again.
    write_people(folder / "people.csv", ["ann@example.com", "bob@example.com"])
    assert pass_at(engine, T0 + timedelta(hours=2)).get("drip").enrolled == 0  # type: ignore[union-attr]
    assert enrollments(engine)["bob@example.com"][0] == "left"
    # An empty read removes nobody (a file caught half-written).
    write_people(folder / "people.csv", [])
    quiet = pass_at(engine, T0 + timedelta(hours=3)).get("drip")
    assert quiet is not None
    assert quiet.left == 0
    assert quiet.note is not None
    assert enrollments(engine)["ann@example.com"][0] == "active"


def test_a_suppressed_recipient_gets_nothing_more(engine: Engine, tmp_path: Path) -> None:
    path = write_scheduled(
        tmp_path / "c", DRIP, ["ann@example.com", "bob@example.com"], name="drip"
    )
    launch_at(engine, path, T0)
    with engine.begin() as conn:
        suppress(conn, "BOB@example.com", "unsubscribed")
    done = pass_at(engine, T0 + timedelta(minutes=5)).get("drip")
    assert done is not None
    assert (done.ended, done.withdrawn) == (1, 1)
    assert enrollments(engine)["bob@example.com"][:1] == ("ended",)
    assert by_mailbox(jobs(engine), "welcome")["bob@example.com"].state == "cancelled"


def test_only_the_drips_own_list_or_global_suppression_ends_it(
    engine: Engine, tmp_path: Path
) -> None:
    path = write_scheduled(
        tmp_path / "c", DRIP, ["ann@example.com", "bob@example.com", "cy@example.com"], name="drip"
    )
    launch_at(engine, path, T0)
    with engine.begin() as conn:
        suppress(conn, "ann@example.com", "unsubscribed", scope="list:other")  # another list
        suppress(conn, "BOB@example.com", "unsubscribed", scope="list:drip")  # its own list
        suppress(conn, "Cy@Example.com", "complaint", scope="global")
    done = pass_at(engine, T0 + timedelta(minutes=5)).get("drip")
    assert done is not None
    assert done.ended == 2
    states = {mailbox: row[0] for mailbox, row in enrollments(engine).items()}
    assert states == {
        "ann@example.com": "active",
        "bob@example.com": "ended",
        "cy@example.com": "ended",
    }


def test_a_drip_follows_the_actual_sends_to_the_end(engine: Engine, tmp_path: Path) -> None:
    path = write_scheduled(
        tmp_path / "c", DRIP, [("ann@example.com", "America/New_York")], name="drip"
    )
    launch_at(engine, path, T0)
    for step in ("welcome", "tips"):
        settle(engine, {by_mailbox(jobs(engine), step)["ann@example.com"].key})
        pass_at(engine, T0 + timedelta(hours=1))
    found = jobs(engine)
    tips_sent = by_mailbox(found, "tips")["ann@example.com"].outcome_at
    assert tips_sent is not None
    last = by_mailbox(found, "last")["ann@example.com"]
    # 09:00 in HER zone, one calendar day (hers) after the tips actually went out.
    new_york = ZoneInfo("America/New_York")
    local = last.not_before.astimezone(new_york)
    assert (local.hour, local.minute) == (9, 0)
    assert local.date() == tips_sent.astimezone(new_york).date() + timedelta(days=1)
    # A failed last step still settles the drip.
    settle(engine, {last.key}, State.FAILED)
    assert pass_at(engine, T0 + timedelta(hours=2)).get("drip").done == 1  # type: ignore[union-attr]
    assert enrollments(engine)["ann@example.com"][:2] == ("done", 3)


def test_a_cancelled_step_ends_the_drip(engine: Engine, tmp_path: Path) -> None:
    path = write_scheduled(tmp_path / "c", DRIP, ["ann@example.com"], name="drip")
    launch_at(engine, path, T0)
    key = by_mailbox(jobs(engine), "welcome")["ann@example.com"].key
    with engine.begin() as conn:
        OutboxStore(engine.dialect.name).withdraw(conn, [key], reason="operator", actor="test")
    pass_at(engine, T0 + timedelta(minutes=1))
    state, next_step, _, reason = enrollments(engine)["ann@example.com"]
    assert (state, next_step) == ("ended", 1)
    assert reason is not None
    assert "cancelled" in reason


def test_drips_ended_in_one_pass_keep_each_its_own_reason(engine: Engine, tmp_path: Path) -> None:
    """Drips whose steps were cancelled at different points end in one pass, a batch per
    reason: each keeps the step it ended at, the others go on."""
    people = ["ann@example.com", "bob@example.com", "cy@example.com", "dee@example.com"]
    path = write_scheduled(tmp_path / "c", DRIP, people, name="drip")
    launch_at(engine, path, T0)
    welcome = by_mailbox(jobs(engine), "welcome")
    settle(engine, {welcome["bob@example.com"].key, welcome["cy@example.com"].key})
    pass_at(engine, T0 + timedelta(minutes=1))  # tips for Bob and Cy
    tips = by_mailbox(jobs(engine), "tips")
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        store.withdraw(conn, [welcome["ann@example.com"].key], reason="operator", actor="test")
        store.withdraw(conn, [tips["bob@example.com"].key], reason="operator", actor="test")
    report = pass_at(engine, T0 + timedelta(minutes=2))
    assert report.get("drip").ended == 2  # type: ignore[union-attr]
    found = enrollments(engine)
    assert found["ann@example.com"][:2] == ("ended", 1)
    assert found["bob@example.com"][:2] == ("ended", 2)
    assert "'welcome'" in str(found["ann@example.com"][3])
    assert "'tips'" in str(found["bob@example.com"][3])
    assert found["cy@example.com"][:2] == ("active", 2)
    assert found["dee@example.com"][:2] == ("active", 1)


MANUAL_WINDOW = """\
timezone: Europe/Berlin
enrollment: manual
send_window: {days: mon-fri, hours: "09:00-17:00", timezone: recipient}
steps:
  - id: hello
    subject: "Hello {{ name }}"
    text: "Hi {{ name }}, your plan: {{ plan }}"
"""


def test_send_windows_follow_each_recipients_zone(engine: Engine, tmp_path: Path) -> None:
    path = write_scheduled(tmp_path / "c", MANUAL_WINDOW, name="welcome")
    friday_evening = datetime(2026, 1, 9, 20, 0, tzinfo=UTC)  # Fri 21:00 Berlin
    launched = launch_at(engine, path, friday_evening)
    assert launched.scheduled is not None
    assert launched.scheduled.new_jobs == 0
    with freeze_time(friday_evening):
        for address, zone in [
            ("tokyo@example.com", "Asia/Tokyo"),  # Sat 05:00 there: Monday 09:00 JST
            ("ny@example.com", "America/New_York"),  # Fri 15:00 there: open now
            ("berlin@example.com", None),  # no zone: the campaign's, Monday 09:00 CET
        ]:
            result = enroll(
                engine,
                "welcome",
                address,
                data='{"plan": "pro", "name": "You"}',
                timezone=zone,
                actor="t",
            )
            assert result.created
            assert result.enrolled_at == friday_evening
            assert result.scheduled is not None
            assert result.scheduled.new_jobs == 1
    found = by_mailbox(jobs(engine), "hello")
    assert {m: j.not_before for m, j in found.items()} == {
        "tokyo@example.com": datetime(2026, 1, 12, 0, 0, tzinfo=UTC),
        "ny@example.com": friday_evening,
        "berlin@example.com": datetime(2026, 1, 12, 8, 0, tzinfo=UTC),
    }
    zones = {m: json.loads(j.send_window or "{}")["zone"] for m, j in found.items()}
    assert zones == {
        "tokyo@example.com": "Asia/Tokyo",
        "ny@example.com": "America/New_York",
        "berlin@example.com": "Europe/Berlin",
    }


def test_enrolling_twice_is_a_no_op(engine: Engine, tmp_path: Path) -> None:
    path = write_scheduled(tmp_path / "c", MANUAL_WINDOW, name="welcome")
    launch_at(engine, path, T0)
    data = '{"plan": "pro"}'
    first = enroll(engine, "welcome", "Ann <ann@example.com>", data=data, clock=lambda: T0)
    again = enroll(engine, "welcome", "ANN@example.com", clock=lambda: T0 + timedelta(days=1))
    assert first.created
    assert not again.created
    assert again.enrolled_at == first.enrolled_at == T0S
    assert len(jobs(engine)) == 1


def test_enroll_refuses_bad_input_and_writes_nothing(engine: Engine, tmp_path: Path) -> None:
    path = write_scheduled(tmp_path / "c", MANUAL_WINDOW, name="welcome")
    launch_at(engine, path, T0)
    once = "audience: people.csv\nstart_at: 2027-02-01\nsteps: [{id: a, subject: s, text: t}]\n"
    launch_at(engine, write_scheduled(tmp_path / "d", once, ["x@example.com"], name="once"), T0)
    with pytest.raises(UsageError, match="takes no enrollments"):
        enroll(engine, "once", "ann@example.com")
    with pytest.raises(UsageError, match="invalid address"):
        enroll(engine, "welcome", "not-an-address")
    with pytest.raises(UsageError, match="unknown time zone"):
        enroll(engine, "welcome", "cy@example.com", timezone="Mars/Olympus")
    with pytest.raises(UsageError, match="JSON"):
        enroll(engine, "welcome", "cy@example.com", data="{plan: pro}")
    with pytest.raises(UsageError, match="must be a JSON object"):
        enroll(engine, "welcome", "cy@example.com", data="[1, 2]")
    with pytest.raises(UsageError, match="no campaign"):
        enroll(engine, "nope", "cy@example.com")
    assert enrollments(engine) == {}


def test_a_drip_runs_end_to_end_through_a_worker(
    engine: Engine, tmp_path: Path, smtp_server: LedgerSMTPServer
) -> None:
    body = """\
enrollment: manual
steps:
  - id: one
    subject: "One"
    text: "First"
  - id: two
    subject: "Two"
    text: "Second, right after the first went out"
"""
    path = write_scheduled(tmp_path / "c", body, name="flow")
    launch_at(engine, path, T0)
    for address in ("ann@example.com", "bob@example.com"):
        enroll(engine, "flow", address, clock=lambda: T0, actor="t")
    assert run_worker(engine, smtp_server.host, smtp_server.port).sent == 2
    assert pass_at(engine, T0 + timedelta(minutes=1)).new_jobs == 2
    assert run_worker(engine, smtp_server.host, smtp_server.port).sent == 2
    pass_at(engine, T0 + timedelta(minutes=2))
    assert {state for state, *_ in enrollments(engine).values()} == {"done"}
    assert len(smtp_server.accepted_ids()) == 4
    found = jobs(engine)
    for mailbox in ("ann@example.com", "bob@example.com"):
        first, second = by_mailbox(found, "one")[mailbox], by_mailbox(found, "two")[mailbox]
        assert first.outcome_at is not None
        assert close(second.not_before, first.outcome_at)


def test_passes_racing_enroll_and_materialise_each_drip_once(
    db_url: str, engine: Engine, tmp_path: Path
) -> None:
    people = [f"r{i:03d}@example.com" for i in range(200)]
    folder = tmp_path / "c"
    path = write_scheduled(folder, DRIP, people[:50], name="drip")
    launch_at(engine, path, T0)
    write_people(folder / "people.csv", people[10:])  # 10 leave, 150 join
    start = threading.Barrier(3)
    errors: list[BaseException] = []

    def passes() -> None:
        own = create_engine(db_url)  # its own connections, as another process has
        try:
            start.wait()
            for minute in range(3):
                run_pass(own, now=T0 + timedelta(minutes=minute + 1), actor="race")
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)
        finally:
            own.dispose()

    threads = [threading.Thread(target=passes) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert errors == []
    states = enrollments(engine)
    assert len(states) == 200
    assert Counter(state for state, *_ in states.values()) == {"active": 190, "left": 10}
    welcome = [job for job in jobs(engine) if job.step == "welcome"]
    assert len(welcome) == len({job.mailbox for job in welcome}) == 200
    assert Counter(job.state for job in welcome) == {"pending": 190, "cancelled": 10}
