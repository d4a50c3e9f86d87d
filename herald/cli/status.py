"""``herald status``: counts per campaign, step and state, and each campaign's schedule (next
fire, last occurrence, enrollments, when pending work falls due), for people or (``--json``)
scripts."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from herald.cli.base import (
    DatabaseUrl,
    JsonFlag,
    NowOption,
    app,
    clock_option,
    errors_mapped,
    opened,
)
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
    now: NowOption = None,
) -> None:
    """Counts per campaign, step and state; next fires and due work; in-doubt and failed first."""
    from herald.app.status import status as collect

    with errors_mapped():
        clock = clock_option(now)  # a bad --now is refused before the database is opened
        snapshot = collect(opened(database_url, create=False), campaign, clock=clock)
        if as_json:
            out.print_json(json.dumps(snapshot))
        else:
            render(out, snapshot)


def render(console: Console, snapshot: dict[str, Any]) -> None:
    # Colour only on Herald's own words (styled); names and steps are printed as plain text,
    # which herald.output's consoles never interpret.
    from rich.table import Table

    render_relays(console, snapshot)
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
    render_schedule(console, snapshot)


def render_relays(console: Console, snapshot: dict[str, Any]) -> None:
    """First of all: a relay that workers cannot reach (nothing goes out until it is back)."""
    from herald.cli.timefmt import utc_text

    for relay in snapshot.get("relays", []):
        if relay["state"] != "unreachable":
            continue
        since = utc_text(datetime.fromisoformat(relay["since"]))
        console.print(
            styled(f"✗ relay unreachable since {since}", "bold red"),
            f"({relay['relay']}): {relay['last_error'] or 'no detail'} — jobs wait for it,"
            " no attempt counted",
        )


_LATE = timedelta(minutes=5)
_BUCKETS = [
    ("now", "due now"),
    ("within_1h", "<1h"),
    ("within_24h", "<24h"),
    ("within_7d", "<7d"),
    ("later", "later"),
]


def render_schedule(console: Console, snapshot: dict[str, Any]) -> None:
    """Triggers, fires and due work: shown once any campaign has more than a launch, or work
    not yet due."""
    from rich.table import Table
    from rich.text import Text

    from herald.cli.timefmt import both

    now = datetime.fromisoformat(snapshot["now"])
    documents = snapshot["campaigns"]
    waiting = any(doc["due"][b] for doc in documents for b, _ in _BUCKETS[1:])
    if not waiting and all(doc["trigger"] == "launch" for doc in documents):
        _render_notes(console, documents)
        return
    table = Table(show_lines=False)
    table.add_column("campaign")
    table.add_column("trigger")
    table.add_column("next fire")
    table.add_column("last occurrence")
    for _, title in _BUCKETS:
        table.add_column(title, justify="right")
    table.add_column("enrolled")
    for doc in documents:
        zone = doc["timezone"] or "UTC"
        next_fire: str | Text = "-"
        if doc["next_fire"] is not None:
            moment = datetime.fromisoformat(doc["next_fire"])
            next_fire = both(moment, zone)
            if moment < now - _LATE:  # a scheduler fires within minutes of the time
                next_fire = Text.assemble(next_fire, " ", styled("overdue", "bold yellow"))
        elif doc["trigger_ended"] is True:
            next_fire = "none (ended)"
        elif doc["trigger_ended"] is False:
            next_fire = "unknown"
        last = doc["last_occurrence"]
        enrolled = doc["enrollments"]
        table.add_row(
            doc["name"],
            doc["trigger"],
            next_fire,
            both(datetime.fromisoformat(last), zone) if last else "-",
            *(str(doc["due"][bucket]) for bucket, _ in _BUCKETS),
            f"{enrolled['active']} active / {sum(enrolled.values())}"
            if doc["trigger"] == "enrollment"
            else "-",
        )
    console.print(table)
    _render_notes(console, documents)


def _render_notes(console: Console, documents: list[dict[str, Any]]) -> None:
    for doc in documents:
        if doc["scheduler_note"]:
            console.print(styled(f"⚠ {doc['name']}:", "bold yellow"), doc["scheduler_note"])
        if doc.get("pause_reason"):
            console.print(
                styled(f"⏸ {doc['name']}:", "bold red"),
                doc["pause_reason"],
                f"— fix the cause, then `herald resume {doc['name']}`",
            )
