"""Recurring and one-shot triggers through scheduler passes (docs/design.md §7), on SQLite and
PostgreSQL, with the clock injected: one occurrence per fire, each fire decided once, the
catch-up policy after downtime, a per-occurrence audience, and a changed file firing nothing."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DataError

import scheduler.passes
from dispatch.keys import KeyTuple
from herald.db import create_engine
from scheduler import fanout
from scheduler.passes import run_pass
from scheduler.store import OccurrenceStore
from tests.support.schedules import (
    fires,
    jobs,
    launch_at,
    note_of,
    pass_at,
    write_people,
    write_scheduled,
)

# Monday 5 January 2026, 09:00 in Berlin (CET, UTC+1) is 08:00 UTC.
REGISTERED = datetime(2026, 1, 4, 12, 0, tzinfo=UTC)  # the Sunday before
MONDAYS = [datetime(2026, 1, 5, 8, 0, tzinfo=UTC) + timedelta(weeks=n) for n in range(6)]
PEOPLE = ["ann@example.com", "bob@example.com"]

WEEKLY = """\
timezone: Europe/Berlin
audience: people.csv
schedule:
  cron: "0 9 * * mon"{extra}
steps:
  - id: digest
    subject: "Digest for {{{{ name }}}}"
    text: "Hello {{{{ name }}}}"
  - id: reminder
    after: 1d
    subject: "Reminder"
    text: "Still there, {{{{ name }}}}?"
