"""The campaign's `audience:` key: recipients inline, in a CSV file, or behind a URL.

An inline audience is a list whose items are an address ('a@b.c', 'Ann <a@b.c>') or a mapping
with `email` plus any other keys, which become template variables. A string audience is a CSV
file, relative to the YAML's folder; `{csv: path}` means the same. A URL audience (see
spec_http.UrlAudience) is fetched through the egress guard and snapshotted with each occurrence.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from campaigns.addresses import AddressError, normalise_address, split_display_name
from campaigns.errors import excerpt
from campaigns.spec_fields import Invalid, check_relative_file, describe, reject_line_breaks
from campaigns.spec_http import UrlAudience
from templates.files import resolve_inside


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


AUDIENCE_TAGS = ("inline", "csv", "url")
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
