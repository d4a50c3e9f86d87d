"""Building blocks of the campaign schema, shared by its models.

``Invalid`` is the validation failure the models raise (its hint reaches the operator); the
``describe``/``quote_hint`` helpers say in plain English what YAML made of a value; the rest are
field checks used by more than one model: mailboxes (from, reply_to), delays, step ids, URLs
and HTTP request headers. ``located`` reports problems below the value being validated at their
own paths (and so at their own YAML lines).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from datetime import date, timedelta
from pathlib import PurePath
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer, PlainValidator
from pydantic_core import PydanticCustomError

from campaigns.addresses import AddressError, Mailbox, make_mailbox, split_display_name
from campaigns.durations import DURATION_HINT, format_duration, parse_duration
from campaigns.errors import excerpt
from dispatch.egress import EgressDenied, check_url_syntax
from dispatch.request_headers import HeaderError, check_headers

STEP_ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_LINE_BREAKS = ("\r", "\n")


class Invalid(ValueError):
    """A validation failure with an optional hint; error translation picks the hint up."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


# (path below the value that failed, message, hint)
Problem = tuple[tuple[str | int, ...], str, str | None]
LOCATED = "located"


def located(problems: Sequence[Problem]) -> PydanticCustomError:
    """An error for several problems at paths below the value being validated (a model, a list),
    so each is reported at its own key and line rather than at the value's."""
    summary = "; ".join(message for _, message, _ in problems)
    return PydanticCustomError(
        LOCATED, "{summary}", {"summary": summary, "problems": tuple(problems)}
    )


def closest_key_hint(key: object, valid_keys: list[str]) -> str:
    """'did you mean ...?' when a valid key is close, else the list of valid keys."""
    matches = difflib.get_close_matches(str(key), valid_keys, n=1, cutoff=0.6)
    if matches:
        return f"did you mean {matches[0]!r}?"
    return "valid keys: " + ", ".join(valid_keys)


def reject_line_breaks(value: str, what: str, hint: str | None = None) -> None:
    if any(char in value for char in _LINE_BREAKS):
        raise Invalid(f"header injection: line break in {what}", hint)


FOLDER_HINT = "a campaign may only read files inside its own folder"


def check_relative_file(value: str, what: str) -> str:
    """What can be seen without the file system; templates.files decides the rest (symlinks)."""
    if not value.strip():
        raise Invalid(f"{what} is empty")
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        raise Invalid(f"{what} contains a control character")
    path = PurePath(value)
    if path.is_absolute() or value.startswith("~"):
        raise Invalid(f"{what} {excerpt(value)} is absolute", FOLDER_HINT)
    if ".." in path.parts:
        raise Invalid(f"{what} {excerpt(value)} leaves the campaign folder ('..')", FOLDER_HINT)
    return value


def describe(value: object) -> str:
    if value is None:
        return "an empty value"
    if isinstance(value, bool):
        return f"the yes/no value {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, date):
        return f"the date {value.isoformat()}"
    if isinstance(value, str):
        return excerpt(value)
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return type(value).__name__


def quote_hint(value: object) -> str | None:
    if isinstance(value, bool):
        return "YAML reads yes/no/on/off/true/false as yes/no values; put text in quotes"
    if isinstance(value, (int, float, date)):
        return "put the value in quotes"
    return None


# "1w2d3h4m5s" is ten characters; this is generous and keeps error messages short.
_MAX_DURATION_CHARS = 40


def parse_after(value: object) -> object:
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise Invalid("negative delays are not allowed", DURATION_HINT)
        return value
    if isinstance(value, str) and len(value) > _MAX_DURATION_CHARS:
        raise Invalid(f"invalid duration {excerpt(value, 40)}: too long", DURATION_HINT)
    if isinstance(value, (str, int)):
        try:
            return parse_duration(value)
        except ValueError as error:
            raise Invalid(str(error), DURATION_HINT) from None
    raise Invalid(f"expected a duration, got {describe(value)}", DURATION_HINT)


Delay = Annotated[
    timedelta,
    BeforeValidator(parse_after),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]


def check_step_id(value: str) -> str:
    if not STEP_ID_PATTERN.fullmatch(value):
        raise Invalid(
            f"invalid step id {excerpt(value)}",
            "use lower-case letters, digits, '-' and '_', starting with a letter or digit,"
            " at most 64 characters",
        )
    return value


ENV_REFERENCE_HINT = (
    "header values may name environment variables as ${NAME} (HERALD_SECRET_* or listed in"
    " HERALD_SECRET_VARS); $$ is a literal $"
)


def check_url_field(value: str) -> str:
    """The checks that hold whatever the operator's egress policy (that one applies at use)."""
    try:
        check_url_syntax(value)
    except EgressDenied as error:
        hint = None
        if error.rule == "userinfo not allowed":
            hint = 'put credentials in headers, e.g. Authorization: "Bearer ${HERALD_SECRET_TOKEN}"'
        elif error.rule.startswith("scheme not allowed"):
            hint = "use an https:// URL"
        raise Invalid(f"invalid url {excerpt(value, 200)}: {error.rule}", hint) from None
    return value


def check_headers_field(value: dict[str, str]) -> dict[str, str]:
    try:
        check_headers(value)
    except HeaderError as error:
        raise Invalid(str(error), ENV_REFERENCE_HINT) from None
    return value


# --- from / reply_to -------------------------------------------------------------------------

_MAILBOX_KEYS = ["address", "name"]


def _coerce_mailbox(value: object) -> Mailbox:
    """Accept 'Name <a@b.c>', 'a@b.c' or {address, name}; return a validated Mailbox."""
    if isinstance(value, Mailbox):
        return make_mailbox(value.address, value.name)
    if isinstance(value, str):
        try:
            name, address = split_display_name(value)
            return make_mailbox(address, name)
        except AddressError as error:
            raise Invalid(f"invalid address {excerpt(value)}: {error}") from None
    if isinstance(value, Mapping):
        for key in value:
            if key not in _MAILBOX_KEYS:
                raise Invalid(f"unknown key {excerpt(key)}", closest_key_hint(key, _MAILBOX_KEYS))
        raw_address, display_name = value.get("address"), value.get("name")
        if not isinstance(raw_address, str):
            raise Invalid("needs an 'address' (text)")
        if display_name is not None and not isinstance(display_name, str):
            raise Invalid("'name' must be text", "put it in quotes")
        try:
            return make_mailbox(raw_address, display_name)
        except AddressError as error:
            raise Invalid(f"invalid address {excerpt(raw_address)}: {error}") from None
    raise Invalid(
        "expected an address",
        "e.g. 'Acme News <news@acme.example>' or {address: ..., name: ...}",
    )


def _mailbox_as_mapping(mailbox: Mailbox) -> dict[str, str | None]:
    return {"address": mailbox.address, "name": mailbox.name}


MailboxField = Annotated[
    Mailbox, PlainValidator(_coerce_mailbox), PlainSerializer(_mailbox_as_mapping)
]
