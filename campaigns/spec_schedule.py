"""When a campaign sends: its trigger (`schedule:`), `send_window:`, and a step's `at`/`on`.

    timezone: Europe/Berlin               # the campaign's zone (IANA); default UTC
    schedule:                             # or start_at: 2026-05-04 09:00, or enrollment: ...
      cron: "0 9 * * mon"                 # 5 fields; or every: 6h
      start: 2026-05-04                   # optional; local time in the schedule's zone
      end: 2026-12-31 23:59:59            # optional, after start
      catch_up: latest                    # after downtime: latest | all | none
      max_catch_up_age: 6h                # optional; the scheduler's default otherwise
    send_window: {days: mon-fri, hours: "09:00-17:00", timezone: recipient}
    steps:
      - id: digest
        at: "09:00"                       # pin to a wall time, optionally on: [mon, thu]
        timezone: recipient               # or an IANA name; default the campaign's zone

Cron expressions are croniter's (Vixie: when both day fields are restricted either may match;
0 and 7 are Sunday), limited to five fields and to what every scheduler process computes alike
(no random R or hashed H values). The models here only check and normalise; what fires when is
the scheduler's business (scheduler.timing).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, time, timedelta
from typing import Annotated, Literal

from croniter import CroniterBadDateError, croniter
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    ValidationInfo,
    field_validator,
    model_validator,
)

from campaigns.durations import format_duration
from campaigns.errors import excerpt
from campaigns.spec_fields import Invalid, Problem, describe, located, parse_after
from campaigns.spec_time import (
    ALL_DAYS,
    CAMPAIGN_ZONE,
    MINUTES_PER_DAY,
    check_step_zone,
    check_window_zone,
    check_zone,
    format_clock,
    format_days,
    format_hours,
    parse_clock,
    parse_days,
    parse_hours,
    parse_instant,
)
from dispatch.wallclock import SendWindow

TriggerKind = Literal["launch", "start_at", "schedule", "enrollment"]

# --- cron ------------------------------------------------------------------------------------

MAX_CRON_CHARS = 200
CRON_HINT = "five fields: minute hour day-of-month month day-of-week, e.g. '0 9 * * mon-fri'"
_CRON_FIELDS = (
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or jan-dec"),
    ("day-of-week", "0-7 or sun-sat (0 and 7 are Sunday)"),
)
_CRON_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_CRON_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_CRON_NAMES = (*_CRON_MONTHS, "sun", "mon", "tue", "wed", "thu", "fri", "sat")
# Enough to see any valid expression fire: a 29 February is at most 8 years from another.
_YEARS_TO_FIRST_FIRE = 10


def _check_cron_field(text: str, index: int) -> None:
    name, allowed = _CRON_FIELDS[index]
    letters = text.lower()
    for word in _CRON_NAMES:
        letters = letters.replace(word, "")
    stray = {char for char in letters if char.isalpha()} - {"l", "w"}  # L(ast), W(eekday)
    if stray & {"r", "h"}:
        raise Invalid(
            f"{name} field {excerpt(text)}: random (R) and hashed (H) values are not supported",
            "every scheduler process must compute the same times; write the value itself",
        )
    probe = " ".join(text if position == index else "*" for position in range(5))
    if stray or not croniter.is_valid(probe):
        raise Invalid(f"invalid {name} field {excerpt(text)} in cron", f"allowed: {allowed}")


def _fires_at_all(expression: str) -> bool:
    try:
        croniter(
            expression, datetime(2001, 1, 1), max_years_between_matches=_YEARS_TO_FIRST_FIRE
        ).get_next(datetime)
    except CroniterBadDateError:
        return False
    return True


def check_cron(value: object) -> str:
    """A 5-field cron expression croniter accepts, with its fields separated by single spaces."""
    if not isinstance(value, str):
        raise Invalid(f"expected a cron expression in quotes, got {describe(value)}", CRON_HINT)
    if len(value) > MAX_CRON_CHARS:
        raise Invalid(f"cron expression {excerpt(value, 40)} is too long", CRON_HINT)
    if any(not (char.isascii() and (char.isprintable() or char == "\t")) for char in value):
        raise Invalid(f"cron expression {excerpt(value)} contains a character cron never uses")
    fields = value.split()
    if not fields:
        raise Invalid("cron expression is empty", CRON_HINT)
    if fields[0].startswith("@"):
        same = _CRON_ALIASES.get(fields[0].lower())
        hint = f"write {same!r}" if same and len(fields) == 1 else CRON_HINT
        raise Invalid(f"cron shorthand {excerpt(value)} is not supported", hint)
    if len(fields) != 5:
        hint = CRON_HINT
        if len(fields) == 6:
            hint = "Herald's cron has no seconds or years field; " + CRON_HINT
        raise Invalid(f"cron expression {excerpt(value)} has {len(fields)} fields, not 5", hint)
    for index, text in enumerate(fields):
        _check_cron_field(text, index)
    expression = " ".join(fields)
    try:
        valid = croniter.is_valid(expression)
        fires = valid and _fires_at_all(expression)
    except Exception:  # croniter parses user text: whatever it raises means "unusable"
        valid = fires = False
    if not valid:
        raise Invalid(f"invalid cron expression {excerpt(value)}", CRON_HINT)
    if not fires:
        raise Invalid(
            f"cron expression {excerpt(value)} never fires",
            "no date matches it (e.g. day 30 of February)",
        )
    return expression


CronExpression = Annotated[str, BeforeValidator(check_cron)]


# --- durations -------------------------------------------------------------------------------

EVERY_HINT = "e.g. every: 15m, 6h, 1d or 2w"
AGE_HINT = "e.g. max_catch_up_age: 6h"


def _duration(value: object, hint: str) -> timedelta:
    try:
        duration = parse_after(value)
    except Invalid as error:
        raise Invalid(str(error), hint) from None
    assert isinstance(duration, timedelta)
    return duration


def _parse_every(value: object) -> timedelta:
    period = _duration(value, EVERY_HINT)
    if period < timedelta(minutes=1):
        raise Invalid(f"every must be at least 1 minute, got {describe(value)}", EVERY_HINT)
    return period


def _parse_age(value: object) -> timedelta:
    age = _duration(value, AGE_HINT)
    if age <= timedelta(0):
        raise Invalid(
            "max_catch_up_age must be longer than 0",
            "to fire nothing that was missed, write catch_up: none",
        )
    return age


Period = Annotated[
    timedelta,
    BeforeValidator(_parse_every),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]
Age = Annotated[
    timedelta,
    BeforeValidator(_parse_age),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]

# --- the schedule ----------------------------------------------------------------------------

ZoneName = Annotated[str, BeforeValidator(check_zone)]


class ScheduleSpec(BaseModel):
    """A repeating trigger: each fire is one occurrence of the campaign.

    `cron` fires on local wall-clock matches in the schedule's zone; `every` on elapsed time
    (UTC) from `start`, or from the launch without one. `start`/`end` bound the fires; written
    without an offset they are local times in the schedule's zone, stored as aware UTC.
    `timezone` defaults to the campaign's (the campaign fills it in), else UTC.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    timezone: ZoneName | None = None  # first: start and end are read in it
    cron: CronExpression | None = None
    every: Period | None = None
    start: datetime | None = None
    end: datetime | None = None
    catch_up: Literal["latest", "all", "none"] = "latest"
    max_catch_up_age: Age | None = None

    @property
    def zone_name(self) -> str:
        return self.timezone or "UTC"

    @model_validator(mode="before")
    @classmethod
    def _is_a_mapping(cls, value: object) -> object:
        if isinstance(value, str):
            raise Invalid(
                f"expected a mapping, got {excerpt(value)}",
                f"write schedule: {{cron: {value!r}}} or schedule: {{every: 6h}}",
            )
        return value

    @field_validator("start", "end", mode="before")
    @classmethod
    def _instant(cls, value: object, info: ValidationInfo) -> object:
        if value is None:
            return None
        # Without a valid zone (already reported) the time is read as UTC: one error, not two.
        return parse_instant(value, info.data.get("timezone") or "UTC")

    @model_validator(mode="after")
    def _check_together(self) -> ScheduleSpec:
        problems: list[Problem] = []
        if self.cron is None and self.every is None:
            hint = f"{EVERY_HINT}, or cron: '0 9 * * mon'"
            problems.append(((), "a schedule needs cron or every", hint))
        if self.cron is not None and self.every is not None:
            problems.append(
                (("every",), "cron and every cannot be used together", "keep one of them")
            )
        if self.start is not None and self.end is not None and self.end <= self.start:
            problems.append(
                (
                    ("end",),
                    f"end ({self.end:%Y-%m-%d %H:%M:%S} UTC) is not after start"
                    f" ({self.start:%Y-%m-%d %H:%M:%S} UTC)",
                    None,
                )
            )
        if self.catch_up == "none" and self.max_catch_up_age is not None:
            problems.append(
                (
                    ("max_catch_up_age",),
                    "max_catch_up_age has no effect with catch_up: none",
                    "remove it, or choose catch_up: latest or all",
                )
            )
        if problems:
            raise located(problems)
        return self


