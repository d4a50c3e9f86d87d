"""The campaign YAML file: its schema, and loading it with errors that point at lines.

A campaign file looks like this:

    name: welcome-series
    from: "Acme News <news@acme.example>"
    reply_to: help@acme.example           # optional
    audience: subscribers.csv             # or an inline list or a URL (spec_audience)
    max_attempts: 5                       # optional, 1..20
    list: newsletter                      # optional: what an unsubscribe leaves (default: name)
    transactional: false                  # optional: receipts etc. carry no unsubscribe link
    pause_on_errors: {ratio: 0.2, over: 100, min: 20}   # optional (the default); or off
    rate: 50/s                            # optional: at most this fast (also /m, /h)
    timezone: Europe/Berlin               # optional: the zone wall times are read in
    steps:
      - id: welcome
        subject: "Welcome, {{ name }}"
        template: welcome.html            # and/or text: / html: inline
      - id: reminder
        after: 3d                         # after the previous step
        at: "09:00"                       # optional: pinned to a wall time (spec_schedule)
        subject: "Still there?"
        text: "..."

Without a trigger key the campaign is sent once, when launched; `start_at:` sends it once at a
given time, `schedule:` repeatedly, `enrollment:` as a drip per recipient (spec_schedule, which
also has `send_window:`). Steps may be email or webhook (spec_steps, spec_http).

The parts live in their own modules and are re-exported here: spec_audience (audience forms),
spec_steps and spec_http (steps), spec_schedule and spec_time (triggers and wall-clock values),
spec_fields (shared field checks), spec_errors (pydantic errors in plain English), spec_files
(the files a campaign names, and its hash). Problems with the file are all collected and raised
together as one SpecError; see errors.SpecError.problems.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticKnownError

from campaigns.errors import CampaignError, SpecError, excerpt
from campaigns.names import CAMPAIGN_NAME_PATTERN
from campaigns.spec_audience import AudienceSource as AudienceSource  # re-exported
from campaigns.spec_audience import CsvAudience as CsvAudience
from campaigns.spec_audience import InlineAudience as InlineAudience
from campaigns.spec_audience import InlineRecipient as InlineRecipient
from campaigns.spec_errors import problems_from
from campaigns.spec_fields import Invalid, MailboxField, Problem, describe, located
from campaigns.spec_files import audience_digest, shown_path, template_digests
from campaigns.spec_files import campaign_hash as campaign_hash  # re-exported
from campaigns.spec_http import UrlAudience as UrlAudience
from campaigns.spec_http import WebhookStepSpec as WebhookStepSpec
from campaigns.spec_pause import DEFAULT_PAUSE_ON_ERRORS, PauseOnErrors, pause_setting
from campaigns.spec_rate import RateField
from campaigns.spec_schedule import AT_ZONE_HINT, TriggerKind, ZoneName
from campaigns.spec_schedule import ScheduleSpec as ScheduleSpec
from campaigns.spec_schedule import WindowSpec as WindowSpec
from campaigns.spec_steps import Step as Step
from campaigns.spec_steps import StepSpec as StepSpec
from campaigns.spec_time import check_zone, parse_instant
from campaigns.yaml_loader import YamlLines, load_yaml, parse_path
from templates.files import resolve_inside

# Campaign files are hand-written; anything bigger is a mistake or an audience that belongs in
# a CSV file, and YAML parsing would need many times this much memory.
MAX_SPEC_BYTES = 16 * 1024 * 1024

TRIGGER_HINT = (
    "a campaign has one trigger: start_at (once, at a time), schedule (repeatedly) or"
    " enrollment (a drip for each recipient)"
)


# --- the campaign ----------------------------------------------------------------------------


def _valid_zone(name: object) -> bool:
    try:
        check_zone(name)
    except Invalid:
        return False
    return True


class CampaignSpec(BaseModel):
    """A whole campaign file. YAML key `from` is the field `sender` (a Python keyword).

    Fields are validated in the order written here, and later ones read earlier ones: the zone
    before the times read in it, `enrollment` before the `audience` it makes optional.
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_by_name=True, validate_by_alias=True
    )

    name: str
    sender: MailboxField = Field(alias="from")
    reply_to: MailboxField | None = None
    timezone: ZoneName | None = None
    enrollment: Literal["audience", "manual"] | None = None
    # Required unless enrollment is manual: the validator reports it missing.
    audience: AudienceSource | None = Field(default=None, validate_default=True)
    start_at: datetime | None = None
    schedule: ScheduleSpec | None = None
    send_window: WindowSpec | None = None
    steps: list[Step] = Field(min_length=1)
    max_attempts: Annotated[int, Strict(), Field(ge=1, le=20)] = 5
    # The mailing list an unsubscribe from this campaign leaves (default: the campaign's name):
    # suppression scope ``list:<list>``. Transactional mail (receipts, password resets) carries
    # no unsubscribe link and obeys only global suppression (bounces, complaints, manual).
    list_name: str | None = Field(default=None, alias="list")
    transactional: Annotated[bool, Strict()] = False
    # When the campaign pauses itself because its sends keep failing (None: never; spec_pause).
    pause_on_errors: Annotated[PauseOnErrors | None, BeforeValidator(pause_setting)] = (
        DEFAULT_PAUSE_ON_ERRORS
    )
    # How fast this campaign's messages may go out, all workers together (spec_rate).
    rate: RateField | None = None

    @property
    def suppression_scope(self) -> str:
        """The scope an unsubscribe from this campaign suppresses, and T4 checks."""
        return f"list:{self.list_name or self.name}"

    @property
    def zone_name(self) -> str:
        """The campaign's zone: `timezone`, else UTC."""
        return self.timezone or "UTC"

    @property
    def trigger(self) -> TriggerKind:
        """What makes the campaign send (keys are mutually exclusive; none: at launch)."""
        if self.schedule is not None:
            return "schedule"
        if self.start_at is not None:
            return "start_at"
        if self.enrollment is not None:
            return "enrollment"
        return "launch"

    def step_zone(self, step: StepSpec | WebhookStepSpec) -> str:
        """The zone a step's `at` is read in: its own (an IANA name or 'recipient'), else the
        campaign's."""
        return step.timezone or self.zone_name

    @model_validator(mode="before")
    @classmethod
    def _schedule_inherits_zone(cls, data: object) -> object:
        """A schedule without its own `timezone` runs in the campaign's (when that one is valid:
        an invalid one is reported once, on its own line)."""
        if not isinstance(data, Mapping) or not _valid_zone(data.get("timezone")):
            return data
        schedule, zone_name = data.get("schedule"), data["timezone"]
        if isinstance(schedule, Mapping) and schedule.get("timezone") is None:
            return {**data, "schedule": {**schedule, "timezone": zone_name}}
        if isinstance(schedule, ScheduleSpec) and schedule.timezone is None:
            return {**data, "schedule": schedule.model_copy(update={"timezone": zone_name})}
        return data

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not CAMPAIGN_NAME_PATTERN.fullmatch(value):
            raise Invalid(
                f"invalid campaign name {excerpt(value)}",
                "use lower-case letters, digits, '.', '-' and '_', starting with a letter or"
                " digit, at most 128 characters",
            )
        return value

    @field_validator("list_name")
    @classmethod
    def _check_list(cls, value: str | None) -> str | None:
        if value is not None and not CAMPAIGN_NAME_PATTERN.fullmatch(value):
            raise Invalid(
                f"invalid list name {excerpt(value)}",
                "use lower-case letters, digits, '.', '-' and '_', starting with a letter or"
                " digit, at most 128 characters",
            )
        return value

    @field_validator("audience")
    @classmethod
    def _audience_unless_manual(cls, value: object, info: ValidationInfo) -> object:
        if value is None and info.data.get("enrollment") != "manual":
            raise PydanticKnownError("missing")
        return value

    @field_validator("start_at", mode="before")
    @classmethod
    def _start_at_instant(cls, value: object, info: ValidationInfo) -> object:
        # Without a valid zone (already reported) the time is read as UTC: one error, not two.
        return None if value is None else parse_instant(value, info.data.get("timezone") or "UTC")

    @field_validator("start_at", "schedule")
    @classmethod
    def _one_trigger(cls, value: object, info: ValidationInfo) -> object:
        earlier = ("enrollment", "start_at")
        others = [key for key in earlier if key != info.field_name and info.data.get(key)]
        if value is not None and others:
            raise Invalid(
                f"{' and '.join(others)} and {info.field_name} cannot be used together",
                TRIGGER_HINT,
            )
        return value

    @field_validator("steps")
    @classmethod
    def _check_steps(cls, steps: list[Step], info: ValidationInfo) -> list[Step]:
        problems: list[Problem] = []
        first_index: dict[str, int] = {}
        for index, step in enumerate(steps):
            if step.id in first_index:
                problems.append(
                    (
                        (index, "id"),
                        f"duplicate step id {step.id!r}, already used by"
                        f" steps[{first_index[step.id]}]",
                        "step ids must be unique within a campaign",
                    )
                )
            first_index.setdefault(step.id, index)
        # Present and None: no campaign zone at all (an invalid one is reported on its own).
        if "timezone" in info.data and info.data["timezone"] is None:
            problems += [
                ((index, "at"), "at without a time zone", AT_ZONE_HINT)
                for index, step in enumerate(steps)
                if step.at is not None and step.timezone is None
            ]
        if problems:
            raise located(problems)
        return steps


