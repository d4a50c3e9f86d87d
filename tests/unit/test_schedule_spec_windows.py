"""Send windows and a step's at/on/timezone in the campaign file (campaigns.spec_schedule,
spec_time): what they parse to, and errors naming file, line and field."""

from __future__ import annotations

from datetime import time, timedelta
from pathlib import Path

import pytest

from campaigns.spec import StepSpec, WebhookStepSpec
from dispatch.wallclock import SendWindow
from tests.unit.test_schedule_spec import (
    AUDIENCE,
    HEAD,
    STEP,
    STEPS_AT,
    load,
    only_problem,
    problems,
    utc,
)

# --- send windows ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("days", "expected"),
    [
        ("mon-fri", {0, 1, 2, 3, 4}),
        ("[mon, wed, fri]", {0, 2, 4}),
        ("'sat,sun'", {5, 6}),
        ("'sat, sun'", {5, 6}),
        ("fri-mon", {4, 5, 6, 0}),  # wraps round the week
        ("'mon - wed, sat'", {0, 1, 2, 5}),
        ("[Monday, TUESDAY]", {0, 1}),
        ("[mon-tue, fri]", {0, 1, 4}),
        ("sun", {6}),
        ("mon-sun", set(range(7))),
    ],
)
def test_window_days(tmp_path: Path, days: str, expected: set[int]) -> None:
    window = load(tmp_path, HEAD + AUDIENCE + f"send_window: {{days: {days}}}\n" + STEP).spec
    assert window.send_window is not None
    assert window.send_window.days == frozenset(expected)
    assert (window.send_window.start, window.send_window.end) == (0, 1440)
    assert window.send_window.timezone == "campaign"


@pytest.mark.parametrize(
    ("hours", "start", "end"),
    [
        ("09:00-17:00", 540, 1020),
        ("9:30-17:45", 570, 1065),
        ("22:00-02:00", 1320, 120),  # crosses midnight
        ("00:00-24:00", 0, 1440),  # the whole day
        ("18:00-24:00", 1080, 1440),
        ("18:00-00:00", 1080, 0),
        (" 08:00 - 12:00 ", 480, 720),
    ],
)
def test_window_hours(tmp_path: Path, hours: str, start: int, end: int) -> None:
    text = HEAD + AUDIENCE + f"send_window: {{hours: '{hours}'}}\n" + STEP
    window = load(tmp_path, text).spec.send_window
    assert window is not None
    assert (window.start, window.end) == (start, end)
    assert window.days == frozenset(range(7))


def test_window_becomes_a_send_window_in_a_zone(tmp_path: Path) -> None:
    text = HEAD + AUDIENCE + "timezone: Europe/Berlin\n"
    text += "send_window:\n  days: mon-fri\n  hours: '09:00-17:00'\n  timezone: recipient\n" + STEP
    spec = load(tmp_path, text).spec
    assert spec.send_window is not None
    assert spec.send_window.timezone == "recipient"
    window = spec.send_window.window("America/New_York")
    assert window == SendWindow(frozenset(range(5)), 540, 1020, "America/New_York")
    # Friday 2026-05-08 21:59 UTC is 17:59 in New York: closed until Monday 09:00 local.
    assert window.next_opening(utc(2026, 5, 8, 21, 59)) == utc(2026, 5, 11, 13, 0)
    assert spec.send_window.window(spec.zone_name).zone == "Europe/Berlin"


@pytest.mark.parametrize("zone", ["campaign", "recipient", "Asia/Tokyo"])
def test_window_zones(tmp_path: Path, zone: str) -> None:
    text = HEAD + AUDIENCE + f"send_window: {{days: mon, timezone: {zone}}}\n" + STEP
    window = load(tmp_path, text).spec.send_window
    assert window is not None
    assert window.timezone == zone


