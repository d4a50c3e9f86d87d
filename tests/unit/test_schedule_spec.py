"""The campaign file's timing keys (campaigns.spec_schedule, spec_time): trigger keys, send
windows and a step's at/on/timezone — what they parse to, and errors naming file, line, field."""

from __future__ import annotations

import json
import textwrap
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

import pytest

from campaigns.errors import CampaignError, SpecError
from campaigns.spec import (
    CampaignSpec,
    LoadedCampaign,
    ScheduleSpec,
    StepSpec,
    WindowSpec,
    load_campaign,
)

HEAD = "name: c1\nfrom: news@acme.example\n"  # lines 1-2
AUDIENCE = "audience: [ann@example.com]\n"
STEP = "steps:\n  - {id: s1, subject: Hi, text: hello}\n"


def write(folder: Path, text: str) -> Path:
    path = folder / "campaign.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load(folder: Path, text: str) -> LoadedCampaign:
    return load_campaign(write(folder, text))


def problems(folder: Path, text: str) -> list[CampaignError]:
    with pytest.raises(SpecError) as caught:
        load(folder, text)
    return caught.value.problems or [caught.value]


def only_problem(folder: Path, text: str) -> CampaignError:
    found = problems(folder, text)
    assert len(found) == 1, [str(p) for p in found]
    return found[0]


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


STEPS_AT = """\
steps:
  - id: s1
    subject: Hi
    text: t
    after: 1d
    at: "09:00"
    on: [mon, wed]
  - id: s2
    channel: webhook
    url: https://hooks.example.com/in
    body: {email: "{{ email }}"}
    at: "7:30"
    on: mon-fri
    timezone: recipient
"""


# --- schedule --------------------------------------------------------------------------------


def test_cron_schedule_inherits_the_campaign_zone(tmp_path: Path) -> None:
    text = HEAD + AUDIENCE + "timezone: Europe/Berlin\n"
    text += "schedule:\n  cron: '0  9 * *   MON'\n  catch_up: all\n  max_catch_up_age: 6h\n" + STEP
    spec = load(tmp_path, text).spec
    assert spec.trigger == "schedule"
    assert spec.zone_name == "Europe/Berlin"
    assert spec.schedule == ScheduleSpec(
        timezone="Europe/Berlin",
        cron="0 9 * * MON",  # fields separated by single spaces
        catch_up="all",
        max_catch_up_age=timedelta(hours=6),
    )
    assert spec.schedule.zone_name == "Europe/Berlin"


def test_schedule_defaults(tmp_path: Path) -> None:
    spec = load(tmp_path, HEAD + AUDIENCE + "schedule: {every: 6h}\n" + STEP).spec
    assert spec.schedule is not None
    assert spec.schedule.every == timedelta(hours=6)
    assert (spec.schedule.cron, spec.schedule.start, spec.schedule.end) == (None, None, None)
    assert spec.schedule.catch_up == "latest"
    assert spec.schedule.max_catch_up_age is None
    assert spec.schedule.timezone is None
    assert spec.schedule.zone_name == "UTC"