# --- loading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedCampaign:
    """A validated campaign file, with what is needed to resolve files and report lines."""

    spec: CampaignSpec
    path: Path  # resolved path of the YAML file
    base_dir: Path  # its folder: templates and CSV files resolve here
    source: bytes  # the exact file bytes
    spec_hash: str  # see campaign_hash()
    lines: YamlLines = field(default_factory=YamlLines, repr=False, compare=False)
    file: str = ""  # the YAML file as the operator named it: errors say this, not `path`

    def line_of(self, field_path: str) -> int | None:
        """The YAML line of e.g. 'steps[1].after' ('from' or 'sender'); None if not in the file.

        Raises ValueError for a malformed path.
        """
        path = parse_path(field_path)
        if path[:1] == ("sender",):
            path = ("from", *path[1:])
        return self.lines.line_of(path)

    def resolve(self, relative: str) -> Path:
        """A path written in the YAML, resolved inside the YAML's folder (the shared resolver;
        raises templates.files.FileRefused)."""
        return resolve_inside(self.base_dir, relative)

    def shown(self, relative: str) -> str:
        """A path written in the YAML, as an operator finds it (for error messages)."""
        return shown_path(self.file, relative)

    def template_path(self, step: StepSpec) -> Path | None:
        return None if step.template is None else self.resolve(step.template)


