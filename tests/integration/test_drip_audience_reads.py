"""A long-running scheduler reads a drip's CSV audience again only when its bytes changed.

Reading the CSV costs each row's parsing and address checks at every pass; from the same bytes
under the same campaign version it can change nothing, so ``PassState`` remembers the digest of
what this process last synced. The property holds a scheduler that remembers to one that reads
at every pass, through any sequence of edits: newcomers, departures, a swap of one address for
another of the same length (same size, same second), the same bytes written again, an emptied
file.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

import scheduler.enrollment
from campaigns.audience import Recipient, RowProblem, iter_audience
from campaigns.spec import LoadedCampaign
from scheduler.models import enrollment_table
from scheduler.passes import PassState, run_pass
from tests.integration.test_scheduler_drips import DRIP
from tests.support.examples import examples
from tests.support.schedules import launch_at, write_people, write_scheduled

T0 = datetime(2026, 1, 6, 10, 0, tzinfo=UTC)
# Equal lengths: swapping one for another keeps the file's size.
POOL = [f"p{i}@example.com" for i in range(6)]


def _enrollments(engine: Engine, campaign: str) -> dict[str, str]:
    e = enrollment_table.c
    with engine.connect() as conn:
        rows = conn.execute(sa.select(e.mailbox, e.state).where(e.campaign == campaign))
        return {row.mailbox: row.state for row in rows}


def _pass(engine: Engine, campaign: str, at: datetime, state: PassState | None) -> str | None:
    report = run_pass(engine, now=at, actor="test", campaigns=[campaign], state=state)
    found = report.get(campaign)
    assert found is not None
    return found.note


def test_the_same_bytes_are_not_read_again_and_a_same_size_edit_is(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_scheduled(tmp_path / "c", DRIP, POOL[:3], name="drip")
    launch_at(engine, path, T0)
    reads: list[str] = []
    real = iter_audience

    def counted(loaded: LoadedCampaign) -> Iterator[Recipient | RowProblem]:
        reads.append(loaded.spec.name)
        return real(loaded)

    monkeypatch.setattr(scheduler.enrollment, "iter_audience", counted)
    state = PassState()
    _pass(engine, "drip", T0 + timedelta(minutes=1), state)
    _pass(engine, "drip", T0 + timedelta(minutes=2), state)
    write_people(path.parent / "people.csv", POOL[:3])  # the same bytes, written again
    _pass(engine, "drip", T0 + timedelta(minutes=3), state)
    assert len(reads) == 1
    # p2 replaced by p3: the same size, and likely the same second.
    write_people(path.parent / "people.csv", [*POOL[:2], POOL[3]])
    _pass(engine, "drip", T0 + timedelta(minutes=4), state)
    assert len(reads) == 2
    assert _enrollments(engine, "drip") == {
        POOL[0]: "active",
        POOL[1]: "active",
        POOL[2]: "left",
        POOL[3]: "active",
    }
    _pass(engine, "drip", T0 + timedelta(minutes=5), None)  # no state: always read
    assert len(reads) == 3


@settings(
    max_examples=examples(20),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    versions=st.lists(
        st.lists(st.sampled_from(POOL), max_size=len(POOL), unique=True), min_size=1, max_size=5
    ),
    data=st.data(),
)
def test_remembering_the_digest_changes_nothing_a_pass_does(
    engine: Engine,
    tmp_path_factory: pytest.TempPathFactory,
    versions: list[list[str]],
    data: st.DataObject,
) -> None:
    folder = tmp_path_factory.mktemp("drips")
    run = data.draw(st.integers(0, 10**9), label="run")
    remembering, reading = f"r{run}", f"a{run}"
    paths = {
        name: write_scheduled(folder / name, DRIP, POOL[:2], name=name)
        for name in (remembering, reading)
    }
    for path in paths.values():
        launch_at(engine, path, T0)
    state = PassState()
    for index, people in enumerate(versions):
        at = T0 + timedelta(minutes=index + 1)
        for path in paths.values():
            write_people(path.parent / "people.csv", people)
        notes = (
            _pass(engine, remembering, at, state),
            _pass(engine, reading, at, None),
        )
        assert notes[0] == notes[1]
        assert _enrollments(engine, remembering) == _enrollments(engine, reading)
        # A second pass over the same bytes, as the scheduler's next tick would make it.
        assert _pass(engine, remembering, at + timedelta(seconds=30), state) == notes[0]
        assert _enrollments(engine, remembering) == _enrollments(engine, reading)
