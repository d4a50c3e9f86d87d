"""``herald audience check``: read or fetch an audience, parse it, report; launch nothing.

Exit codes: 0 every row is usable; 2 invalid rows, an empty audience, a refused URL (egress
policy) or unreadable data; 1 the audience could not be fetched for a reason that may pass
(network, timeout, an HTTP 408/429/5xx answer). See herald.app.audience.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from herald.cli.base import JsonFlag, app, errors_mapped, fail
from herald.output import err, out, styled

if TYPE_CHECKING:
    from herald.app.audience import AudienceReport

audience_app = typer.Typer(help="Audience sources.", no_args_is_help=True)
app.add_typer(audience_app, name="audience")


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
    from herald.app.audience import check_audience

    with errors_mapped():
        report = check_audience(source, format=format, headers=header or [])
        _print(report, as_json)
        if report.invalid:
            fail(f"{report.invalid} invalid row(s)", code=2)
        if report.recipients == 0:
            fail("the audience is empty: nobody would be sent to", code=2)


def _print(report: AudienceReport, as_json: bool) -> None:
    if as_json:
        out.print_json(json.dumps(report.as_dict()))
        return
    for where, error in report.problems:
        err.print(styled(f"{where}: {error}", "red"))
    if report.invalid > len(report.problems):
        err.print(f"… and {report.invalid - len(report.problems)} more")
    for where, first in report.duplicate_rows:
        err.print(f"note: {where}: same mailbox as {first}; sent once, to the first")
    kind = f" ({report.format})" if report.format else ""
    out.print(
        f"{report.source}{kind}: {report.recipients} recipient(s), "
        f"{report.invalid} invalid row(s), {report.duplicates} duplicate(s)"
    )
