"""A campaign's `steps:`: email steps here, webhook steps in spec_http, one list of both.

Steps are discriminated on `channel`: `email` (the default) or `webhook`. Each is sent `after`
the previous one, optionally pinned to a wall time with `at`/`on`/`timezone` (spec_schedule).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Tag, field_validator, model_validator

from campaigns.spec_fields import (
    Delay,
    Invalid,
    check_relative_file,
    check_step_id,
    describe,
    reject_line_breaks,
)
from campaigns.spec_http import WebhookStepSpec
from campaigns.spec_schedule import (
    ClockTime,
    StepZone,
    Weekdays,
    check_step_timing,
    yaml_on_key,
)


class StepSpec(BaseModel):
    """One email of the campaign's sequence.

    Due `after` the previous step (the first: after the occurrence or the enrollment), then, with
    `at`, moved to the first `at` wall time (on an `on` weekday) not before that, read in
    `timezone` or else the campaign's zone. How the scheduler anchors `after` (a broadcast: the
    previous step's planned time; a drip: its actual send) is docs/design.md's.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    subject: str
    template: str | None = None  # file relative to the YAML's folder
    text: str | None = None
    html: str | None = None
    after: Delay = timedelta(0)
    at: ClockTime | None = None  # see spec_schedule
    on: Weekdays | None = None
    timezone: StepZone | None = None
    channel: Literal["email"] = "email"
    # Only 'hold' for email: an SMTP server cannot deduplicate a resend (docs/design.md §5).
    in_doubt: str = "hold"

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str) -> str:
        return check_step_id(value)

    @field_validator("in_doubt")
    @classmethod
    def _email_never_resends(cls, value: str) -> str:
        if value == "resend":
            raise Invalid(
                "in_doubt: resend is not allowed for email: email is never resent automatically",
                "an SMTP server cannot recognise a resend, so the recipient could get it twice;"
                " resolve in-doubt email with `herald in-doubt resolve`",
            )
        if value != "hold":
            raise Invalid(f"must be 'hold', got {describe(value)}")
        return value

    @field_validator("subject")
    @classmethod
    def _check_subject(cls, value: str) -> str:
        reject_line_breaks(
            value, "subject", "write the subject on one line; a YAML | or > block adds a line break"
        )
        if "\x00" in value:
            raise Invalid("NUL character in subject")
        if not value.strip():
            raise Invalid("subject is empty")
        return value

    @field_validator("template")
    @classmethod
    def _check_template(cls, value: str | None) -> str | None:
        return None if value is None else check_relative_file(value, "template path")

    @model_validator(mode="before")
    @classmethod
    def _yaml_on_key(cls, value: object) -> object:
        return yaml_on_key(value)

    @model_validator(mode="after")
    def _check_has_body(self) -> StepSpec:
        if self.template is None and self.text is None and self.html is None:
            raise Invalid("step has no body", "set template, text or html")
        check_step_timing(self.at, self.on, self.timezone)
        return self


def _step_kind(value: object) -> str | None:
    if isinstance(value, (StepSpec, WebhookStepSpec)):
        return value.channel
    if isinstance(value, Mapping):
        channel = value.get("channel", "email")
        return channel if channel in STEP_TAGS else None
    return None


STEP_TAGS = ("email", "webhook")
Step = Annotated[
    Annotated[StepSpec, Tag("email")] | Annotated[WebhookStepSpec, Tag("webhook")],
    Discriminator(
        _step_kind,
        custom_error_type="step_channel",
        custom_error_message="unknown step channel",
    ),
]
