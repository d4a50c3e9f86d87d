"""The campaign YAML file: its schema, and loading it with errors that point at lines.

A campaign file looks like this:

    name: welcome-series
    from: "Acme News <news@acme.example>"
    reply_to: help@acme.example           # optional
    audience: subscribers.csv             # or an inline list, see below
    max_attempts: 5                       # optional, 1..20
    steps:
      - id: welcome
        subject: "Welcome, {{ name }}"
        template: welcome.html            # and/or text: / html: inline
      - id: reminder
        after: 3d
        subject: "Still there?"
        text: "..."

An inline audience is a list whose items are an address ('a@b.c', 'Ann <a@b.c>') or a mapping
with `email` plus any other keys, which become template variables. A string audience is a CSV
file, relative to the YAML's folder; `{csv: path}` means the same. A URL audience is fetched
through the egress guard and snapshotted with each occurrence (see UrlAudience):

    audience:
      url: https://crm.example.com/export.csv
      format: csv                         # or json, ndjson; default: from extension/type
      # resolved at fetch time, never stored; only HERALD_SECRET_* or HERALD_SECRET_VARS names
      headers: {Authorization: "Bearer ${HERALD_SECRET_CRM_TOKEN}"}
      strict: true                        # default: any invalid row stops the launch

Steps are discriminated on `channel`: `email` (the default) or `webhook`:

      - id: notify-crm
        channel: webhook
        url: https://hooks.example.com/in
        method: POST                      # or PUT, PATCH
        headers: {Authorization: "Bearer ${HERALD_SECRET_HOOK_TOKEN}"}  # resolved at send time
        body: {email: "{{ email }}", plan: "{{ plan }}"}  # text leaves are templates
        in_doubt: resend                  # default hold; email steps only allow hold

Problems with the file are all collected and raised together as one SpecError; see
errors.SpecError.problems.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PlainSerializer,
    PlainValidator,
    Strict,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from campaigns.addresses import (
    AddressError,
    Mailbox,
    make_mailbox,
    normalise_address,
    split_display_name,
)
from campaigns.errors import CampaignError, SpecError, excerpt
from campaigns.spec_fields import (
    Delay,
    Invalid,
    check_relative_file,
    check_step_id,
    closest_key_hint,
    describe,
    quote_hint,
    reject_line_breaks,
)
from campaigns.spec_files import audience_digest, shown_path, template_digests
from campaigns.spec_files import campaign_hash as campaign_hash  # re-exported
from campaigns.spec_http import UrlAudience as UrlAudience  # re-exported: part of the schema
from campaigns.spec_http import WebhookStepSpec as WebhookStepSpec
from campaigns.yaml_loader import YamlLines, YamlPath, format_path, load_yaml, parse_path
from templates.files import resolve_inside

# Campaign files are hand-written; anything bigger is a mistake or an audience that belongs in
# a CSV file, and YAML parsing would need many times this much memory.
MAX_SPEC_BYTES = 16 * 1024 * 1024

CAMPAIGN_NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_.-]{0,127}")


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


# --- steps -----------------------------------------------------------------------------------


class StepSpec(BaseModel):
    """One email of the campaign's sequence, sent `after` the previous one's schedule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    subject: str
    template: str | None = None  # file relative to the YAML's folder
    text: str | None = None
    html: str | None = None
    after: Delay = timedelta(0)
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

    @model_validator(mode="after")
    def _check_has_body(self) -> StepSpec:
        if self.template is None and self.text is None and self.html is None:
            raise Invalid("step has no body", "set template, text or html")
        return self


def _step_kind(value: object) -> str | None:
    if isinstance(value, (StepSpec, WebhookStepSpec)):
        return value.channel
    if isinstance(value, Mapping):
        channel = value.get("channel", "email")
        return channel if channel in _STEP_TAGS else None
    return None


_STEP_TAGS = ("email", "webhook")
Step = Annotated[
    Annotated[StepSpec, Tag("email")] | Annotated[WebhookStepSpec, Tag("webhook")],
    Discriminator(
        _step_kind,
        custom_error_type="step_channel",
        custom_error_message="unknown step channel",
    ),
]


# --- audience --------------------------------------------------------------------------------