def test_schedule_zone_of_its_own(tmp_path: Path) -> None:
    text = HEAD + AUDIENCE + "timezone: Europe/Berlin\n"
    text += "schedule: {cron: '0 9 * * *', timezone: America/New_York}\n" + STEP
    schedule = load(tmp_path, text).spec.schedule
    assert schedule is not None
    assert schedule.zone_name == "America/New_York"


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        # a YAML timestamp without offset: local wall time in the schedule's zone
        ("2026-05-04 09:00:00", utc(2026, 5, 4, 7, 0)),
        # text, with or without seconds or T
        ("'2026-05-04 09:00'", utc(2026, 5, 4, 7, 0)),
        ("'2026-05-04T09:00'", utc(2026, 5, 4, 7, 0)),
        # a date alone is local midnight
        ("2026-05-04", utc(2026, 5, 3, 22, 0)),
        # an offset is kept as written
        ("2026-05-04T09:00:00+00:00", utc(2026, 5, 4, 9, 0)),
        ("'2026-05-04T09:00Z'", utc(2026, 5, 4, 9, 0)),
        # the DST rule: a skipped time is the first instant after the gap, a repeated one the
        # first of the two
        ("2026-03-29 02:30:00", utc(2026, 3, 29, 1, 0)),
        ("2026-10-25 02:30:00", utc(2026, 10, 25, 0, 30)),
        # whole seconds
        ("'2026-05-04T09:00:00.750+00:00'", utc(2026, 5, 4, 9, 0)),
    ],
)
def test_schedule_start_is_stored_as_utc(tmp_path: Path, written: str, expected: datetime) -> None:
    text = HEAD + AUDIENCE + "timezone: Europe/Berlin\n"
    text += f"schedule:\n  every: 1d\n  start: {written}\n" + STEP
    schedule = load(tmp_path, text).spec.schedule
    assert schedule is not None
    assert schedule.start == expected
    assert schedule.start is not None
    assert schedule.start.tzinfo == UTC


def test_schedule_start_in_its_own_zone_else_utc(tmp_path: Path) -> None:
    own = "schedule: {every: 1d, start: 2026-05-04 09:00:00, timezone: America/New_York}\n"
    schedule = load(tmp_path, HEAD + AUDIENCE + own + STEP).spec.schedule
    assert schedule is not None
    assert schedule.start == utc(2026, 5, 4, 13, 0)
    none = "schedule: {every: 1d, start: 2026-05-04 09:00:00}\n"
    schedule = load(tmp_path, HEAD + AUDIENCE + none + STEP).spec.schedule
    assert schedule is not None
    assert schedule.start == utc(2026, 5, 4, 9, 0)


@pytest.mark.parametrize(
    "cron",
    [
        "*/15 * * * *",
        "0 9 * * mon-fri",
        "30 8 1,15 * 5",
        "0 0 1 jan *",
        "0 9 * * 7",
        "0 9 29 2 *",  # fires every four years
        "0 9 L * *",
        "0 9 * * mon#2",
        "59/15 * * * *",
    ],
)
def test_valid_cron_expressions(tmp_path: Path, cron: str) -> None:
    text = HEAD + AUDIENCE + f"schedule: {{cron: '{cron}'}}\n" + STEP
    schedule = load(tmp_path, text).spec.schedule
    assert schedule is not None
    assert schedule.cron == cron


@pytest.mark.parametrize(
    ("cron", "message", "hint"),
    [
        ("0 9 * * mon 2026", "has 6 fields, not 5", "no seconds or years field"),
        ("0 0 9 * * *", "has 6 fields, not 5", "no seconds or years field"),
        ("0 9 * *", "has 4 fields, not 5", "minute hour day-of-month month day-of-week"),
        ("@daily", "cron shorthand '@daily' is not supported", "write '0 0 * * *'"),
        ("@reboot", "cron shorthand '@reboot' is not supported", "five fields"),
        ("60 * * * *", "invalid minute field '60' in cron", "allowed: 0-59"),
        ("0 24 * * *", "invalid hour field '24' in cron", "allowed: 0-23"),
        ("0 9 0 * *", "invalid day-of-month field '0' in cron", "allowed: 1-31"),
        ("0 9 * 13 *", "invalid month field '13' in cron", "jan-dec"),
        ("0 9 * * funday", "invalid day-of-week field 'funday' in cron", "sun-sat"),
        ("*/0 * * * *", "invalid minute field '*/0' in cron", "0-59"),
        ("R 9 * * *", "random (R) and hashed (H) values are not supported", "same times"),
        ("H 9 * * *", "random (R) and hashed (H) values are not supported", "same times"),
        ("0 9 30 2 *", "never fires", "no date matches it"),
        ("", "cron expression is empty", "five fields"),
        ("0 9 * * mon\x00", "contains a character cron never uses", None),
        ("0 9 * * lün", "contains a character cron never uses", None),
    ],
)
def test_invalid_cron_says_what_is_wrong(
    tmp_path: Path, cron: str, message: str, hint: str | None
) -> None:
    text = HEAD + AUDIENCE + "schedule:\n" + f"  cron: {json.dumps(cron)}\n" + STEP
    problem = only_problem(tmp_path, text)
    assert (problem.line, problem.field) == (5, "schedule.cron")
    assert message in problem.message
    if hint is not None:
        assert problem.hint is not None
        assert hint in problem.hint