@pytest.mark.parametrize(
    ("window", "field", "message", "hint"),
    [
        ("{days: []}", "send_window.days", "no days given", "mon-fri"),
        ("{days: ''}", "send_window.days", "no days given", "mon-fri"),
        (
            "{hours: '09:00-09:00'}",
            "send_window.hours",
            "open and close at the same time",
            "00:00-24:00",
        ),
        (
            "{hours: '00:00-00:00'}",
            "send_window.hours",
            "open and close at the same time",
            "00:00-24:00",
        ),
        ("{days: [mon, fry]}", "send_window.days", "unknown day 'fry'", "did you mean 'fri'?"),
        ("{days: 'mon-frii'}", "send_window.days", "unknown day 'frii'", "did you mean 'fri'?"),
        ("{days: 'mon--fri'}", "send_window.days", "invalid day range 'mon--fri'", "mon-fri"),
        ("{days: [1, 2]}", "send_window.days", "expected a day name, got the number 1", "mon"),
        ("{days: 5}", "send_window.days", "expected days, got the number 5", "mon"),
        ("{hours: '9-17'}", "send_window.hours", "invalid hours '9-17'", "HH:MM-HH:MM"),
        ("{hours: '25:00-26:00'}", "send_window.hours", "no such time of day", "00-23"),
        ("{hours: '24:00-02:00'}", "send_window.hours", "no such time of day", "00-23"),
        ("{hours: '09:00-17:60'}", "send_window.hours", "no such time of day", "00-59"),
        ("{hours: 540}", "send_window.hours", "got the number 540", "09:00"),
        ("{days: mon, timezone: Mars/Base}", "send_window.timezone", "unknown time zone", "IANA"),
        ("{timezone: recipient}", "send_window", "needs days, hours or both", "mon-fri"),
        ("{}", "send_window", "needs days, hours or both", "mon-fri"),
        ("mon-fri", "send_window", "expected a mapping, got 'mon-fri'", "days"),
    ],
)
def test_invalid_windows(tmp_path: Path, window: str, field: str, message: str, hint: str) -> None:
    problem = only_problem(tmp_path, HEAD + AUDIENCE + f"send_window: {window}\n" + STEP)
    assert (problem.line, problem.field) == (4, field)
    assert message in problem.message
    assert problem.hint is not None
    assert hint in problem.hint


def test_unknown_window_keys_point_at_their_line(tmp_path: Path) -> None:
    text = HEAD + AUDIENCE + "send_window:\n  days: mon-fri\n  hour: '09:00-17:00'\n"
    text += "  tz: recipient\n" + STEP
    found = {(p.line, p.field, p.message, p.hint) for p in problems(tmp_path, text)}
    assert found == {
        (6, "send_window", "unknown key 'hour'", "did you mean 'hours'?"),
        (7, "send_window", "unknown key 'tz'", "did you mean 'timezone'?"),
    }


# --- a step's at / on / timezone -------------------------------------------------------------


def test_step_at_on_timezone(tmp_path: Path) -> None:
    spec = load(tmp_path, HEAD + AUDIENCE + "timezone: Europe/Berlin\n" + STEPS_AT).spec
    email, hook = spec.steps
    assert isinstance(email, StepSpec)
    assert isinstance(hook, WebhookStepSpec)
    assert (email.after, email.at, email.on, email.timezone) == (
        timedelta(days=1),
        time(9, 0),
        frozenset({0, 2}),
        None,
    )
    assert (hook.at, hook.on, hook.timezone) == (time(7, 30), frozenset(range(5)), "recipient")
    assert spec.step_zone(email) == "Europe/Berlin"
    assert spec.step_zone(hook) == "recipient"


def test_at_without_a_time_zone(tmp_path: Path) -> None:
    found = problems(tmp_path, HEAD + AUDIENCE + STEPS_AT)
    assert [(p.line, p.field, p.message) for p in found] == [
        (9, "steps[0].at", "at without a time zone")
    ]
    assert found[0].hint is not None
    assert "timezone:" in found[0].hint
    assert "recipient" in found[0].hint


def test_at_without_a_zone_on_a_webhook_step(tmp_path: Path) -> None:
    text = HEAD + AUDIENCE + STEPS_AT.replace("    timezone: recipient\n", "")
    text = text.replace(
        '    at: "09:00"\n    on: [mon, wed]\n', "    timezone: UTC\n    at: '09:00'\n"
    )
    problem = only_problem(tmp_path, text)
    assert (problem.line, problem.field) == (15, "steps[1].at")


