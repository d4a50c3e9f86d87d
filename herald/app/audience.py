"""Use case ``check_audience``: read or fetch an audience, parse it, report; launch nothing.

SOURCE is a campaign file (its audience is checked: inline, CSV file or URL), an audience data
file (.csv, .json, .ndjson/.jsonl) or an http(s) URL, fetched through the egress guard exactly
as a launch would fetch it. Every invalid row is reported with its line (or, in a JSON array,
its 1-based element index) and reason.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from pydantic import ValidationError

from campaigns.audience import (
    MailboxDeduper,
    Recipient,
    RowProblem,
    iter_audience,
    iter_data_file,
)
from campaigns.audience_formats import FORMATS, Format
from campaigns.audience_url import AudienceUnavailable, format_from_path, open_url_audience
from campaigns.spec import UrlAudience, load_campaign
from dispatch.egress.redact import redact_url
from herald.errors import HeraldError, UsageError

MAX_LISTED: Final = 1000
_CAMPAIGN_SUFFIXES: Final = (".yaml", ".yml")

Rows = Iterator[Recipient | RowProblem]


@dataclass
class AudienceReport:
    source: str  # redacted: shown and printed, so no credentials
    format: str | None = None
    recipients: int = 0
    duplicates: int = 0
    invalid: int = 0
    problems: list[tuple[str, str]] = field(default_factory=list)  # (where, reason)
    # Later rows of a mailbox: (where, where its first row is); sent once, to the first.
    duplicate_rows: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.invalid == 0 and self.recipients > 0

    def as_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "source": self.source,
            "format": self.format,
            "recipients": self.recipients,
            "duplicates": self.duplicates,
            "duplicate_rows": [
                {"where": where, "first": first} for where, first in self.duplicate_rows
            ],
            "invalid": self.invalid,
            "problems": [{"where": where, "error": error} for where, error in self.problems],
        }


def check_audience(
    source: str, *, format: str | None = None, headers: Sequence[str] = ()
) -> AudienceReport:
    """Count the rows of ``source``: recipients, invalid rows (listed), duplicates.

    UsageError for an unusable request; HeraldError (exit 1) when a URL could not be fetched
    for a reason that may pass.
    """
    chosen = parse_format(format)
    report = AudienceReport(redact_url(source))
    try:
        with _rows(source, chosen, list(headers), report) as rows:
            _count(rows, report)
    except AudienceUnavailable as exc:
        raise HeraldError(str(exc), hint="nothing was checked; try again") from exc
    return report


def parse_format(value: str | None) -> Format | None:
    if value is None:
        return None
    for known in FORMATS:
        if value.lower() == known:
            return known
    raise UsageError(f"unknown format {value!r}", hint="use csv, json or ndjson")


@contextmanager
def _rows(
    source: str, format: Format | None, headers: list[str], report: AudienceReport
) -> Iterator[Rows]:
    if source.lower().startswith(("http://", "https://")):
        audience = _url_audience(source, format, headers)
        with open_url_audience(audience) as fetched:
            report.format = fetched.format
            yield fetched.items
        return
    if headers:
        raise UsageError("--header applies to a URL only")
    path = Path(source)
    if not path.is_file():
        raise UsageError(f"{source}: no such file")
    if path.suffix.lower() in _CAMPAIGN_SUFFIXES:
        yield iter_audience(load_campaign(path))
        return
    found = format or format_from_path(path.name)
    if found is None:
        raise UsageError(
            f"cannot tell the format of {source}", hint="pass --format csv|json|ndjson"
        )
    report.format = found
    yield iter_data_file(path, found)


def _url_audience(url: str, format: Format | None, headers: list[str]) -> UrlAudience:
    parsed: dict[str, str] = {}
    for item in headers:
        name, colon, value = item.partition(":")
        if not colon or not name.strip():
            raise UsageError(f"invalid --header {item!r}", hint="write it as 'Name: value'")
        parsed[name.strip()] = value.strip()
    try:
        return UrlAudience(url=url, format=format, headers=parsed)
    except ValidationError as exc:
        reasons = "; ".join(
            str(error["msg"]).removeprefix("Value error, ") for error in exc.errors()
        )
        raise UsageError(reasons) from None


def _count(rows: Rows, report: AudienceReport) -> None:
    seen = MailboxDeduper()
    for item in rows:
        if isinstance(item, RowProblem):
            report.invalid += 1
            if len(report.problems) < MAX_LISTED:
                report.problems.append((item.where, item.reason))
            continue
        report.recipients += 1
        first = seen.first_row_of(item)
        if first is not None:
            report.duplicates += 1
            if len(report.duplicate_rows) < MAX_LISTED:
                report.duplicate_rows.append((f"{item.where} ({item.email})", first))
