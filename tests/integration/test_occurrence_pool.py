"""A scheduled occurrence composed by several processes (scheduler.occurrence_pool), on SQLite and
PostgreSQL: the spool holds exactly what fan-out composes from the snapshot in one process, for
any audience; a snapshot that is not clean goes back to fan-out's own composing; a pass with a
pool writes what a pass without one writes; a child's stop signal is its own."""

from __future__ import annotations

import csv
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

import scheduler.fanout
import scheduler.occurrence_pool
from campaigns.audience import Recipient
from campaigns.spec import load_campaign
from dispatch.models import send_job
from scheduler.check_pool import CheckPool
from scheduler.compose import compile_steps, compose_broadcast
from scheduler.occurrence_pool import composed_occurrence
from scheduler.planning import Planner
from scheduler.snapshot import ensure_snapshot, iter_snapshot
from scheduler.spool import JobSpool
from templates.errors import TemplateError
from tests.support.audience_cells import PERSON, TROUBLE, ZONES
from tests.support.examples import examples
from tests.support.schedules import launch_at, pass_at

LAUNCHED = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)  # a Monday; the campaign fires at 09:00
FIRST = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
STEPS = ("news", "reminder")
CAMPAIGN = """\
name: weekly
from: "Herald Tests <news@herald.test>"
audience: people.csv
schedule:
  cron: "0 9 * * mon"
steps:
  - id: news
    subject: "News for {{ name }}"
    text: "Hi {{ name }}, here is {{ city }}.{% if city == 'Boom' %}{{ missing }}{% endif %}"
  - id: reminder
    after: 1h
    subject: "Still news, {{ name }}"
    text: "{{ city }} again."
"""


