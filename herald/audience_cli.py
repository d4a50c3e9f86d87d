"""``herald audience check``: read or fetch an audience, parse it, report; launch nothing.

SOURCE is a campaign file (its audience is checked: inline, CSV file or URL), an audience data
file (.csv, .json, .ndjson/.jsonl) or an http(s) URL, fetched through the egress guard exactly
as a launch would fetch it. Every invalid row is listed with its line (or, in a JSON array, its
1-based element index) and reason.

Exit codes: 0 every row is usable; 2 invalid rows, an empty audience, a refused URL (egress
policy) or unreadable data; 1 the audience could not be fetched for a reason that may pass
(network, timeout, an HTTP 408/429/5xx answer).

Registered on ``herald.cli.app`` when imported (``herald.cli.main`` imports it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Final

import typer
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
from herald.cli import JsonFlag, app, err, errors_mapped, fail, out
from herald.errors import HeraldError, UsageError
from herald.output import styled

audience_app = typer.Typer(help="Audience sources.", no_args_is_help=True)
app.add_typer(audience_app, name="audience")

MAX_LISTED: Final = 1000
_CAMPAIGN_SUFFIXES: Final = (".yaml", ".yml")

Rows = Iterator[Recipient | RowProblem]


@dataclass
class AudienceReport:
    source: str
    format: str | None = None
    recipients: int = 0
    duplicates: int = 0
    invalid: int = 0
    problems: list[tuple[str, str]] = field(default_factory=list)  # (where, reason)
    # Later rows of a mailbox: (where, where its first row is); sent once, to the first.
    duplicate_rows: list[tuple[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "ok": self.invalid == 0 and self.recipients > 0,
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


@audience_app.command("check")
def check(
    source: Annotated[
        str,
        typer.Argument(
            help="A campaign YAML file, an audience file (.csv, .json, .ndjson) or an https:// URL."
        ),
    ],
    format: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="csv, json or ndjson. Default: from the extension, or a URL's Content-Type.",
        ),
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option(
            "--header",
            "-H",
            help="'Name: value' header for a URL (repeatable); ${ENV} references allowed.",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Parse an audience and list every invalid row, without launching anything."""
    with errors_mapped():
        chosen = _format_option(format)
        report = AudienceReport(redact_url(source))  # shown and printed: no credentials
        try:
            with _rows(source, chosen, header or [], report) as rows:
                _count(rows, report)
        except AudienceUnavailable as exc:
            raise HeraldError(str(exc), hint="nothing was checked; try again") from exc
        _print(report, as_json)
        if report.invalid:
            fail(f"{report.invalid} invalid row(s)", code=2)
        if report.recipients == 0:
            fail("the audience is empty: nobody would be sent to", code=2)


def _format_option(value: str | None) -> Format | None:
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


def _print(report: AudienceReport, as_json: bool) -> None:
    if as_json:
        out.print_json(json.dumps(report.as_dict()))
        return
    for where, error in report.problems:
        err.print(styled(f"{where}: {error}", "red"))
    if report.invalid > len(report.problems):
        err.print(f"… and {report.invalid - len(report.problems)} more")
    for where, first in report.duplicate_rows:
        note = f"note: {where}: same mailbox as {first}; sent once, to the first"
        err.print(note, markup=False)
    kind = f" ({report.format})" if report.format else ""
    out.print(
        f"{report.source}{kind}: {report.recipients} recipient(s), "
        f"{report.invalid} invalid row(s), {report.duplicates} duplicate(s)"
    )
