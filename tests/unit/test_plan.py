"""The planning behind ``herald schedule`` and ``herald simulate`` (herald.app.plan, .simulate),
called directly: every recipient counted once per step whatever the time zones, steps never
before the occurrence nor before the previous step, windows respected; the first fires of each
trigger kind as a launch at ``now`` would have them."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from campaigns.spec import LoadedCampaign, load_campaign
from dispatch.wallclock import SendWindow
from herald.app.plan import AudienceZones, chain, due_groups, next_fire_after, upcoming
from herald.app.simulate import MAX_OCCURRENCES, simulate
from scheduler.planning import Planner
from tests.support.examples import examples
from tests.support.factories import write_yaml

ZONES = [None, "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]
WINDOWED = """\
name: windowed
from: "Acme <news@acme.example>"
timezone: Europe/Berlin
audience: [ann@example.com]
enrollment: audience
send_window: {days: mon-fri, hours: "09:00-17:00", timezone: recipient}
steps:
  - {id: one, subject: "1", text: "x"}
  - {id: two, after: 1d, at: "02:30", timezone: recipient, subject: "2", text: "x"}
  - {id: three, after: 36h, subject: "3", text: "x"}
  - {id: four, after: 0, at: "08:00", on: [sat, sun], subject: "4", text: "x"}
"""
START = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def windowed(tmp_path_factory: pytest.TempPathFactory) -> LoadedCampaign:
    return load_campaign(write_yaml(tmp_path_factory.mktemp("w"), WINDOWED))


@settings(max_examples=examples(60), deadline=None)
@given(
    counts=st.lists(st.integers(0, 50), min_size=len(ZONES), max_size=len(ZONES)),
    offset=st.integers(0, 366 * 24 * 60),
    broadcast=st.booleans(),
)
def test_every_recipient_once_per_step_in_order_and_in_the_window(
    windowed: LoadedCampaign, counts: list[int], offset: int, broadcast: bool
) -> None:
    spec = windowed.spec
    if broadcast:  # the same steps as a launch campaign: chained on planned times
        spec = spec.model_copy(update={"enrollment": None})
    now = START + timedelta(minutes=offset)
    zones = AudienceZones(Counter(dict(zip(ZONES, counts, strict=True))))
    planner = Planner(spec)
    groups = due_groups(spec, planner, now, zones, now)
    per_step = Counter[str]()
    for group in groups:
        per_step[group.step] += group.messages
    assert per_step == {step.id: zones.recipients for step in spec.steps if zones.recipients}
    for own_zone, n in zones.counts.items():
        if not n:
            continue
        due = [planned.not_before for planned in chain(spec, planner, now, own_zone)]
        assert due == sorted(due)
        assert due[0] >= now
        window = SendWindow(frozenset(range(5)), 9 * 60, 17 * 60, own_zone or "Europe/Berlin")
        assert all(window.contains(moment) for moment in due)


def campaign(tmp_path: Path, trigger: str) -> LoadedCampaign:
    text = f"""\
name: c
from: "Acme <news@acme.example>"
timezone: Europe/Berlin
audience: [ann@example.com]
{trigger}
steps:
  - {{id: one, subject: "1", text: "x"}}
"""
    return load_campaign(write_yaml(tmp_path, text))


NOW = datetime(2026, 10, 24, 12, 0, 0, 500_000, tzinfo=UTC)  # Saturday, fractions of a second


@pytest.mark.parametrize(
    ("trigger", "expected"),
    [
        ("", [(NOW, "at launch")]),
        ("enrollment: audience", [(NOW.replace(microsecond=0), "if enrolled now")]),
        ('start_at: "2026-10-01 09:00"', [(datetime(2026, 10, 1, 7, tzinfo=UTC), None)]),
        # A cron never fires at its registration; across the autumn change 09:00 stays 09:00.
        (
            'schedule: {cron: "0 9 * * *"}',
            [
                (datetime(2026, 10, 25, 8, tzinfo=UTC), None),
                (datetime(2026, 10, 26, 8, tzinfo=UTC), None),
            ],
        ),
        # every: without start fires first at launch (whole seconds), then elapsed time.
        (
            "schedule: {every: 1d}",
            [
                (NOW.replace(microsecond=0), None),
                (NOW.replace(microsecond=0) + timedelta(days=1), None),
            ],
        ),
        ("schedule: {every: 1d, end: 2026-10-24 08:00}", []),
    ],
)
def test_first_fires_of_a_launch_at_now(
    tmp_path: Path, trigger: str, expected: list[tuple[datetime, str | None]]
) -> None:
    spec = campaign(tmp_path, trigger).spec
    assert upcoming(spec, NOW, 2) == expected


def test_next_fire_of_a_registered_campaign(tmp_path: Path) -> None:
    spec = campaign(tmp_path, 'schedule: {cron: "30 2 * * *"}').spec
    registered = datetime(2026, 3, 28, 12, tzinfo=UTC)
    # 02:30 does not exist on 29 March in Berlin: the first instant after the gap, 03:00 CEST.
    assert next_fire_after(spec, cursor=None, registered_at=registered) == datetime(
        2026, 3, 29, 1, 0, tzinfo=UTC
    )
    cursor = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert next_fire_after(spec, cursor=cursor, registered_at=registered) == datetime(
        2026, 3, 30, 0, 30, tzinfo=UTC
    )
    launch_spec = campaign(tmp_path / "l", "").spec
    assert next_fire_after(launch_spec, cursor=None, registered_at=registered) is None


def test_a_fast_schedule_is_cut_at_the_occurrence_limit(tmp_path: Path) -> None:
    loaded = campaign(tmp_path, "schedule: {every: 1m}")
    result = simulate(
        loaded.path, until=NOW + timedelta(minutes=MAX_OCCURRENCES + 50), clock=lambda: NOW
    )
    assert result.cut
    assert result.occurrences == MAX_OCCURRENCES
    assert result.messages + result.beyond == MAX_OCCURRENCES


def test_a_manual_drip_is_simulated_for_one_recipient_per_cohort(tmp_path: Path) -> None:
    text = """\
name: manual
from: "Acme <news@acme.example>"
enrollment: manual
steps:
  - {id: one, subject: "1", text: "x"}
  - {id: two, after: 2d, subject: "2", text: "x"}
"""
    path = write_yaml(tmp_path, text)
    result = simulate(
        path, until=NOW + timedelta(days=3), clock=lambda: NOW, enroll_every=timedelta(days=1)
    )
    assert result.per_enrollment
    assert result.occurrences == 4  # now, +1d, +2d, +3d
    # By due time; at one time, the earlier cohort first.
    assert [(e.step, e.occurrence.day, e.messages) for e in result.entries] == [
        ("one", 24, 1),
        ("one", 25, 1),
        ("two", 24, 1),
        ("one", 26, 1),
        ("two", 25, 1),
        ("one", 27, 1),
    ]
    assert result.beyond == 2