"""


class Crash(Exception):
    """Stands for the process dying mid-pass."""


def weekly(folder: Path, extra: str = "", people: list[str] = PEOPLE) -> Path:
    return write_scheduled(folder, WEEKLY.format(extra=extra), people)


def test_a_weekly_schedule_makes_one_occurrence_per_fire(engine: Engine, tmp_path: Path) -> None:
    path = weekly(tmp_path / "c")
    launched = launch_at(engine, path, REGISTERED)
    assert launched.trigger == "schedule"
    assert launched.fanout.new_jobs == 0  # a cron schedule never fires at its registration
    assert launched.scheduled is not None
    assert launched.scheduled.next_fire == MONDAYS[0]
    for week, monday in enumerate(MONDAYS[:4]):
        report = pass_at(engine, monday + timedelta(seconds=30))
        assert report.get("digest") is not None
        assert report.fired == 1
        assert report.new_jobs == len(PEOPLE) * 2
        # The same pass again, and a later one before the next Monday, insert nothing.
        assert pass_at(engine, monday + timedelta(minutes=1)).new_jobs == 0
        assert pass_at(engine, monday + timedelta(days=3)).fired == 0
        assert len(jobs(engine)) == (week + 1) * len(PEOPLE) * 2
    found = jobs(engine)
    assert sorted({job.occurrence_at for job in found}) == MONDAYS[:4]
    # Keys differ per week: the occurrence (the nominal fire time) is part of each.
    assert len({job.key for job in found}) == len(found)
    for job in found:
        assert job.key == KeyTuple("digest", job.step, job.occurrence_at, job.mailbox).key()
        # Steps chain on the planned time: the reminder a day after the digest.
        expected = job.occurrence_at + (
            timedelta(days=1) if job.step == "reminder" else timedelta()
        )
        assert job.not_before == expected
    assert [state for _, state, _ in fires(engine, "digest")] == ["done"] * 4


@pytest.mark.parametrize(
    ("policy", "fired", "skipped"),
    [("latest", [3], [0, 1, 2]), ("all", [0, 1, 2, 3], []), ("none", [], [0, 1, 2, 3])],
)
def test_downtime_over_three_periods_follows_the_catch_up_policy(
    engine: Engine, tmp_path: Path, policy: str, fired: list[int], skipped: list[int]
) -> None:
    max_age = "\n  max_catch_up_age: 30d" if policy == "all" else ""
    path = weekly(tmp_path / "c", f"\n  catch_up: {policy}{max_age}")
    launch_at(engine, path, REGISTERED)
    # Down from before the first Monday until an hour after the fourth.
    report = pass_at(engine, MONDAYS[3] + timedelta(hours=1))
    done = report.get("digest")
    assert done is not None
    assert done.fired == [MONDAYS[i] for i in fired]
    assert [moment for moment, _ in done.skipped] == [MONDAYS[i] for i in skipped]
    assert sorted({job.occurrence_at for job in jobs(engine)}) == [MONDAYS[i] for i in fired]
    decided = {moment: (state, reason) for moment, state, reason in fires(engine, "digest")}
    assert set(decided) == {MONDAYS[i] for i in fired + skipped}
    assert all(decided[MONDAYS[i]][0] == "skipped" and decided[MONDAYS[i]][1] for i in skipped)
    # Decided once: passes afterwards change nothing, and the next Monday fires on time.
    assert pass_at(engine, MONDAYS[3] + timedelta(hours=2)).fired == 0
    assert pass_at(engine, MONDAYS[4]).get("digest").fired == [MONDAYS[4]]  # type: ignore[union-attr]


def test_the_default_catch_up_skips_a_fire_older_than_a_day(engine: Engine, tmp_path: Path) -> None:
    path = weekly(tmp_path / "c")
    launch_at(engine, path, REGISTERED)
    report = pass_at(engine, MONDAYS[0] + timedelta(days=2))
    assert report.fired == 0
    [(moment, state, reason)] = fires(engine, "digest")
    assert (moment, state) == (MONDAYS[0], "skipped")
    assert reason is not None
    assert "max_catch_up_age" in reason


def test_each_occurrence_reads_the_audience_of_its_day(engine: Engine, tmp_path: Path) -> None:
    path = weekly(tmp_path / "c")
    launch_at(engine, path, REGISTERED)
    pass_at(engine, MONDAYS[0])
    write_people(tmp_path / "c" / "people.csv", ["bob@example.com", "cy@example.com"])
    # The CSV is not part of a scheduled campaign's hash: the changed list is next week's list.
    assert pass_at(engine, MONDAYS[1]).fired == 1
    assert note_of(engine, "digest") is None
    by_week = {
        monday: sorted({job.mailbox for job in jobs(engine) if job.occurrence_at == monday})
        for monday in MONDAYS[:2]
    }
    assert by_week == {
        MONDAYS[0]: ["ann@example.com", "bob@example.com"],
        MONDAYS[1]: ["bob@example.com", "cy@example.com"],
    }


def test_a_fan_out_resumed_after_a_crash_reads_the_occurrences_snapshot(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = weekly(tmp_path / "c", people=[f"p{i:03d}@example.com" for i in range(30)])
    launch_at(engine, path, REGISTERED)
    calls = 0
    original = OccurrenceStore.advance

    # Inside each batch's transaction, after its jobs are inserted, whichever way the fan-out
    # writes them (scheduler.fanout_writer): the second batch's transaction dies uncommitted.
    def crash_in_second_batch(
        self: OccurrenceStore, conn: Connection, occurrence_id: int, cursor: int, created: int
    ) -> None:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise Crash("the process dies here")
        original(self, conn, occurrence_id, cursor, created)

    monkeypatch.setattr(OccurrenceStore, "advance", crash_in_second_batch)
    with pytest.raises(Crash):
        run_pass(engine, now=MONDAYS[0], actor="test", batch_size=10)
    monkeypatch.undo()
    assert len(jobs(engine)) == 10
    assert [state for _, state, _ in fires(engine, "digest")] == ["due"]
    # Meanwhile the file changes; the resumed fan-out still sends to the occurrence's list.
    write_people(tmp_path / "c" / "people.csv", ["late@example.com"])
    report = pass_at(engine, MONDAYS[0] + timedelta(minutes=3))
    assert report.get("digest").fired == [MONDAYS[0]]  # type: ignore[union-attr]
    found = jobs(engine)
    assert {job.mailbox for job in found} == {f"p{i:03d}@example.com" for i in range(30)}
    assert len(found) == 60
    assert [state for _, state, _ in fires(engine, "digest")] == ["done"]


def test_a_pass_tells_its_fan_out_progress_after_each_committed_batch(
    engine: Engine, tmp_path: Path
) -> None:
    # The seam tests/support/scheduler_process.py pauses at: each call comes once its batch is
    # committed (another connection sees the jobs), and the fire is not done before the last.
    path = weekly(tmp_path / "c", people=[f"p{i:03d}@example.com" for i in range(25)])
    launch_at(engine, path, REGISTERED)
    told: list[tuple[int, int, list[str]]] = []

    def progress(jobs_in_batch: int) -> None:
        seen = len(jobs(engine))
        told.append((jobs_in_batch, seen, [state for _, state, _ in fires(engine, "digest")]))

    run_pass(engine, now=MONDAYS[0], actor="test", batch_size=10, fanout_progress=progress)
    sizes = [10, 10, 5, 10, 10, 5]  # two steps of 25
    assert [size for size, _, _ in told] == sizes
    assert [seen for _, seen, _ in told] == [sum(sizes[: n + 1]) for n in range(len(sizes))]
    assert {tuple(states) for _, _, states in told} == {("due",)}
    assert [state for _, state, _ in fires(engine, "digest")] == ["done"]


def test_a_pass_fans_out_in_its_databases_own_batch_size(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without a batch_size the pass leaves it to materialise: PostgreSQL commits bigger batches
    # than SQLite (scheduler.fanout). Until session 20 the pass forced SQLite's size on both.
    # Sizes made small here so that 25 recipients tell the two apart.
    monkeypatch.setattr(fanout, "BATCH_SIZE", 4)
    monkeypatch.setattr(fanout, "POSTGRES_BATCH_SIZE", 10)
    path = weekly(tmp_path / "c", people=[f"p{i:03d}@example.com" for i in range(25)])
    launch_at(engine, path, REGISTERED)
    told: list[int] = []
    run_pass(engine, now=MONDAYS[0], actor="test", fanout_progress=told.append)
    per_step = [10, 10, 5] if engine.dialect.name == "postgresql" else [4] * 6 + [1]
    assert told == per_step * 2  # two steps
    assert len(jobs(engine)) == 50


def test_a_changed_file_fires_nothing_until_restored(engine: Engine, tmp_path: Path) -> None:
    path = weekly(tmp_path / "c")
    launch_at(engine, path, REGISTERED)
    original = path.read_text()
    path.write_text(original.replace("Hello", "Hi"))
    report = pass_at(engine, MONDAYS[0])
    assert report.fired == 0
    note = note_of(engine, "digest")
    assert note is not None
    assert "changed since it was launched" in note
    assert jobs(engine) == []
    assert fires(engine, "digest") == []  # nothing decided: the fire waits for the file
    path.unlink()
    pass_at(engine, MONDAYS[0] + timedelta(minutes=1))
    assert "missing" in (note_of(engine, "digest") or "")
    path.write_text(original)
    assert pass_at(engine, MONDAYS[0] + timedelta(minutes=2)).fired == 1
    assert note_of(engine, "digest") is None


def test_an_every_schedule_fires_first_at_launch(engine: Engine, tmp_path: Path) -> None:
    body = """\