def _variable_text(key: str, value: object) -> str:
    """Template variables are text; YAML scalars are written back the way YAML spells them."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if value is None:
        return ""
    if isinstance(value, date):
        return value.isoformat()
    raise Invalid(f"variable {excerpt(key)} must be a plain value, not {describe(value)}")


def _only_key(mapping: Mapping[str, object], wanted: str) -> str | None:
    """The key of `mapping` equal to `wanted` ignoring case (as for CSV headers)."""
    keys = [key for key in mapping if key.lower() == wanted]
    if len(keys) > 1:
        raise Invalid(f"{' and '.join(map(excerpt, keys))} both mean {wanted!r}")
    return keys[0] if keys else None


def _recipient_from_mapping(entry: Mapping[object, object]) -> dict[str, object]:
    if any(not isinstance(key, str) for key in entry):
        bad = next(key for key in entry if not isinstance(key, str))
        raise Invalid(f"keys must be text, got {describe(bad)}")
    entry_by_name: dict[str, object] = {str(key): value for key, value in entry.items()}
    email_key = _only_key(entry_by_name, "email")
    if email_key is None:
        raise Invalid("recipient has no 'email'", "e.g. {email: ann@example.com, name: Ann}")
    name_key = _only_key(entry_by_name, "name")
    variables: dict[str, str] = {}
    for key, value in entry_by_name.items():
        canonical = "email" if key == email_key else "name" if key == name_key else key
        variables[canonical] = _variable_text(key, value)
    return {
        "email": entry_by_name[email_key],
        "name": entry_by_name[name_key] if name_key is not None else None,
        "variables": variables,
    }


class InlineRecipient(BaseModel):
    """One recipient written in the YAML itself.

    YAML form: 'a@b.c', 'Ann <a@b.c>', or {email: ..., name: ..., any_variable: ...}.
    `variables` holds every key of the entry as text, the address as written under 'email'.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    email: str  # normalised
    name: str | None = None
    variables: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _from_yaml(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                name, address = split_display_name(value)
            except AddressError as error:
                raise Invalid(f"invalid address {excerpt(value)}: {error}") from None
            variables = {"email": address} | ({"name": name} if name is not None else {})
            return {"email": address, "name": name, "variables": variables}
        # The model's own form (from Python or a dump) has a mapping under 'variables', which
        # the YAML form cannot have: its values are plain text, numbers or dates.
        if isinstance(value, Mapping):
            if isinstance(value.get("variables"), Mapping):
                return value
            return _recipient_from_mapping(value)
        if isinstance(value, InlineRecipient):
            return value
        raise Invalid(
            f"expected an address or a mapping with 'email', got {describe(value)}",
            "e.g. ann@example.com or {email: ann@example.com, name: Ann}",
        )

    @field_validator("email")
    @classmethod
    def _normalise_email(cls, value: str) -> str:
        try:
            return normalise_address(value)
        except AddressError as error:
            raise Invalid(f"invalid address {excerpt(value)}: {error}") from None

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str | None) -> str | None:
        if value is None:
            return None
        reject_line_breaks(value, "name")
        return value.strip() or None


class InlineAudience(BaseModel):
    """Recipients listed in the YAML file (YAML form: a list)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    entries: tuple[InlineRecipient, ...] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _from_list(cls, value: object) -> object:
        return {"entries": value} if isinstance(value, (list, tuple)) else value


class CsvAudience(BaseModel):
    """Recipients in a CSV file (YAML form: the path, or {csv: path}), relative to the YAML."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    csv: str

    @model_validator(mode="before")
    @classmethod
    def _from_path(cls, value: object) -> object:
        return {"csv": value} if isinstance(value, str) else value

    @field_validator("csv")
    @classmethod
    def _check_csv(cls, value: str) -> str:
        return check_relative_file(value, "CSV path")

    def resolve(self, base_dir: Path) -> Path:
        """The real path of the CSV file; raises templates.files.FileRefused (see there)."""
        return resolve_inside(base_dir, self.csv)


def _audience_kind(value: object) -> str | None:
    if isinstance(value, (InlineAudience, list, tuple)):
        return "inline"
    if isinstance(value, (CsvAudience, str)):
        return "csv"
    if isinstance(value, UrlAudience):
        return "url"
    if isinstance(value, Mapping):
        if "csv" in value:
            return "csv"
        if "url" in value:
            return "url"
        if "entries" in value:
            return "inline"
    return None


_AUDIENCE_TAGS = ("inline", "csv", "url")
AudienceSource = Annotated[
    Annotated[InlineAudience, Tag("inline")]
    | Annotated[CsvAudience, Tag("csv")]
    | Annotated[UrlAudience, Tag("url")],
    Discriminator(
        _audience_kind,
        custom_error_type="audience_form",
        custom_error_message=(
            "expected a list of recipients, a CSV file path, or a mapping such as {csv: path}"
            " or {url: https://...}"
        ),
    ),
]


# --- the campaign ----------------------------------------------------------------------------