def test_cron_that_is_not_text_or_too_long(tmp_path: Path) -> None:
    problem = only_problem(tmp_path, HEAD + AUDIENCE + "schedule: {cron: 5}\n" + STEP)
    assert problem.message == "expected a cron expression in quotes, got the number 5"
    long = "1," * 5000 + "2 * * * *"
    problem = only_problem(tmp_path, HEAD + AUDIENCE + f"schedule: {{cron: '{long}'}}\n" + STEP)
    assert "is too long" in problem.message
    assert len(problem.message) < 200


@pytest.mark.parametrize(
    ("every", "message"),
    [
        ("0", "every must be at least 1 minute, got the number 0"),
        ("30s", "every must be at least 1 minute, got '30s'"),
        ("-6h", "negative"),
        ("6x", "unknown unit 'x'"),
        ("6", "a number needs a unit"),
        ("soon", "expected a number followed by a unit"),
        ("[6h]", "expected a duration, got a list"),
    ],
)
def test_invalid_every(tmp_path: Path, every: str, message: str) -> None:
    problem = only_problem(tmp_path, HEAD + AUDIENCE + f"schedule:\n  every: {every}\n" + STEP)
    assert (problem.line, problem.field) == (5, "schedule.every")
    assert message in problem.message
    assert problem.hint == "e.g. every: 15m, 6h, 1d or 2w"


def test_schedule_needs_exactly_one_of_cron_and_every(tmp_path: Path) -> None:
    problem = only_problem(tmp_path, HEAD + AUDIENCE + "schedule:\n  catch_up: all\n" + STEP)
    assert (problem.line, problem.field) == (4, "schedule")
    assert problem.message == "a schedule needs cron or every"
    text = HEAD + AUDIENCE + "schedule:\n  cron: '0 9 * * *'\n  every: 1d\n" + STEP
    problem = only_problem(tmp_path, text)
    assert (problem.line, problem.field) == (6, "schedule.every")
    assert problem.message == "cron and every cannot be used together"


def test_schedule_end_must_follow_start(tmp_path: Path) -> None:
    text = HEAD + AUDIENCE + "timezone: Europe/Berlin\nschedule:\n  every: 1d\n"
    text += "  start: 2026-06-01\n  end: 2026-05-01\n" + STEP
    problem = only_problem(tmp_path, text)
    assert (problem.line, problem.field) == (8, "schedule.end")
    assert problem.message == (
        "end (2026-04-30 22:00:00 UTC) is not after start (2026-05-31 22:00:00 UTC)"
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("yesterday", "invalid date and time 'yesterday'"),
        ("'2026-13-01 09:00'", "invalid date and time '2026-13-01 09:00'"),
        ("1900-01-01", "1900-01-01T00:00:00 is out of range"),
        ("'9999-12-31T23:59:59-12:00'", "out of range"),
        ("42", "expected a date and time, got the number 42"),
        ("'" + "2" * 500 + "'", "invalid date and time"),
    ],
)
def test_invalid_start(tmp_path: Path, value: str, message: str) -> None:
    text = HEAD + AUDIENCE + f"schedule:\n  every: 1d\n  start: {value}\n" + STEP
    problem = only_problem(tmp_path, text)
    assert (problem.line, problem.field) == (6, "schedule.start")
    assert message in problem.message
    assert len(problem.message) < 200
    assert problem.hint is not None


