"""Campaign keys that make Herald speak HTTP: webhook steps and URL audiences.

Both are checked here only as far as the file itself goes (URL syntax, header syntax, the JSON
shape of a body); the operator's egress policy applies where the request is made: at validate
and send time for webhooks, at fetch time for audiences.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, field_validator, model_validator

from campaigns.errors import excerpt
from campaigns.spec_fields import (
    Delay,
    Invalid,
    check_headers_field,
    check_step_id,
    check_url_field,
    describe,
    quote_hint,
)
from campaigns.spec_schedule import ClockTime, StepZone, Weekdays, check_step_timing, yaml_on_key
from dispatch.webhook import METHODS as WEBHOOK_METHODS


def _check_json_value(value: object, path: str) -> None:
    if isinstance(value, (str, bool, int)) or value is None:
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Invalid(f"{path}: {value} is not a JSON number", "put it in quotes")
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            _check_json_value(item, f"{path}[{index}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise Invalid(f"{path}: keys must be text, got {describe(key)}", "quote the key")
            _check_json_value(item, f"{path}.{key}")
        return
    raise Invalid(f"{path}: {describe(value)} has no JSON form", quote_hint(value))


def _check_json_body(value: object) -> object:
    if not isinstance(value, (dict, list)):
        raise Invalid(
            f"body must be a mapping or a list, got {describe(value)}",
            "write the JSON body as YAML; text in it is a template, e.g. {email: '{{ email }}'}",
        )
    _check_json_value(value, "body")
    return value


class WebhookStepSpec(BaseModel):
    """One HTTP request per recipient: a JSON body whose text leaves are templates.

    `headers` may reference environment variables (`${NAME}`), resolved by the worker at send
    time and never stored resolved. `in_doubt: resend` lets a request whose outcome is unknown
    be sent again automatically, which is safe only because the receiver deduplicates on the
    Idempotency-Key header every request carries.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    channel: Literal["webhook"]
    url: str
    method: str = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    body: Any
    after: Delay = timedelta(0)
    at: ClockTime | None = None  # see spec_schedule
    on: Weekdays | None = None
    timezone: StepZone | None = None
    in_doubt: Literal["hold", "resend"] = "hold"

    @model_validator(mode="before")
    @classmethod
    def _yaml_on_key(cls, value: object) -> object:
        return yaml_on_key(value)

    @model_validator(mode="after")
    def _check_timing(self) -> WebhookStepSpec:
        check_step_timing(self.at, self.on, self.timezone)
        return self

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str) -> str:
        return check_step_id(value)

    @field_validator("url")
    @classmethod
    def check_url_field(cls, value: str) -> str:
        return check_url_field(value)

    @field_validator("method")
    @classmethod
    def _check_method(cls, value: str) -> str:
        if value.upper() not in WEBHOOK_METHODS:
            raise Invalid(
                f"method must be {', '.join(WEBHOOK_METHODS[:-1])} or {WEBHOOK_METHODS[-1]},"
                f" got {excerpt(value)}"
            )
        return value.upper()

    @field_validator("headers")
    @classmethod
    def check_headers_field(cls, value: dict[str, str]) -> dict[str, str]:
        return check_headers_field(value)

    @field_validator("body")
    @classmethod
    def _check_body(cls, value: object) -> object:
        return _check_json_body(value)


class UrlAudience(BaseModel):
    """Recipients fetched over HTTP(S) through the egress guard (YAML form: {url: ..., ...}).

    `format` is csv, json (a top-level array of objects) or ndjson (one object per line); when
    left out it is inferred from the URL's extension, then from the response's Content-Type.
    `headers` may reference exposed environment variables (`${HERALD_SECRET_CRM_TOKEN}`),
    resolved at fetch time.
    With `strict` (the default) a single invalid row stops the launch; without it the valid rows
    are launched and the invalid ones recorded. The fetched list is snapshotted with the
    occurrence, so the campaign's hash covers the YAML, not the remote content.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    format: Literal["csv", "json", "ndjson"] | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    strict: Annotated[bool, Strict()] = True

    @field_validator("url")
    @classmethod
    def check_url_field(cls, value: str) -> str:
        return check_url_field(value)

    @field_validator("headers")
    @classmethod
    def check_headers_field(cls, value: dict[str, str]) -> dict[str, str]:
        return check_headers_field(value)
