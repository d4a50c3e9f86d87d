"""A drip pass's next steps composed by several processes (scheduler.drip_pool), on SQLite and
PostgreSQL: the pool's jobs are exactly what the pass composes in its own process, for any
names, variables and zones, at step 1 and at a later step; a chunk with a message that cannot be
rendered goes back to the pass's own composing, which ends that drip as before; chunks are
written in order while the next one is composed, each drip advanced once."""

from __future__ import annotations

import csv
import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

import scheduler.drip
import scheduler.drip_pool
from campaigns.spec import LoadedCampaign, load_campaign
from dispatch.models import send_job
from dispatch.store import NewJob
from scheduler.check_pool import CheckPool
from scheduler.compose import compile_steps
from scheduler.drip import DripReport, advance_drips
from scheduler.enrollment import sync_audience
from scheduler.models import enrollment_table
from scheduler.planning import Planner
from tests.support.audience_cells import PERSON, TROUBLE
from tests.support.examples import examples
from tests.support.schedules import launch_at

LAUNCHED = datetime(2026, 1, 6, 10, 0, tzinfo=UTC)
CAMPAIGN = """\
name: {name}
from: "Herald Tests <news@herald.test>"
enrollment: audience
audience: people.csv
steps:
  - id: welcome
    subject: "Welcome {{{{ name }}}}"
    text: "Hi {{{{ name }}}}, {{{{ city }}}}.{{% if city == 'Boom' %}}{{{{ nope }}}}{{% endif %}}"
  - id: tips
    after: 2d
    at: "09:00"
    timezone: recipient
    subject: "Tips for {{{{ name }}}}"
    text: "{{{{ city }}}} again."
"""
POOL = CheckPool(3, block=3, min_rows=1)
CAMPAIGNS = itertools.count()


def write_people(folder: Path, people: list[tuple[str, str, str]]) -> None:
    with (folder / "people.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["email", "name", "city", "timezone"])
        for i, (name, city, zone) in enumerate(people):
            writer.writerow([f"user{i}@example.com", name, city, zone])


def launched(tmp_path: Path, engine: Engine, people: list[tuple[str, str, str]]) -> LoadedCampaign:
    """A drip launched on one benign person, then ``people`` as its audience, enrolled (as a
    pass's sync does: their rows are not checked before their steps are composed)."""
    name = f"drip{next(CAMPAIGNS)}"
    folder = tmp_path / name
    folder.mkdir()
    path = folder / "campaign.yaml"
    path.write_text(CAMPAIGN.format(name=name), encoding="utf-8")
    write_people(folder, [("Someone", "Paris", "")])
    launch_at(engine, path, LAUNCHED)
    write_people(folder, [("Someone", "Paris", ""), *people])
    loaded = load_campaign(path)
    sync_audience(engine, loaded, now=LAUNCHED + timedelta(minutes=1), actor="test")
    return loaded


class Recorded:
    """What the pool composed: its chunks' drips and, for each kept chunk, its jobs."""

    def __init__(self) -> None:
        self.chunks: list[tuple[list[Any], bool]] = []  # (ready drips, kept)
        self.jobs: list[NewJob] = []


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Recorded:
    record = Recorded()
    compose = scheduler.drip_pool.compose_in_processes
    in_order = scheduler.drip_pool.in_order

    def composing(pool: CheckPool, steps: Any, items: Any, *args: Any, **kwargs: Any) -> Any:
        spool = compose(pool, steps, items, *args, **kwargs)
        record.chunks.append((list(items), spool is not None))
        return spool

    def ordering(*args: Any) -> Any:
        for job in in_order(*args):
            record.jobs.append(job)
            yield job

    monkeypatch.setattr(scheduler.drip, "compose_in_processes", composing)
    monkeypatch.setattr(scheduler.drip, "in_order", ordering)
    return record


def composed_here(loaded: LoadedCampaign, items: list[Any]) -> list[NewJob]:
    """The pass's own composing of ``items`` (steps compiled afresh, as the pass's are)."""
    steps = compile_steps(loaded, None)
    planner = Planner(loaded.spec)
    return [scheduler.drip._compose(loaded, steps, planner, item) for item in items]


def outbox(engine: Engine, loaded: LoadedCampaign, step: str) -> dict[str, tuple[Any, ...]]:
    j = send_job.c
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(j.key, j.recipient, j.not_before, j.payload).where(
                j.campaign == loaded.spec.name, j.step == step
            )
        )
        return {
            row.key: (row.recipient, row.not_before.astimezone(UTC), row.payload) for row in rows
        }


def written(jobs: list[NewJob]) -> dict[str, tuple[Any, ...]]:
    return {job.key: (job.recipient, job.not_before.astimezone(UTC), job.payload) for job in jobs}


def advance(engine: Engine, loaded: LoadedCampaign, **kwargs: Any) -> DripReport:
    steps = compile_steps(loaded, None)
    return advance_drips(engine, loaded, steps, actor="test", pool=POOL, **kwargs)


def send_everything(engine: Engine, loaded: LoadedCampaign) -> None:
    """Every job of the drip sent (outcome_at: a moment it plans its next step from)."""
    sent_at = LAUNCHED + timedelta(hours=1)
    with engine.begin() as conn:
        conn.execute(
            sa.update(send_job)
            .where(send_job.c.campaign == loaded.spec.name)
            .values(state="sent", outcome_at=sent_at)
        )


