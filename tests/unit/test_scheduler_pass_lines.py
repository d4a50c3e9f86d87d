"""The one line `herald scheduler` logs per pass that did something (herald.app.scheduler_pass):
what fired, what was skipped and why, drips; a campaign's note only when it changes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

import scheduler.passes
from herald.app.scheduler_pass import ScheduledPass, describe
from scheduler.check_pool import CheckPool, pool_of
from scheduler.passes import CampaignPass, PassReport, PassState
from scheduler.unsubscribe_links import UnsubscribeLinks

NOW = datetime(2026, 3, 30, 7, 0, 5, tzinfo=UTC)
MONDAY = datetime(2026, 3, 30, 7, 0, tzinfo=UTC)


def test_a_fire_with_its_jobs() -> None:
    campaign = CampaignPass("digest", "schedule", fired=[MONDAY], new_jobs=120)
    assert describe(campaign) == ["fired 2026-03-30T07:00:00Z", "120 new job(s)"]


def test_several_fires_and_skips_with_their_reasons() -> None:
    days = [MONDAY - timedelta(days=n) for n in (2, 1, 0)]
    campaign = CampaignPass(
        "digest",
        "schedule",
        fired=days,
        skipped=[(MONDAY - timedelta(days=3), "missed: catch_up latest")],
    )
    assert describe(campaign) == [
        "fired 3 (2026-03-28T07:00:00Z .. 2026-03-30T07:00:00Z)",
        "skipped 1 (missed: catch_up latest)",
    ]


def test_drips() -> None:
    campaign = CampaignPass("welcome", "enrollment", enrolled=3, left=1, new_jobs=3, done=2)
    assert describe(campaign) == ["3 new job(s)", "3 enrolled", "1 left", "2 drip(s) done"]


def test_nothing_done_says_nothing() -> None:
    campaign = CampaignPass("digest", "schedule", next_fire=MONDAY + timedelta(days=7))
    assert describe(campaign) == []


@pytest.fixture
def engine() -> Iterator[Engine]:
    engine = sa.create_engine("sqlite://")  # the pass is a stand-in
    yield engine
    engine.dispose()


def test_a_note_is_logged_when_it_appears_changes_or_clears(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = iter(["file missing", "file missing", "file changed", None, None])
    states: list[PassState | None] = []
    pools: list[CheckPool | None] = []

    def run_pass(
        engine: Engine,
        *,
        now: datetime,
        actor: str,
        state: PassState | None = None,
        links: UnsubscribeLinks | None = None,
        fanout_progress: Callable[[int], None] | None = None,
        batch_size: int | None = None,
        pool: CheckPool | None = None,
    ) -> PassReport:
        states.append(state)
        pools.append(pool)
        return PassReport(now, [CampaignPass("digest", "schedule", note=next(notes))])

    monkeypatch.setattr(scheduler.passes, "run_pass", run_pass)
    the_pass = ScheduledPass()
    lines = [the_pass(engine, now=NOW, actor="t") for _ in range(5)]
    assert [s.line() if s.did_something else None for s in lines] == [
        "digest: note: file missing",
        None,
        "digest: note: file changed",
        "digest: note cleared",
        None,
    ]
    # One state for the life of the process (when each URL audience was last fetched).
    assert states[0] is not None
    assert all(state is states[0] for state in states)
    # And one pool: a large occurrence is composed by one process per core.
    assert pools == [pool_of()] * 5
    assert lines[0].as_dict()["campaigns"][0]["note"] == "file missing"  # type: ignore[index]


def test_a_campaign_another_scheduler_is_reading_is_shown_but_is_not_work_done(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run_pass(
        engine: Engine,
        *,
        now: datetime,
        actor: str,
        state: PassState | None = None,
        links: UnsubscribeLinks | None = None,
        fanout_progress: Callable[[int], None] | None = None,
        batch_size: int | None = None,
        pool: CheckPool | None = None,
    ) -> PassReport:
        return PassReport(now, [CampaignPass("big", "start_at", busy=True, note="ignored")])

    monkeypatch.setattr(scheduler.passes, "run_pass", run_pass)
    summary = ScheduledPass()(engine, now=NOW, actor="t")
    assert not summary.did_something
    assert summary.line() == (
        "big: waiting: another scheduler is reading its audience (taken over if it stops)"
    )