def _read_source(path: Path, file: str) -> bytes:
    try:
        with path.open("rb") as stream:
            source = stream.read(MAX_SPEC_BYTES + 1)
    except OSError as error:
        reason = error.strerror or str(error)
        raise SpecError(f"cannot read campaign file: {reason}", file=file) from None
    if len(source) > MAX_SPEC_BYTES:
        raise SpecError(
            f"campaign file is larger than {MAX_SPEC_BYTES // (1024 * 1024)} MiB",
            file=file,
            hint="put large audiences in a CSV file",
        )
    return source


def _decode(source: bytes, file: str) -> str:
    try:
        return source.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = source.count(b"\n", 0, error.start) + 1
        raise SpecError("the file is not valid UTF-8", file=file, line=line) from None


def _top_level_mapping(data: object, file: str) -> dict[Any, Any]:
    if isinstance(data, dict):
        return data
    found = "the file is empty" if data is None else f"found {describe(data)}"
    raise SpecError(
        f"the top level must be a mapping of keys; {found}",
        file=file,
        line=1,
        hint="start with keys such as name:, from:, audience:, steps:",
    )


def _sort_key(problem: CampaignError) -> tuple[int, int]:
    return (0, problem.line) if problem.line is not None else (1, 0)


def load_campaign(path: Path) -> LoadedCampaign:
    """Read, parse and validate a campaign file.

    Raises SpecError for every problem with the file (all validation problems at once, see
    SpecError.problems), including a template file it names that cannot be read; AudienceError
    when the CSV file it names cannot be read (needed here because the CSV is part of the hash;
    not for a schedule or enrollment, whose CSV is read for each occurrence instead).
    """
    file = str(path)
    source = _read_source(path, file)
    document = load_yaml(_decode(source, file), file=file)
    data = dict(_top_level_mapping(document.data, file))
    problems: list[CampaignError] = []
    if "sender" in data:
        # Accepted by name from Python code only: the YAML spelling is `from`.
        del data["sender"]
        problems.append(
            SpecError(
                "unknown key 'sender'",
                file=file,
                line=document.lines.line_of(("sender",)),
                hint="did you mean 'from'?",
            )
        )
    spec: CampaignSpec | None = None
    try:
        spec = CampaignSpec.model_validate(data)
    except ValidationError as error:
        problems += problems_from(error, CampaignSpec, document.lines, file)
    if problems or spec is None:
        raise SpecError.from_problems(sorted(problems, key=_sort_key), file=file)
    resolved = path.resolve()
    base_dir = resolved.parent
    named = [
        (index, step.template)
        for index, step in enumerate(spec.steps)
        if isinstance(step, StepSpec) and step.template is not None
    ]
    templates = template_digests(named, base_dir, document.lines, file)
    # An inline audience is part of the YAML bytes already. A recurring or enrolling campaign
    # reads its CSV afresh for each occurrence or pass: the list is data, not part of what was
    # launched, so editing it must not make the scheduler stop the campaign as changed.
    audience: list[tuple[str, str]] = []
    if isinstance(spec.audience, CsvAudience) and spec.trigger in ("launch", "start_at"):
        audience = [audience_digest(spec.audience.csv, base_dir, document.lines, file)]
    return LoadedCampaign(
        spec=spec,
        path=resolved,
        base_dir=base_dir,
        source=source,
        spec_hash=campaign_hash(source, templates, audience),
        lines=document.lines,
        file=file,
    )