@settings(
    max_examples=examples(16),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    people=st.lists(PERSON, min_size=1, max_size=16),
    trouble=TROUBLE,
    at=st.integers(0, 16),
    chunk=st.integers(3, 9),
    page=st.integers(1, 6),
)
def test_pooled_drips_are_what_the_pass_composes(
    engine: Engine,
    tmp_path: Path,
    recorded: Recorded,
    people: list[tuple[str, str, str]],
    trouble: tuple[str, str, str] | None,
    at: int,
    chunk: int,
    page: int,
) -> None:
    """Chunks of ``chunk`` drips read ``page`` at a time, composed by three processes in blocks
    of three while the chunk before is written: every job is the pass's own composing of the
    same drip (key, plan, payload), at step 1 and again at step 2; a chunk holding a message
    that cannot be rendered is composed by the pass itself, which ends that drip."""
    if trouble is not None:
        people = [*people[:at], trouble, *people[at:]]
    recorded.chunks.clear()
    recorded.jobs.clear()
    loaded = launched(tmp_path, engine, people)
    first = advance(engine, loaded, chunk=chunk, page=page)
    step_one = list(recorded.jobs)
    kept = [items for items, was_kept in recorded.chunks if was_kept]
    assert step_one == composed_here(loaded, [item for items in kept for item in items])
    if all(was_kept for _, was_kept in recorded.chunks):
        event("every chunk pooled")
        assert not first.problems
    else:
        event("a chunk composed by the pass")
        dropped = [item for items, was_kept in recorded.chunks if not was_kept for item in items]
        assert any(item.row.variables.get("city") == "Boom" for item in dropped)
        assert first.problems is not None
        assert "step 'welcome'" in first.problems[0]
    assert first.processes == (3 if kept else 1)
    welcome = outbox(engine, loaded, "welcome")
    assert written(step_one).items() <= welcome.items()  # the launch's own person is there too

    recorded.chunks.clear()
    recorded.jobs.clear()
    send_everything(engine, loaded)
    advance(engine, loaded, chunk=chunk, page=page)
    kept = [items for items, was_kept in recorded.chunks if was_kept]
    assert all(was_kept for _, was_kept in recorded.chunks)  # step 2 renders for anyone
    assert recorded.jobs == composed_here(loaded, [item for items in kept for item in items])
    assert written(recorded.jobs) == outbox(engine, loaded, "tips")


def enrollment_steps(engine: Engine, loaded: LoadedCampaign) -> dict[str, tuple[str, int]]:
    e = enrollment_table.c
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(e.mailbox, e.state, e.next_step).where(e.campaign == loaded.spec.name)
        )
        return {row.mailbox: (row.state, row.next_step) for row in rows}


def test_a_chunk_that_cannot_all_be_rendered_is_composed_by_the_pass(
    engine: Engine, tmp_path: Path, recorded: Recorded
) -> None:
    """User 7's step 1 cannot be rendered (user8@: user0@ is the launch's own person): its
    chunk goes back to the pass's own composing,
    which ends that drip with its reason, as without a pool; the other chunks are pooled."""
    people = [(f"User {i}", "Boom" if i == 7 else "Paris", "") for i in range(12)]
    loaded = launched(tmp_path, engine, people)
    report = advance(engine, loaded, chunk=4, page=2)
    assert [kept for _, kept in recorded.chunks] == [True, False, True]
    assert report.processes == 3
    assert report.materialised == 11
    assert report.ended == 1
    assert report.problems is not None
    assert report.problems[0].startswith("user8@example.com: step 'welcome':")
    steps = enrollment_steps(engine, loaded)
    assert steps.pop("user8@example.com")[0] == "ended"
    assert set(steps.values()) == {("active", 1)}  # the launch's person and eleven more
    assert len(outbox(engine, loaded, "welcome")) == 12  # the launch's person and eleven more


def test_chunks_are_written_in_order_while_the_next_is_composed(
    engine: Engine, tmp_path: Path, recorded: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every chunk after the first is composed beside the previous one's writing; the pages
    are written in id order, each drip advanced once, and a pass again composes nothing."""
    besides: list[bool] = []
    compose = scheduler.drip_pool.compose_in_processes

    def composing(*args: Any, beside: Any = None, **kwargs: Any) -> Any:
        besides.append(beside is not None)
        return compose(*args, beside=beside, **kwargs)

    monkeypatch.setattr(scheduler.drip, "compose_in_processes", composing)
    pages: list[list[int]] = []
    write = scheduler.drip._write

    def writing(
        engine: Engine, loaded: Any, steps: Any, planner: Any, page: Any, *rest: Any
    ) -> None:
        pages.append([item.row.id for item in page.ready])
        write(engine, loaded, steps, planner, page, *rest)

    monkeypatch.setattr(scheduler.drip, "_write", writing)
    loaded = launched(tmp_path, engine, [(f"User {i}", "Paris", "") for i in range(23)])
    pages.clear()  # the launch's own pass
    report = advance(engine, loaded, chunk=5, page=3)
    assert besides == [False, True, True, True]  # pages of 3 gathered to 6, 6, 6 and 5
    ids = [drip for page in pages for drip in page]
    assert ids == sorted(ids)
    assert len(ids) == 23
    assert report.materialised == 23
    assert all(next_step == 1 for _, next_step in enrollment_steps(engine, loaded).values())
    assert advance(engine, loaded, chunk=5, page=3).materialised == 0


def test_a_pass_hands_its_pool_to_the_drips(engine: Engine, tmp_path: Path) -> None:
    from scheduler.passes import run_pass

    loaded = launched(tmp_path, engine, [(f"User {i}", "Paris", "") for i in range(6)])
    report = run_pass(engine, now=LAUNCHED + timedelta(minutes=2), actor="test", pool=POOL)
    campaign = report.get(loaded.spec.name)
    assert campaign is not None
    assert campaign.new_jobs == 6
    assert campaign.processes == 3