# --- send windows ----------------------------------------------------------------------------

Weekdays = Annotated[
    frozenset[int],
    BeforeValidator(parse_days),
    PlainSerializer(format_days, return_type=str, when_used="json"),
]
Hours = Annotated[
    tuple[int, int],
    BeforeValidator(parse_hours),
    PlainSerializer(format_hours, return_type=str, when_used="json"),
]
WINDOW_HINT = 'e.g. send_window: {days: mon-fri, hours: "09:00-17:00"}'


class WindowSpec(BaseModel):
    """When messages may go out (YAML: {days: mon-fri, hours: "09:00-17:00", timezone: ...}).

    `timezone` is 'campaign' (the campaign's zone), 'recipient' (each recipient's `timezone`
    variable) or an IANA name; the scheduler resolves it per recipient and passes the name to
    window(). Left out, days are the whole week and hours the whole day, but not both.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    days: Weekdays = ALL_DAYS
    hours: Hours = (0, MINUTES_PER_DAY)
    timezone: Annotated[str, BeforeValidator(check_window_zone)] = CAMPAIGN_ZONE

    @property
    def start(self) -> int:
        """Minutes after local midnight the window opens."""
        return self.hours[0]

    @property
    def end(self) -> int:
        """Minutes after local midnight it closes (1440 = midnight; at or before start: the next
        day)."""
        return self.hours[1]

    @model_validator(mode="before")
    @classmethod
    def _says_when(cls, value: object) -> object:
        if isinstance(value, Mapping) and "days" not in value and "hours" not in value:
            raise Invalid("a send window needs days, hours or both", WINDOW_HINT)
        if isinstance(value, str):
            raise Invalid(f"expected a mapping, got {excerpt(value)}", WINDOW_HINT)
        return value

    def window(self, zone_name: str) -> SendWindow:
        """This window in the zone `zone_name` (an IANA name the caller has resolved)."""
        return SendWindow(self.days, self.start, self.end, zone_name)


# --- a step's wall-clock time ----------------------------------------------------------------

ClockTime = Annotated[
    time,
    BeforeValidator(parse_clock),
    PlainSerializer(format_clock, return_type=str, when_used="json"),
]
StepZone = Annotated[str, BeforeValidator(check_step_zone)]
AT_ZONE_HINT = (
    "set timezone: at the top of the campaign (e.g. timezone: Europe/Berlin), or on the step"
    " (an IANA name, or recipient for each recipient's own zone)"
)


def yaml_on_key(value: object) -> object:
    """YAML 1.1 reads an unquoted `on:` key as the yes/no value true; give the key its name."""
    if isinstance(value, Mapping) and True in value and "on" not in value:
        return {("on" if key is True else key): item for key, item in value.items()}
    return value


def check_step_timing(at: time | None, on: frozenset[int] | None, zone: str | None) -> None:
    """`on` and a step `timezone` only mean something with `at`; raise them all at once."""
    problems: list[Problem] = []
    if at is None and on is not None:
        problems.append(
            (("on",), "on needs at: the time of day to send on those days", 'e.g. at: "09:00"')
        )
    if at is None and zone is not None:
        problems.append(
            (
                ("timezone",),
                "a step's timezone needs at: it says in which zone at is read",
                'e.g. at: "09:00"',
            )
        )
    if problems:
        raise located(problems)
