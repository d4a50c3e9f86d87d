"""``herald suppress add|remove|import|list``: the suppression list (herald.app.suppress).

Exit codes: 0 done (adding an address already suppressed is done too); 1 ``remove`` found
nothing to lift, or the database failed; 2 invalid input (an address, a scope, a reason, a file
row: every bad row of an import is listed as FILE:LINE, and nothing is imported).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from herald.cli.base import DatabaseUrl, JsonFlag, app, errors_mapped, fail, opened
from herald.defaults import DEFAULT_DATABASE_URL
from herald.output import err, out, styled

if TYPE_CHECKING:
    from herald.app.suppress import Added

suppress_app = typer.Typer(
    help="Mailboxes never to send to: globally, or for one list's campaigns.",
    no_args_is_help=True,
)
app.add_typer(suppress_app, name="suppress")

ScopeOption = Annotated[
    str,
    typer.Option(
        "--scope",
        help="global (every campaign, transactional mail too) or list:<name> (the campaigns "
        "of that list; a campaign's list is its `list:`, else its name).",
    ),
]
MAX_SHOWN = 50  # problems printed for a bad import; the rest are counted


@suppress_app.command("add")
def add(
    addresses: Annotated[list[str], typer.Argument(help="Addresses, any spelling.")],
    scope: ScopeOption = "global",
    reason: Annotated[str, typer.Option("--reason", help="Why (kept with the entry).")] = "manual",
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    as_json: JsonFlag = False,
) -> None:
    """Never send to these mailboxes again (in --scope), whatever the spelling."""
    from herald.app.suppress import add as add_entries

    with errors_mapped():
        result = add_entries(opened(database_url), addresses, scope=scope, reason=reason)
        _report(result, as_json)


@suppress_app.command("import")
def import_(
    file: Annotated[
        Path,
        typer.Argument(
            help="CSV with an 'email' (or 'address') column and optional 'scope' and 'reason' "
            "columns, or one address per line.",
            show_default=False,
        ),
    ],
    scope: ScopeOption = "global",
    reason: Annotated[
        str, typer.Option("--reason", help="For rows without a reason.")
    ] = "imported",
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    as_json: JsonFlag = False,
) -> None:
    """Suppress every address of FILE: all of them, or (one bad row) none."""
    from campaigns.suppression_file import SuppressionFileError
    from herald.app.suppress import import_file

    with errors_mapped():
        try:
            result = import_file(opened(database_url), file, scope=scope, reason=reason)
        except SuppressionFileError as error:
            for problem in error.problems[:MAX_SHOWN]:
                err.print(styled(str(problem), "red"))
            if len(error.problems) > MAX_SHOWN:
                err.print(f"… {len(error.problems) - MAX_SHOWN} more not shown")
            fail(str(error), code=2)
        _report(result, as_json, each=False)


@suppress_app.command("remove")
def remove(
    address: Annotated[str, typer.Argument(help="An address, any spelling.")],
    scope: ScopeOption = "global",
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    as_json: JsonFlag = False,
) -> None:
    """Lift a mailbox's suppression in --scope. Jobs it already cancelled stay cancelled."""
    from herald.app.suppress import remove as remove_entry

    with errors_mapped():
        result = remove_entry(opened(database_url), address, scope=scope)
        if as_json:
            out.print_json(
                json.dumps(
                    {
                        "address": result.mailbox,
                        "scope": result.scope,
                        "removed": result.removed,
                        "still_suppressed_in": result.other_scopes,
                    }
                )
            )
        elif result.removed:
            out.print(f"{result.mailbox}: no longer suppressed in {result.scope}")
        if result.other_scopes and not as_json:
            still = ", ".join(result.other_scopes)
            err.print(f"note: {result.mailbox} is still suppressed in {still}")
        if not result.removed:
            fail(
                f"{result.mailbox} is not suppressed in {result.scope}",
                hint="`herald suppress list` shows every entry and its scope",
            )


@suppress_app.command("list")
def list_(
    scope: Annotated[str | None, typer.Option("--scope", help="Only this scope.")] = None,
    address: Annotated[
        str | None, typer.Option("--address", help="Only this mailbox (any spelling).")
    ] = None,
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    as_json: JsonFlag = False,
) -> None:
    """The suppression list: mailbox, scope, reason, source and since when."""
    from rich.table import Table

    from herald.app.suppress import list_entries

    with errors_mapped():
        found = list_entries(opened(database_url, create=False), scope=scope, address=address)
        if as_json:
            doc = {"suppressions": [entry.as_dict() for entry in found], "count": len(found)}
            out.print_json(json.dumps(doc))
            return
        if not found:
            out.print("no suppressions")
            return
        table = Table()
        for column in ("address", "scope", "reason", "source", "since"):
            table.add_column(column)
        for entry in found:
            since = "" if entry.created_at is None else entry.created_at.strftime("%Y-%m-%d %H:%M")
            table.add_row(entry.address, entry.scope, entry.reason, entry.source, since)
        out.print(table)
        out.print(f"{len(found)} suppression(s)")


def _report(result: Added, as_json: bool, *, each: bool = True) -> None:
    """``each``: a line per mailbox (``add``); an import says how many, whatever its size."""
    if as_json:
        out.print_json(json.dumps(result.as_dict()))
        return
    for mailbox in result.added if each else ():
        out.print(f"{mailbox}: suppressed in {result.scope}")
    for mailbox in result.already if each else ():
        out.print(f"{mailbox}: already suppressed in {result.scope}")
    summary = f"{len(result.added)} added, {len(result.already)} already suppressed"
    if result.duplicates:
        summary += f", {result.duplicates} duplicate(s)"
    out.print(summary)
    if result.stopped_jobs:
        out.print(
            f"{result.stopped_jobs} unsent job(s) of these mailboxes will not be sent "
            "(cancelled, reason 'suppressed', when a worker reaches them)"
        )