@pytest.mark.parametrize(
    ("at", "message", "hint"),
    [
        ("'25:00'", "no such time of day in '25:00'", "hours are 00-23"),
        ("'24:00'", "no such time of day in '24:00'", "hours are 00-23"),
        ("'09:60'", "no such time of day in '09:60'", "minutes 00-59"),
        ("'9am'", "invalid time of day '9am'", '"09:00"'),
        ("'09:00:00'", "invalid time of day '09:00:00'", '"09:00"'),
        ("10:00", "expected a time of day in quotes, got the number 600", 'write "10:00"'),
        ("17:45", "got the number 1065", "YAML reads an unquoted 17:45 as the number 1065"),
        ("9", "got the number 9", 'e.g. at: "09:00"'),
        ("true", "got the yes/no value true", '"09:00"'),
    ],
)
def test_invalid_at(tmp_path: Path, at: str, message: str, hint: str) -> None:
    text = HEAD + AUDIENCE + "timezone: UTC\nsteps:\n  - id: s1\n    subject: Hi\n"
    problem = only_problem(tmp_path, text + f"    text: t\n    at: {at}\n")
    assert (problem.line, problem.field) == (9, "steps[0].at")
    assert message in problem.message
    assert problem.hint is not None
    assert hint in problem.hint


def test_on_and_step_timezone_need_at(tmp_path: Path) -> None:
    text = HEAD + AUDIENCE + "steps:\n  - id: s1\n    subject: Hi\n    text: t\n"
    text += "    on: [mon]\n    timezone: recipient\n"
    found = [(p.line, p.field, p.message) for p in problems(tmp_path, text)]
    assert found == [
        (8, "steps[0].on", "on needs at: the time of day to send on those days"),
        (9, "steps[0].timezone", "a step's timezone needs at: it says in which zone at is read"),
    ]


def test_invalid_on_and_step_timezone(tmp_path: Path) -> None:
    text = HEAD + AUDIENCE + "steps:\n  - id: s1\n    subject: Hi\n    text: t\n    at: '09:00'\n"
    text += "    on: [mon, someday]\n    timezone: Mars/Base\n"
    found = {(p.line, p.field, p.message) for p in problems(tmp_path, text)}
    assert found == {
        (9, "steps[0].on", "unknown day 'someday'"),
        (10, "steps[0].timezone", "unknown time zone 'Mars/Base'"),
    }


def test_unknown_step_keys_suggest_timing_keys(tmp_path: Path) -> None:
    text = HEAD + AUDIENCE + "timezone: UTC\nsteps:\n  - id: s1\n    subject: Hi\n    text: t\n"
    text += "    time: '09:00'\n    days: [mon]\n"
    found = {(p.line, p.message, p.hint) for p in problems(tmp_path, text)}
    assert found == {
        (9, "unknown key 'time'", "did you mean 'at'?"),
        (10, "unknown key 'days'", "did you mean 'on'?"),
    }


def test_all_problems_at_once(tmp_path: Path) -> None:
    text = """\
    name: c1
    from: news@acme.example
    audience: [ann@example.com]
    timezone: Europe/Berln
    schedule:
      cron: "0 9 * * mon 2"
      catchup: all
    send_window: {days: [mon, fry], hours: "25:00-17:00", timezone: "../../etc/passwd"}
    steps:
      - id: s1
        subject: Hi
        text: t
        at: "25:00"
    """
    found = [(p.line, p.field) for p in problems(tmp_path, text)]
    assert found == [
        (4, "timezone"),
        (6, "schedule.cron"),
        (7, "schedule"),
        (8, "send_window.days"),
        (8, "send_window.hours"),
        (8, "send_window.timezone"),
        (13, "steps[0].at"),
    ]


def test_keys_yaml_reads_as_yes_no_values(tmp_path: Path) -> None:
    """An unquoted `on:` names a step's days; elsewhere such a key is named for what it is."""
    text = HEAD + AUDIENCE + "send_window:\n  days: mon\n  on: mon-fri\n"
    text += "steps:\n  - id: s1\n    subject: Hi\n    text: t\n    off: 2\n"
    found = {(p.line, p.field, p.message, p.hint) for p in problems(tmp_path, text)}
    assert found == {
        (
            4,
            "send_window",
            "a key YAML reads as the yes/no value true (an unquoted on, off, yes or no)",
            'put the key in quotes, e.g. "on":',
        ),
        (
            8,
            "steps[0]",
            "a key YAML reads as the yes/no value false (an unquoted on, off, yes or no)",
            'put the key in quotes, e.g. "on":',
        ),
    }


def test_campaign_is_not_a_step_zone(tmp_path: Path) -> None:
    text = HEAD + AUDIENCE + "steps:\n  - {id: s1, subject: Hi, text: t, at: '09:00',"
    problem = only_problem(tmp_path, text + " timezone: campaign}\n")
    assert (problem.field, problem.message) == (
        "steps[0].timezone",
        "'campaign' is not a zone name here",
    )
    assert problem.hint is not None
    assert "send_window only" in problem.hint
