"""``herald feedback``: bounces, complaints and unsubscribes received (herald.app.feedback)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from herald.cli.base import DatabaseUrl, JsonFlag, app, errors_mapped, opened
from herald.defaults import DEFAULT_DATABASE_URL
from herald.errors import UsageError
from herald.output import out

KINDS = ("hard", "soft", "block", "complaint", "unsubscribe")


@app.command()
def feedback(
    kind: Annotated[
        str | None, typer.Option("--kind", help="Only this kind: " + ", ".join(KINDS) + ".")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many to list.")] = 20,
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    as_json: JsonFlag = False,
) -> None:
    """Bounces, complaints and unsubscribes received: counts, soft bounces, the newest."""
    from rich.table import Table

    from herald.app.feedback import feedback_summary

    with errors_mapped():
        if kind is not None and kind not in KINDS:
            raise UsageError(f"unknown kind {kind!r}", hint="one of " + ", ".join(KINDS))
        summary = feedback_summary(opened(database_url, create=False), kind=kind, limit=limit)
        if as_json:
            out.print_json(json.dumps(summary.to_json()))
            return
        out.print(", ".join(f"{n} {k}" for k, n in summary.counts.items()))
        if summary.soft_by_mailbox:
            out.print("soft bounces by mailbox (counted, not suppressed):")
            for mailbox, n in summary.soft_by_mailbox:
                out.print(f"  {n:>5}  {mailbox}")
        if summary.recent:
            table = Table()
            for column in ("at", "kind", "source", "mailbox", "status", "detail"):
                table.add_column(column)
            for e in summary.recent:
                at = e.at.strftime("%Y-%m-%d %H:%M:%S") if e.at else ""
                table.add_row(
                    at, e.kind, e.source, e.mailbox or "", e.status_code or "", e.detail or ""
                )
            out.print(table)
