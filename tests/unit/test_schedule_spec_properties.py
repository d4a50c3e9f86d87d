"""Property tests for the timing keys: any text gives a SpecError or a valid spec, never a
traceback; valid windows, weekdays and times read back to what was written."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from campaigns.errors import SpecError
from campaigns.spec import load_campaign
from campaigns.spec_time import format_days, format_hours, parse_days
from dispatch.wallclock import DAY_NAMES, SendWindow
from tests.support.examples import examples

FULL_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    """One folder for all examples: each writes the campaign file afresh."""
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


def _campaign(**top: Any) -> dict[str, Any]:
    steps = top.pop("steps", [{"id": "s1", "subject": "Hi", "text": "t"}])
    return {
        "name": "c1",
        "from": "news@acme.example",
        "audience": ["ann@example.com"],
        **top,
        "steps": steps,
    }


def _load_or_spec_error(folder: Path, data: dict[str, Any]) -> Any:
    path = folder / "campaign.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=False), encoding="utf-8")
    try:
        return load_campaign(path).spec
    except SpecError as error:
        for problem in error.problems or [error]:
            assert problem.file == str(path)
            assert len(problem.message) < 400, problem.message  # quoted, never echoed whole
        return None


# Text as hostile as YAML can carry: control characters, path tricks, cron and zone fragments.
_FRAGMENTS = ["*", "/", "-", ",", "#", "L", "W", "?", "R", "H", "@", ":", "..", "\x00", " ", "\t"]
_FRAGMENTS += ["mon", "fri", "jan", "Europe/Berlin", "UTC", "09:00", "24:00", "recipient"]
hostile_text = st.one_of(
    st.text(max_size=80),
    st.lists(st.sampled_from(_FRAGMENTS) | st.integers(0, 99).map(str), max_size=12).map("".join),
    st.text(min_size=300, max_size=3000),
)
yaml_scalar = st.one_of(
    hostile_text,
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True),
    st.booleans(),
    st.none(),
    st.lists(hostile_text, max_size=4),
)


@settings(max_examples=examples(300), deadline=None)
@given(cron=yaml_scalar, zone=yaml_scalar, every=yaml_scalar, start=yaml_scalar)
def test_any_schedule_text_gives_a_spec_error_or_a_spec(
    folder: Path, cron: Any, zone: Any, every: Any, start: Any
) -> None:
    schedule = {"cron": cron, "timezone": zone, "start": start}
    _load_or_spec_error(folder, _campaign(schedule=schedule))
    _load_or_spec_error(folder, _campaign(schedule={"every": every, "end": start}))
    _load_or_spec_error(folder, _campaign(timezone=zone, start_at=start))


@settings(max_examples=examples(300), deadline=None)
@given(days=yaml_scalar, hours=yaml_scalar, zone=yaml_scalar)
def test_any_window_text_gives_a_spec_error_or_a_spec(
    folder: Path, days: Any, hours: Any, zone: Any
) -> None:
    window = {"days": days, "hours": hours, "timezone": zone}
    spec = _load_or_spec_error(folder, _campaign(send_window=window))
    if spec is not None:
        assert spec.send_window.window("UTC").describe()  # any accepted window is usable


@settings(max_examples=examples(300), deadline=None)
@given(at=yaml_scalar, on=yaml_scalar, zone=yaml_scalar)
def test_any_step_timing_gives_a_spec_error_or_a_spec(
    folder: Path, at: Any, on: Any, zone: Any
) -> None:
    step = {"id": "s1", "subject": "Hi", "text": "t", "at": at, "on": on, "timezone": zone}
    hook: dict[str, Any] = {"id": "s2", "channel": "webhook", "url": "https://hooks.example.com/in"}
    hook |= {"body": {"a": 1}, "at": at, "on": on, "timezone": zone}
    _load_or_spec_error(folder, _campaign(steps=[step, hook]))


# --- valid values read back ------------------------------------------------------------------

day_sets = st.frozensets(st.integers(0, 6), min_size=1)


@st.composite
def written_days(draw: st.DrawFn, days: frozenset[int]) -> str | list[str]:
    """The same days the ways a person might write them."""
    names = [draw(st.sampled_from([DAY_NAMES[day], FULL_NAMES[day]])) for day in sorted(days)]
    names = [draw(st.sampled_from([name, name.upper(), name.title()])) for name in names]
    form = draw(st.sampled_from(["canonical", "list", "commas", "spaces"]))
    if form == "canonical":
        return format_days(days)
    if form == "list":
        return draw(st.permutations(names))
    return (", " if form == "commas" else " ").join(names)


@st.composite
def windows(draw: st.DrawFn) -> tuple[frozenset[int], int, int, str | list[str]]:
    days = draw(day_sets)
    start = draw(st.integers(0, 1439))
    end = draw(st.integers(0, 1440).filter(lambda end: end != start))
    return days, start, end, draw(written_days(days))


@settings(max_examples=examples(300), deadline=None)
@given(window=windows(), zone=st.sampled_from(["UTC", "Europe/Berlin", "Australia/Lord_Howe"]))
def test_valid_windows_round_trip(
    folder: Path, window: tuple[frozenset[int], int, int, str | list[str]], zone: str
) -> None:
    days, start, end, written = window
    send_window = {"days": written, "hours": format_hours((start, end)), "timezone": zone}
    spec = _load_or_spec_error(folder, _campaign(send_window=send_window))
    assert spec is not None
    parsed = spec.send_window
    assert (parsed.days, parsed.start, parsed.end, parsed.timezone) == (days, start, end, zone)
    expected = SendWindow(days, start, end, zone)
    assert parsed.window(zone) == expected
    assert SendWindow.from_json(parsed.window(zone).to_json()) == expected
    dumped = spec.model_dump(mode="json", by_alias=True)["send_window"]
    assert dumped == {"days": format_days(days), "hours": send_window["hours"], "timezone": zone}
    assert type(spec).model_validate_json(spec.model_dump_json(by_alias=True)) == spec


@given(days=day_sets)
def test_format_days_is_read_back(days: frozenset[int]) -> None:
    assert parse_days(format_days(days)) == days


@settings(max_examples=examples(200), deadline=None)
@given(hour=st.integers(0, 23), minute=st.integers(0, 59), on=day_sets)
def test_valid_step_times_round_trip(
    folder: Path, hour: int, minute: int, on: frozenset[int]
) -> None:
    at = f"{hour:02d}:{minute:02d}"
    step = {"id": "s1", "subject": "Hi", "text": "t", "at": at, "on": format_days(on)}
    spec = _load_or_spec_error(folder, _campaign(timezone="Europe/Berlin", steps=[step]))
    assert spec is not None
    parsed = spec.steps[0]
    assert (parsed.at.hour, parsed.at.minute, parsed.on) == (hour, minute, on)
    assert spec.model_dump(mode="json")["steps"][0]["at"] == at