class CampaignSpec(BaseModel):
    """A whole campaign file. YAML key `from` is the field `sender` (a Python keyword)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_by_name=True, validate_by_alias=True
    )

    name: str
    sender: MailboxField = Field(alias="from")
    reply_to: MailboxField | None = None
    audience: AudienceSource
    steps: list[Step] = Field(min_length=1)
    max_attempts: Annotated[int, Strict(), Field(ge=1, le=20)] = 5

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

    @field_validator("steps")
    @classmethod
    def _check_unique_step_ids(cls, steps: list[Step]) -> list[Step]:
        first_index: dict[str, int] = {}
        for index, step in enumerate(steps):
            if step.id in first_index:
                raise PydanticCustomError(
                    "duplicate_step_id",
                    "duplicate step id '{step_id}', already used by steps[{first_index}]",
                    {"step_id": step.id, "index": index, "first_index": first_index[step.id]},
                )
            first_index[step.id] = index
        return steps


# --- validation errors in plain English ------------------------------------------------------


_MODELS_BY_TAG: dict[str, type[BaseModel]] = {
    "email": StepSpec,
    "webhook": WebhookStepSpec,
    "csv": CsvAudience,
    "url": UrlAudience,
}


def _valid_keys(parent: tuple[int | str, ...]) -> list[str] | None:
    """The keys allowed in the mapping at pydantic loc `parent`, for 'did you mean' hints."""
    model: type[BaseModel] | None = None
    if parent == ():
        model = CampaignSpec
    elif (len(parent) == 3 and parent[0] == "steps") or parent[:1] == ("audience",):
        model = _MODELS_BY_TAG.get(str(parent[-1]))
    if model is None:
        return None
    return [info.alias or name for name, info in model.model_fields.items()]


def _yaml_path(loc: tuple[int | str, ...]) -> YamlPath:
    """Drop the parts of a pydantic `loc` that do not exist in the YAML (union tags)."""
    path = list(loc)
    if len(path) > 1 and path[0] == "audience" and path[1] in _AUDIENCE_TAGS:
        tag = path.pop(1)
        if tag == "inline" and len(path) > 1 and path[1] == "entries":
            path.pop(1)
    if len(path) > 2 and path[0] == "steps" and path[2] in _STEP_TAGS:
        path.pop(2)
    return tuple(path)


def _translate(error: ErrorDetails) -> tuple[YamlPath, YamlPath, str, str | None]:
    """(path of the problem, path to name as its field, message, hint) for one pydantic error."""
    path = _yaml_path(error["loc"])
    kind, value, context = error["type"], error.get("input"), error.get("ctx", {})
    cause = context.get("error")
    if kind == "extra_forbidden":
        valid = _valid_keys(error["loc"][:-1])
        hint = closest_key_hint(path[-1], valid) if valid else None
        return path, path[:-1], f"unknown key {excerpt(path[-1])}", hint
    if kind == "missing":
        return path[:-1], path[:-1], f"missing required key {path[-1]!r}", None
    if kind == "step_channel":
        if not isinstance(value, Mapping):
            return path, path, f"expected a mapping of keys, got {describe(value)}", None
        path = (*path, "channel")
        message = f"must be 'email' or 'webhook', got {describe(value.get('channel'))}"
        return path, path, message, None
    if kind == "duplicate_step_id":
        path = ("steps", context["index"], "id")
        return path, path, error["msg"], "step ids must be unique within a campaign"
    if isinstance(cause, Exception):
        return path, path, str(cause), getattr(cause, "hint", None)
    if kind == "string_type":
        return path, path, f"expected text, got {describe(value)}", quote_hint(value)
    if kind in ("bool_type", "bool_parsing"):
        return path, path, f"expected true or false, got {describe(value)}", None
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return path, path, f"expected a whole number, got {describe(value)}", None
    if kind == "greater_than_equal":
        return path, path, f"must be at least {context['ge']}, got {describe(value)}", None
    if kind == "less_than_equal":
        return path, path, f"must be at most {context['le']}, got {describe(value)}", None
    if kind == "too_short":
        if path == ("steps",):
            return path, path, "a campaign needs at least one step", None
        return path, path, "must not be empty", None
    if kind in ("list_type", "tuple_type"):
        return path, path, f"expected a list, got {describe(value)}", None
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return path, path, f"expected a mapping of keys, got {describe(value)}", None
    if kind == "literal_error":
        return path, path, f"must be {context['expected']}, got {describe(value)}", None
    if kind == "invalid_key":
        return path, path, f"keys must be text, got {describe(value)}", None
    return path, path, str(error["msg"]), None


def _problems_from(error: ValidationError, lines: YamlLines, file: str) -> list[CampaignError]:
    problems: list[CampaignError] = []
    for details in error.errors(include_url=False):
        path, field_path, message, hint = _translate(details)
        problems.append(
            SpecError(
                message,
                file=file,
                line=lines.nearest_line(path),
                field=format_path(field_path) or None,
                hint=hint,
            )
        )
    return problems


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
    when the CSV file it names cannot be read (needed here because the CSV is part of the hash).
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
        problems += _problems_from(error, document.lines, file)
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
    audience = (
        [audience_digest(spec.audience.csv, base_dir, document.lines, file)]
        if isinstance(spec.audience, CsvAudience)
        else []  # an inline audience is part of the YAML bytes already
    )
    return LoadedCampaign(
        spec=spec,
        path=resolved,
        base_dir=base_dir,
        source=source,
        spec_hash=campaign_hash(source, templates, audience),
        lines=document.lines,
        file=file,
    )