def write_people(folder: Path, people: list[tuple[str, str, str]], bad: int | None = None) -> None:
    """people.csv: row ``i`` is user i with that name, city and zone; row ``bad`` (if any) has an
    address no mail can go to."""
    with (folder / "people.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["email", "name", "city", "timezone"])
        for i, (name, city, zone) in enumerate(people):
            email = "not-an-address" if i == bad else f"user{i}@example.com"
            writer.writerow([email, name, city, zone])


def scheduled(tmp_path: Path, engine: Engine, people: list[tuple[str, str, str]]) -> Path:
    """The campaign launched (on a list its check accepts), then ``people`` as the list of the
    occurrences to come: each reads the list of its day."""
    folder = tmp_path / "weekly"
    path = folder / "campaign.yaml"
    if not path.exists():
        folder.mkdir()
        path.write_text(CAMPAIGN, encoding="utf-8")
        write_people(folder, [("Someone", "Paris", "")])
        launch_at(engine, path, LAUNCHED)
    write_people(folder, people)
    return path


def inline(
    engine: Engine, path: Path, occurrence_at: datetime, *, skip_unrendered: bool = False
) -> dict[str, list[Any]]:
    """What fan-out composes in one process from the occurrence's snapshot, step by step in
    audience order (None for an unusable row). A message that cannot be rendered raises its
    TemplateError, or is left out, as fan-out leaves it (``skip_unrendered``)."""
    loaded = load_campaign(path)
    steps = compile_steps(loaded, None)
    planner = Planner(loaded.spec)
    snapshot = ensure_snapshot(engine, loaded, occurrence_at)
    composed: dict[str, list[Any]] = {step: [] for step in STEPS}
    for position, item in enumerate(iter_snapshot(engine, snapshot), start=1):
        for index, step in enumerate(steps):
            job = None
            if isinstance(item, Recipient):
                try:
                    job = compose_broadcast(loaded, planner, index, step, item, occurrence_at)
                except TemplateError:
                    if not skip_unrendered:
                        raise
                    continue
            composed[step.spec.id].append((position, job))
    return composed


def pooled(spool: JobSpool) -> dict[str, list[Any]]:
    return {step: list(spool.entries(step)) for step in STEPS}


POOL = CheckPool(3, block=3, min_rows=1)  # a small file: composed from the snapshot's copy
# Any file: composed from the CSV by three children while the snapshot is written.
BESIDE = CheckPool(3, block=3, min_rows=1, min_bytes=0)
OCCURRENCES = iter(range(10_000))


@settings(
    max_examples=examples(30),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@pytest.mark.parametrize("pool", [POOL, BESIDE], ids=["copy", "beside"])
@given(
    people=st.lists(PERSON, min_size=1, max_size=20),
    trouble=TROUBLE,
    at=st.integers(0, 20),
    page=st.integers(1, 6),
)
def test_a_pooled_occurrence_holds_what_fan_out_composes(
    engine: Engine,
    tmp_path: Path,
    pool: CheckPool,
    people: list[tuple[str, str, str]],
    trouble: tuple[str, str, str] | None,
    at: int,
    page: int,
) -> None:
    """Three processes read one snapshot file at once, in blocks of ``page`` rows, and compose
    blocks of three positions each: the merged spool is fan-out's one-process composing, job
    for job (keys, plans, send windows, payloads), for any names, cities and zones."""
    if trouble is not None:
        people = [*people[:at], trouble, *people[at:]]
    path = scheduled(tmp_path, engine, people)
    occurrence_at = FIRST + timedelta(weeks=next(OCCURRENCES))  # a snapshot of its own
    loaded = load_campaign(path)
    # First as a pass that reads the list now, then as one that finds its snapshot complete.
    spool = composed_occurrence(
        engine, loaded, occurrence_at, pool=pool, links=None, takeover_after=None, page=page
    )
    again = composed_occurrence(
        engine, loaded, occurrence_at, pool=pool, links=None, takeover_after=None, page=page
    )
    try:
        expected = inline(engine, path, occurrence_at)
    except TemplateError:  # a message that cannot be rendered: fan-out skips and says so
        expected = None
    if expected is None or ensure_snapshot(engine, loaded, occurrence_at).rejects:
        event("left to fan-out")
        assert spool is None
        assert again is None
        return
    event("pooled")
    assert spool is not None
    assert again is not None
    with spool, again:
        assert spool.complete
        assert again.complete
        assert pooled(spool) == expected
        assert pooled(again) == expected


def test_a_snapshot_with_an_unusable_row_is_left_to_fan_out(engine: Engine, tmp_path: Path) -> None:
    people = [(f"User {i}", "Paris", "") for i in range(12)]
    path = scheduled(tmp_path, engine, people)
    write_people(path.parent, people, bad=7)
    spool = composed_occurrence(
        engine, load_campaign(path), FIRST, pool=POOL, links=None, takeover_after=None
    )
    assert spool is None


def test_a_small_snapshot_is_composed_by_fan_out(engine: Engine, tmp_path: Path) -> None:
    path = scheduled(tmp_path, engine, [(f"User {i}", "Paris", "") for i in range(12)])
    small = CheckPool(3, block=3, min_rows=13)
    spool = composed_occurrence(
        engine, load_campaign(path), FIRST, pool=small, links=None, takeover_after=None
    )
    assert spool is None


@pytest.fixture
def kept(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each occurrence's pooled composing was kept (True) or left to fan-out."""
    outcomes: list[bool] = []

    def recording(*args: Any, **kwargs: Any) -> JobSpool | None:
        spool = composed_occurrence(*args, **kwargs)
        outcomes.append(spool is not None)
        return spool

    monkeypatch.setattr(scheduler.fanout, "composed_occurrence", recording)
    return outcomes


def outbox(engine: Engine) -> list[tuple[Any, ...]]:
    columns = (send_job.c.key, send_job.c.step, send_job.c.recipient, send_job.c.not_before)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(*columns, send_job.c.payload).order_by(send_job.c.id))
        return [tuple(row) for row in rows]


def written(composed: dict[str, list[Any]]) -> list[tuple[Any, ...]]:
    return [
        (job.key, job.step, job.recipient, job.not_before, job.payload)
        for step in STEPS
        for _, job in composed[step]
        if job is not None
    ]


def comparable(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """not_before as the moment it is, in UTC."""
    return [(*row[:3], row[3].astimezone(UTC), *row[4:]) for row in rows]


def test_a_pass_with_a_pool_writes_what_one_process_composes(
    engine: Engine, tmp_path: Path, kept: list[bool]
) -> None:
    people = [(f"User {i}", f"City {i % 5}", ZONES[i % len(ZONES)]) for i in range(40)]
    path = scheduled(tmp_path, engine, people)
    report = pass_at_with(engine, FIRST + timedelta(minutes=1), POOL)
    assert kept == [True]
    assert report.new_jobs == 40 * len(STEPS)
    assert report.get("weekly").processes == 3  # in the pass's report and its `fired` record
    assert comparable(outbox(engine)) == comparable(written(inline(engine, path, FIRST)))


def test_a_pass_whose_messages_cannot_all_be_rendered_skips_them_as_before(
    engine: Engine, tmp_path: Path, kept: list[bool]
) -> None:
    people = [(f"User {i}", "Boom" if i == 9 else "Paris", "") for i in range(20)]
    path = scheduled(tmp_path, engine, people)
    report = pass_at_with(engine, FIRST + timedelta(minutes=1), POOL)
    assert kept == [False]
    campaign = report.get("weekly")
    assert campaign is not None
    assert campaign.processes == 1
    assert campaign.new_jobs == 19 + 20  # row 10's news cannot be rendered; its reminder can
    assert campaign.note is not None
    assert "1 message(s) could not be rendered" in campaign.note
    assert "user9@example.com" in campaign.note
    assert comparable(outbox(engine)) == comparable(
        written(inline(engine, path, FIRST, skip_unrendered=True))
    )


def pass_at_with(engine: Engine, now: datetime, pool: CheckPool) -> Any:
    from scheduler.passes import run_pass

    return run_pass(engine, now=now, actor="test", pool=pool)


def test_a_pass_without_a_pool_composes_in_its_own_process(
    engine: Engine, tmp_path: Path, kept: list[bool]
) -> None:
    scheduled(tmp_path, engine, [(f"User {i}", "Paris", "") for i in range(10)])
    report = pass_at(engine, FIRST + timedelta(minutes=1))
    assert kept == []
    assert report.new_jobs == 10 * len(STEPS)


def test_a_nul_in_a_name_costs_its_row_not_the_occurrence(
    engine: Engine, tmp_path: Path, kept: list[bool]
) -> None:
    """A NUL (or any control character) in a name makes its row unusable, as a line break
    always did: the occurrence goes to everyone else and notes the row. Before, PostgreSQL
    refused the snapshot's text and every pass failed with a database error."""
    people = [(f"User {i}", "Paris", "") for i in range(12)]
    people[4] = ("Nul\x00Name", "Paris", "")
    scheduled(tmp_path, engine, people)
    report = pass_at_with(engine, FIRST + timedelta(minutes=1), POOL)
    campaign = report.get("weekly")
    assert campaign is not None
    assert campaign.new_jobs == 11 * len(STEPS)
    assert campaign.note is not None
    assert "1 audience row(s) could not be used" in campaign.note
    assert kept == [False]  # an unusable row: fan-out skips it in its own process
    assert "user4@example.com" not in {row[2] for row in outbox(engine)}


def test_a_snapshot_read_now_is_copied_as_it_is_written(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass that reads the list keeps its copy while writing the snapshot; only a pass that
    finds the snapshot complete reads it back from the database."""
    path = scheduled(tmp_path, engine, [(f"User {i}", "Paris", "") for i in range(12)])
    loaded = load_campaign(path)
    read_back: list[int] = []
    of = scheduler.occurrence_pool.SnapshotRows.of

    def recording(*args: Any, **kwargs: Any) -> Any:
        read_back.append(1)
        return of(*args, **kwargs)

    monkeypatch.setattr(scheduler.occurrence_pool.SnapshotRows, "of", recording)
    for expected_reads in ([], [1]):
        spool = composed_occurrence(
            engine, loaded, FIRST, pool=POOL, links=None, takeover_after=None
        )
        assert spool is not None
        spool.close()
        assert read_back == expected_reads


@pytest.fixture
def routes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """How each pooled composing ran: "beside" (from the CSV while the snapshot was written),
    "copy" (from the snapshot's copy), each "kept" or "dropped"."""
    seen: list[str] = []
    in_processes = scheduler.occurrence_pool._in_processes

    def recording(*args: Any, **kwargs: Any) -> Any:
        composed = in_processes(*args, **kwargs)
        route = "beside" if kwargs.get("beside") is not None else "copy"
        seen.append(f"{route} {'kept' if composed is not None else 'dropped'}")
        return composed

    monkeypatch.setattr(scheduler.occurrence_pool, "_in_processes", recording)
    return seen


def test_a_list_read_now_is_composed_beside_its_snapshot(
    engine: Engine, tmp_path: Path, routes: list[str]
) -> None:
    path = scheduled(tmp_path, engine, [(f"User {i}", "Paris", "") for i in range(12)])
    loaded = load_campaign(path)
    for _ in range(2):
        spool = composed_occurrence(
            engine, loaded, FIRST, pool=BESIDE, links=None, takeover_after=None
        )
        assert spool is not None
        with spool:
            assert pooled(spool) == inline(engine, path, FIRST)
    # The second pass found the snapshot complete: what its children read may not be the list
    # the snapshot holds, so the snapshot's copy is composed instead.
    assert routes == ["beside kept", "beside kept", "copy kept"]


def test_a_list_that_changed_while_its_snapshot_was_written_is_composed_from_the_snapshot(
    engine: Engine, tmp_path: Path, routes: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file's sha256 differs after the snapshot from before it: the children may have read
    another list than the snapshot's, so their work is dropped."""
    path = scheduled(tmp_path, engine, [(f"User {i}", "Paris", "") for i in range(12)])
    digests = iter(["before", "after"])
    monkeypatch.setattr(scheduler.occurrence_pool, "csv_digest", lambda _loaded: next(digests))
    spool = composed_occurrence(
        engine, load_campaign(path), FIRST, pool=BESIDE, links=None, takeover_after=None
    )
    assert spool is not None
    with spool:
        assert pooled(spool) == inline(engine, path, FIRST)
    assert routes == ["beside kept", "copy kept"]
