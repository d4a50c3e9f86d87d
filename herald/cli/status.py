"""``herald status``: counts per campaign, step and state, for people or (``--json``) scripts."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from herald.cli.base import DatabaseUrl, JsonFlag, app, errors_mapped, opened
from herald.defaults import DEFAULT_DATABASE_URL
from herald.output import out, styled

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

_ALARM_STYLES = {"in_doubt": "bold yellow", "failed": "bold red"}
_SHOWN = ["pending", "claimed", "sending", "sent", "failed", "in_doubt", "cancelled"]


@app.command()
def status(
    campaign: Annotated[str | None, typer.Argument(help="Only this campaign.")] = None,
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    as_json: JsonFlag = False,
) -> None:
    """Counts per campaign, step and state; in-doubt and failed jobs shown first."""
    from herald.app.status import status as collect

    with errors_mapped():
        snapshot = collect(opened(database_url), campaign)
        if as_json:
            out.print_json(json.dumps(snapshot))
        else:
            render(out, snapshot)


def render(console: Console, snapshot: dict[str, Any]) -> None:
    # Colour only on Herald's own words (styled); names and steps are printed as plain text,
    # which herald.output's consoles never interpret.
    from rich.table import Table

    if snapshot["in_doubt"]:
        console.print(
            styled(f"⚠ {snapshot['in_doubt']} message(s) IN DOUBT", "bold yellow"),
            "— may or may not have been delivered; see `herald in-doubt list`",
        )
    if snapshot["failed"]:
        console.print(
            styled(f"✗ {snapshot['failed']} message(s) FAILED", "bold red"),
            "— see `herald dead list`",
        )
    if not snapshot["campaigns"]:
        console.print("no campaigns yet: `herald launch FILE` starts one")
        return
    table = Table(show_lines=False)
    table.add_column("campaign")
    table.add_column("status")
    table.add_column("step")
    for state in _SHOWN:
        table.add_column(state.replace("_", " "), justify="right")
    for doc in snapshot["campaigns"]:
        no_steps = [{"step": "-", "counts": dict.fromkeys(_SHOWN, 0)}]
        for index, step in enumerate(doc["steps"] or no_steps):
            cells: list[str | Text] = [
                doc["name"] if index == 0 else "",
                doc["status"] if index == 0 else "",
                step["step"],
            ]
            for state in _SHOWN:
                n = step["counts"][state]
                style = _ALARM_STYLES.get(state) if n else None
                cells.append(styled(str(n), style) if style else str(n))
            table.add_row(*cells)
    console.print(table)