def test_catch_up_settings(tmp_path: Path) -> None:
    problem = only_problem(
        tmp_path, HEAD + AUDIENCE + "schedule: {every: 1h, catch_up: some}\n" + STEP
    )
    assert problem.field == "schedule.catch_up"
    assert problem.message == "must be 'latest', 'all' or 'none', got 'some'"
    text = HEAD + AUDIENCE + "schedule:\n  every: 1h\n  catch_up: none\n  max_catch_up_age: 2h\n"
    problem = only_problem(tmp_path, text + STEP)
    assert (problem.line, problem.field) == (7, "schedule.max_catch_up_age")
    assert "no effect with catch_up: none" in problem.message
    problem = only_problem(
        tmp_path, HEAD + AUDIENCE + "schedule: {every: 1h, max_catch_up_age: 0}\n" + STEP
    )
    assert problem.message == "max_catch_up_age must be longer than 0"
    assert problem.hint is not None
    assert "catch_up: none" in problem.hint


def test_unknown_schedule_keys_point_at_their_line(tmp_path: Path) -> None:
    text = HEAD + AUDIENCE + "schedule:\n  every: 1h\n  catchup: all\n  interval: 2h\n" + STEP
    found = {(p.line, p.field, p.message, p.hint) for p in problems(tmp_path, text)}
    assert found == {
        (6, "schedule", "unknown key 'catchup'", "did you mean 'catch_up'?"),
        (7, "schedule", "unknown key 'interval'", "did you mean 'every'?"),
    }


def test_schedule_written_as_a_bare_cron_string(tmp_path: Path) -> None:
    problem = only_problem(tmp_path, HEAD + AUDIENCE + "schedule: '0 9 * * *'\n" + STEP)
    assert (problem.line, problem.field) == (4, "schedule")
    assert problem.hint == "write schedule: {cron: '0 9 * * *'} or schedule: {every: 6h}"


# --- time zones ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["Europe/Berlin", "America/New_York", "UTC", "Australia/Lord_Howe"]
)
def test_valid_campaign_zones(tmp_path: Path, name: str) -> None:
    spec = load(tmp_path, HEAD + AUDIENCE + f"timezone: {name}\n" + STEP).spec
    assert (spec.timezone, spec.zone_name) == (name, name)


@pytest.mark.parametrize(
    ("name", "message", "hint"),
    [
        ("Europe/Berln", "unknown time zone 'Europe/Berln'", "did you mean 'Europe/Berlin'?"),
        ("europe/berlin", "unknown time zone 'europe/berlin'", "case-sensitive"),
        ("Berlin", "unknown time zone 'Berlin'", "did you mean 'Europe/Berlin'?"),
        ("New York", "unknown time zone 'New York'", "did you mean 'America/New_York'?"),
        ("+02:00", "unknown time zone '+02:00'", "not an offset"),
        ("UTC+2", "unknown time zone 'UTC+2'", "not an offset"),
        ("../../etc/passwd", "unknown time zone '../../etc/passwd'", "IANA"),
        ("/etc/localtime", "unknown time zone '/etc/localtime'", "IANA"),
        ("Europe/../../../etc/passwd", "unknown time zone", "IANA"),
        ("Europe\\Berlin", "unknown time zone 'Europe\\\\Berlin'", None),
        ("Europe/Berlin\x00", "unknown time zone 'Europe/Berlin\\x00'", None),
        ("", "unknown time zone ''", "IANA"),
        ("localtime", "does not mean the same on every machine", "IANA"),
        ("right/Europe/Berlin", "does not mean the same on every machine", "IANA"),
        ("posix/Europe/Berlin", "does not mean the same on every machine", "IANA"),
        ("recipient", "'recipient' is not a zone name here", "steps and send_window only"),
        ("A" * 100_000, "too long for a name", "IANA"),
    ],
)
def test_invalid_campaign_zones(tmp_path: Path, name: str, message: str, hint: str | None) -> None:
    text = HEAD + AUDIENCE + f"timezone: {json.dumps(name)}\n" + STEP
    problem = only_problem(tmp_path, text)
    assert (problem.line, problem.field) == (4, "timezone")
    assert message in problem.message
    assert len(str(problem)) < 400  # a hostile value is quoted, never echoed whole
    if hint is not None:
        assert problem.hint is not None
        assert hint in problem.hint