audience: people.csv
schedule: {every: 6h}
steps:
  - id: ping
    subject: "Ping"
    text: "Hello"
"""
    path = write_scheduled(tmp_path / "c", body, PEOPLE)
    launched = launch_at(engine, path, REGISTERED + timedelta(microseconds=250))
    assert launched.scheduled is not None
    assert launched.scheduled.fired == [REGISTERED]
    assert launched.fanout.new_jobs == 2
    assert launched.scheduled.next_fire == REGISTERED + timedelta(hours=6)
    # A relaunch is a no-op; passes fire every six hours from the registration.
    assert launch_at(engine, path, REGISTERED + timedelta(hours=1)).fanout.new_jobs == 0
    assert pass_at(engine, REGISTERED + timedelta(hours=12, minutes=1)).fired == 1  # latest
    assert {job.occurrence_at for job in jobs(engine)} == {
        REGISTERED,
        REGISTERED + timedelta(hours=12),
    }


@pytest.mark.parametrize("late", [False, True])
def test_start_at_fires_once(engine: Engine, tmp_path: Path, late: bool) -> None:
    body = """\
timezone: Europe/Berlin
start_at: 2026-01-05 09:00
audience: people.csv
steps:
  - id: news
    subject: "News"
    text: "Hello"
"""
    path = write_scheduled(tmp_path / "c", body, PEOPLE)
    if late:  # launched two days after its time: it goes out at once, keyed on its time
        launched = launch_at(engine, path, MONDAYS[0] + timedelta(days=2))
        assert launched.fanout.new_jobs == 2
    else:
        launched = launch_at(engine, path, REGISTERED)
        assert launched.fanout.new_jobs == 0
        assert launched.scheduled is not None
        assert launched.scheduled.next_fire == MONDAYS[0]
        assert pass_at(engine, MONDAYS[0] - timedelta(seconds=1)).fired == 0
        assert pass_at(engine, MONDAYS[0] + timedelta(seconds=5)).fired == 1
    assert pass_at(engine, MONDAYS[3]).fired == 0
    assert {job.occurrence_at for job in jobs(engine)} == {MONDAYS[0]}


def test_two_passes_racing_insert_each_fire_and_job_once(
    db_url: str, engine: Engine, tmp_path: Path
) -> None:
    path = weekly(tmp_path / "c", people=[f"r{i:03d}@example.com" for i in range(120)])
    launch_at(engine, path, REGISTERED)
    start = threading.Barrier(3)
    errors: list[BaseException] = []

    def one_pass() -> None:
        own = create_engine(db_url)  # its own connections, as another process has
        try:
            start.wait()
            for monday in MONDAYS[:3]:
                run_pass(own, now=monday + timedelta(seconds=1), actor="race", batch_size=25)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)
        finally:
            own.dispose()

    threads = [threading.Thread(target=one_pass) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert errors == []
    found = jobs(engine)
    assert len(found) == 3 * 120 * 2
    assert Counter(Counter((j.occurrence_at, j.step, j.mailbox) for j in found).values()) == {
        1: len(found)
    }
    assert [(moment, state) for moment, state, _ in fires(engine, "digest")] == [
        (monday, "done") for monday in MONDAYS[:3]
    ]


def test_a_row_that_cannot_be_rendered_is_skipped_and_noted(engine: Engine, tmp_path: Path) -> None:
    body = """\
