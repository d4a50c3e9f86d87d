"""``herald enroll``: put one recipient into an enrollment campaign's drip."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from herald.cli.base import DatabaseUrl, JsonFlag, app, errors_mapped, opened
from herald.defaults import DEFAULT_DATABASE_URL
from herald.output import err, out, styled


@app.command()
def enroll(
    campaign: Annotated[str, typer.Argument(help="The enrollment campaign's name.")],
    address: Annotated[
        str, typer.Argument(help="The recipient: ann@example.com or 'Ann <ann@example.com>'.")
    ],
    data: Annotated[
        str | None,
        typer.Option(
            "--data", help='Template variables as a JSON object, e.g. \'{"plan": "pro"}\'.'
        ),
    ] = None,
    timezone: Annotated[
        str | None,
        typer.Option("--timezone", help="The recipient's IANA time zone, e.g. Europe/Berlin."),
    ] = None,
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    as_json: JsonFlag = False,
) -> None:
    """Enroll a recipient: their drip's steps count from now. Enrolling twice is a no-op."""
    from herald.app.enroll import enroll as enroll_recipient
    from herald.app.unsubscribe import links_from_env

    with errors_mapped():
        links = links_from_env()
        result = enroll_recipient(
            opened(database_url), campaign, address, data=data, timezone=timezone, links=links
        )
        if as_json:
            out.print_json(json.dumps(result.summary()))
            return
        when = result.enrolled_at.isoformat()
        if result.created:
            jobs = 0 if result.scheduled is None else result.scheduled.new_jobs
            out.print(
                f"enrolled: {result.recipient} in {result.campaign} at {when}; "
                f"{jobs} step job(s) queued"
            )
        else:
            out.print(
                f"already enrolled: {result.recipient} in {result.campaign} since {when} "
                f"({result.state}); nothing changed"
            )
        if result.scheduled is not None and result.scheduled.note:
            err.print(styled("note:", "yellow"), result.scheduled.note)