def test_zone_that_is_not_text(tmp_path: Path) -> None:
    problem = only_problem(tmp_path, HEAD + AUDIENCE + "timezone: 2\n" + STEP)
    assert problem.message == "expected a time zone name, got the number 2"


def test_invalid_campaign_zone_is_reported_once(tmp_path: Path) -> None:
    """Times read in a wrong zone are not reported as wrong too, nor at-steps as zoneless."""
    text = HEAD + AUDIENCE + "timezone: Mars/Olympus\nschedule: {every: 1d, start: 2026-05-04}\n"
    text += "steps:\n  - {id: s1, subject: Hi, text: t, at: '09:00'}\n"
    problem = only_problem(tmp_path, text)
    assert problem.field == "timezone"


# --- start_at, enrollment, and one trigger ---------------------------------------------------


def test_start_at_in_the_campaign_zone(tmp_path: Path) -> None:
    text = HEAD + AUDIENCE + "timezone: Europe/Berlin\nstart_at: 2026-05-04 09:00:00\n" + STEP
    spec = load(tmp_path, text).spec
    assert spec.trigger == "start_at"
    assert spec.start_at == utc(2026, 5, 4, 7, 0)
    spec = load(tmp_path, HEAD + AUDIENCE + "start_at: '2026-05-04 09:00'\n" + STEP).spec
    assert spec.start_at == utc(2026, 5, 4, 9, 0)


def test_enrollment(tmp_path: Path) -> None:
    spec = load(tmp_path, HEAD + AUDIENCE + "enrollment: audience\n" + STEP).spec
    assert (spec.trigger, spec.enrollment) == ("enrollment", "audience")
    spec = load(tmp_path, HEAD + "enrollment: manual\n" + STEP).spec
    assert (spec.trigger, spec.enrollment, spec.audience) == ("enrollment", "manual", None)


@pytest.mark.parametrize("top", ["", "enrollment: audience\n", "schedule: {every: 1d}\n"])
def test_audience_is_required_unless_enrollment_is_manual(tmp_path: Path, top: str) -> None:
    problem = only_problem(tmp_path, HEAD + top + STEP)
    assert problem.message == "missing required key 'audience'"
    assert problem.field is None


def test_launch_is_the_trigger_without_a_key(tmp_path: Path) -> None:
    spec = load(tmp_path, HEAD + AUDIENCE + STEP).spec
    assert spec.trigger == "launch"
    assert (spec.timezone, spec.zone_name) == (None, "UTC")
    assert (spec.schedule, spec.start_at, spec.enrollment, spec.send_window) == (None,) * 4


@pytest.mark.parametrize(
    ("keys", "line", "field", "message"),
    [
        (
            "enrollment: audience\nstart_at: 2026-05-04 09:00:00\n",
            5,
            "start_at",
            "enrollment and start_at cannot be used together",
        ),
        (
            "start_at: 2026-05-04 09:00:00\nschedule: {every: 1d}\n",
            5,
            "schedule",
            "start_at and schedule cannot be used together",
        ),
        (
            "schedule: {every: 1d}\nenrollment: audience\n",
            4,
            "schedule",
            "enrollment and schedule cannot be used together",
        ),
    ],
)
def test_one_trigger_only(tmp_path: Path, keys: str, line: int, field: str, message: str) -> None:
    problem = only_problem(tmp_path, HEAD + AUDIENCE + keys + STEP)
    assert (problem.line, problem.field, problem.message) == (line, field, message)
    assert problem.hint is not None
    assert "one trigger" in problem.hint