audience: people.csv
schedule: {cron: "0 8 * * mon"}
steps:
  - id: digest
    subject: "News about {{ topic }}"
    text: "Hello"
"""
    path = write_scheduled(tmp_path / "c", body)
    people = tmp_path / "c" / "people.csv"
    people.write_text("email,topic\nann@example.com,cats\n")
    launch_at(engine, path, REGISTERED)
    # This week's list has a topic that would break the Subject line, and a broken row.
    people.write_text(
        'email,topic\nann@example.com,cats\nevil@example.com,"dogs\nBcc: all@x.example"\nbad,B\n'
    )
    done = pass_at(engine, MONDAYS[0]).get("digest")
    assert done is not None
    assert done.fired == [MONDAYS[0]]
    assert {job.mailbox for job in jobs(engine)} == {"ann@example.com"}
    assert done.note is not None
    assert "1 message(s)" in done.note
    assert "evil@example.com" in done.note
    assert "1 audience row(s)" in done.note
    assert note_of(engine, "digest") == done.note


def test_a_fire_that_cannot_be_fanned_out_is_retried_then_given_up(
    engine: Engine, tmp_path: Path
) -> None:
    path = weekly(tmp_path / "c")
    launch_at(engine, path, REGISTERED)
    (tmp_path / "c" / "people.csv").unlink()
    first = pass_at(engine, MONDAYS[0]).get("digest")
    assert first is not None
    assert first.fired == []
    assert "people.csv" in (first.note or "")
    assert [state for _, state, _ in fires(engine, "digest")] == ["due"]
    # Restored within the catch-up age: the fire goes out, late.
    write_people(tmp_path / "c" / "people.csv", PEOPLE)
    assert pass_at(engine, MONDAYS[0] + timedelta(hours=3)).fired == 1
    assert note_of(engine, "digest") is None
    # Gone again for longer than a day: the next Monday's fire is given up, with why.
    (tmp_path / "c" / "people.csv").unlink()
    assert pass_at(engine, MONDAYS[1]).fired == 0
    late = pass_at(engine, MONDAYS[1] + timedelta(days=1, minutes=1)).get("digest")
    assert late is not None
    assert [moment for moment, _ in late.skipped] == [MONDAYS[1]]
    (moment, state, reason) = fires(engine, "digest")[1]
    assert (moment, state) == (MONDAYS[1], "skipped")
    assert reason is not None
    assert "could not be fanned out in time" in reason


def test_data_the_database_refuses_costs_its_campaign_not_the_pass(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value the database will not store (it refused a NUL in a name until the audience
    reader did) is refused again at every pass: it is noted on its campaign, and the campaigns
    after it are passed as usual. Before, it ended every pass before them."""
    launch_at(
        engine,
        write_scheduled(tmp_path / "a", WEEKLY.format(extra=""), PEOPLE, name="a-refused"),
        REGISTERED,
    )
    launch_at(
        engine,
        write_scheduled(tmp_path / "b", WEEKLY.format(extra=""), PEOPLE, name="b-fine"),
        REGISTERED,
    )
    materialise = fanout.materialise

    def refusing(engine: Engine, loaded: Any, *args: Any, **kwargs: Any) -> Any:
        if loaded.spec.name == "a-refused":
            refused = Exception('invalid byte sequence for encoding "UTF8": 0x00')
            raise DataError("INSERT INTO audience_snapshot …", {}, refused)
        return materialise(engine, loaded, *args, **kwargs)

    monkeypatch.setattr(scheduler.passes, "materialise", refusing)
    report = pass_at(engine, MONDAYS[0])
    refused, fine = report.get("a-refused"), report.get("b-fine")
    assert refused is not None
    assert fine is not None
    assert refused.fired == []
    assert refused.note is not None
    assert "0x00" in refused.note
    assert "retried at the next pass" in refused.note
    assert "INSERT" not in refused.note  # the first line only: never the statement or its data
    assert fine.fired == [MONDAYS[0]]
    assert jobs(engine, "a-refused") == []
    assert len(jobs(engine, "b-fine")) == len(jobs(engine))