# --- the spec hash and Python round trips ----------------------------------------------------


@pytest.mark.parametrize(
    ("trigger", "follows_csv"),
    [
        ("", True),
        ("start_at: 2026-05-04 09:00:00\n", True),
        ("schedule: {cron: '0 9 * * mon'}\n", False),
        ("enrollment: audience\n", False),
    ],
)
def test_spec_hash_covers_the_csv_only_for_one_time_triggers(
    tmp_path: Path, trigger: str, follows_csv: bool
) -> None:
    people = tmp_path / "people.csv"
    people.write_text("email\nann@example.com\n", encoding="utf-8")
    path = write(tmp_path, HEAD + "audience: people.csv\n" + trigger + STEP)
    before = load_campaign(path).spec_hash
    people.write_text("email\nann@example.com\nbob@example.com\n", encoding="utf-8")
    assert (load_campaign(path).spec_hash != before) is follows_csv
    path.write_text(path.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    assert load_campaign(path).spec_hash != before  # the YAML itself always counts


def test_recurring_campaign_with_a_missing_csv_still_loads(tmp_path: Path) -> None:
    """Its audience is read for each occurrence, not at load: a missing file shows up there."""
    spec = load(tmp_path, HEAD + "audience: later.csv\nschedule: {every: 1d}\n" + STEP).spec
    assert spec.trigger == "schedule"


def test_timing_keys_round_trip_through_python_and_json(tmp_path: Path) -> None:
    text = HEAD + AUDIENCE + "timezone: Europe/Berlin\n"
    text += "schedule: {cron: '0 9 * * mon', start: 2026-05-04, end: 2026-12-31, catch_up: none}\n"
    text += "send_window: {days: [mon, tue, wed, sat], hours: '22:00-02:00', timezone: recipient}\n"
    spec = load(tmp_path, text + STEPS_AT).spec
    assert CampaignSpec.model_validate(spec.model_dump(by_alias=True)) == spec
    assert CampaignSpec.model_validate_json(spec.model_dump_json(by_alias=True)) == spec
    dumped = spec.model_dump(mode="json", by_alias=True)
    assert dumped["send_window"] == {
        "days": "mon-wed,sat",
        "hours": "22:00-02:00",
        "timezone": "recipient",
    }
    assert dumped["steps"][0]["at"] == "09:00"
    assert dumped["steps"][0]["on"] == "mon,wed"
    assert dumped["schedule"]["start"] == "2026-05-03T22:00:00Z"


def test_models_built_in_python() -> None:
    window = WindowSpec(days=frozenset({0, 4}), hours=(540, 1020))
    assert (window.start, window.end, window.timezone) == (540, 1020, "campaign")
    spec = CampaignSpec.model_validate(
        {
            "name": "py",
            "sender": "py@example.com",
            "timezone": "Europe/Berlin",
            "enrollment": "manual",
            "send_window": window,
            "schedule": None,
            "steps": [{"id": "s", "subject": "Hi", "text": "x", "at": time(9), "on": {0, 1}}],
        }
    )
    assert spec.trigger == "enrollment"
    assert spec.send_window == window
    step = spec.steps[0]
    assert isinstance(step, StepSpec)
    assert step.on == frozenset({0, 1})
    scheduled = CampaignSpec.model_validate(
        {
            "name": "py",
            "sender": "py@example.com",
            "timezone": "Europe/Berlin",
            "audience": ["a@example.com"],
            "schedule": ScheduleSpec(every=timedelta(hours=1)),
            "steps": [{"id": "s", "subject": "Hi", "text": "x"}],
        }
    )
    assert scheduled.schedule is not None
    assert scheduled.schedule.zone_name == "Europe/Berlin"  # inherited from the campaign
