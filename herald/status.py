"""``herald status``: collect counts into a stable JSON document, and render it for people.

JSON schema (stable; scripts and tests read it):
    {"campaigns": [{"name", "status", "version", "launched_at",
                    "steps": [{"step", "total", "counts": {state: n for every state}}],
                    "totals": {state: n}}],
     "totals": {state: n}, "in_doubt": n, "failed": n}
Every state appears in every ``counts``/``totals`` mapping, zero included.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text
from sqlalchemy.engine import Engine

from campaigns.store import CampaignStore
from dispatch.states import State
from dispatch.store import OutboxStore
from herald.output import styled

STATES = [s.value for s in State]
_ALARM_STYLES = {"in_doubt": "bold yellow", "failed": "bold red"}


def _zero() -> dict[str, int]:
    return dict.fromkeys(STATES, 0)


def collect(engine: Engine, campaign: str | None = None) -> dict[str, Any]:
    outbox = OutboxStore(engine.dialect.name)
    campaigns = CampaignStore(engine.dialect.name)
    with engine.connect() as conn:
        rows = campaigns.all(conn)
        counts = outbox.counts(conn, campaign)
    by_campaign: dict[str, dict[str, dict[str, int]]] = {}
    for name, step, state, n in counts:
        by_campaign.setdefault(name, {}).setdefault(step, _zero())[state] = n
    totals = _zero()
    documents = []
    for row in rows:
        if campaign is not None and row.name != campaign:
            continue
        steps = by_campaign.get(row.name, {})
        campaign_totals = _zero()
        step_docs = []
        for step_id in sorted(steps):
            step_counts = steps[step_id]
            for state, n in step_counts.items():
                campaign_totals[state] += n
            step_docs.append(
                {"step": step_id, "total": sum(step_counts.values()), "counts": step_counts}
            )
        for state, n in campaign_totals.items():
            totals[state] += n
        documents.append(
            {
                "name": row.name,
                "status": row.status,
                "version": row.version,
                "launched_at": row.launched_at.isoformat(),
                "steps": step_docs,
                "totals": campaign_totals,
            }
        )
    return {
        "campaigns": documents,
        "totals": totals,
        "in_doubt": totals[State.IN_DOUBT.value],
        "failed": totals[State.FAILED.value],
    }


def render(console: Console, snapshot: dict[str, Any]) -> None:
    # Colour only on Herald's own words (styled); names and steps are printed as plain text,
    # which herald.output's consoles never interpret.
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
    shown = ["pending", "claimed", "sending", "sent", "failed", "in_doubt", "cancelled"]
    table = Table(show_lines=False)
    table.add_column("campaign")
    table.add_column("status")
    table.add_column("step")
    for state in shown:
        table.add_column(state.replace("_", " "), justify="right")
    for doc in snapshot["campaigns"]:
        for index, step in enumerate(doc["steps"] or [{"step": "-", "counts": _zero()}]):
            cells: list[str | Text] = [
                doc["name"] if index == 0 else "",
                doc["status"] if index == 0 else "",
                step["step"],
            ]
            for state in shown:
                n = step["counts"][state]
                style = _ALARM_STYLES.get(state) if n else None
                cells.append(styled(str(n), style) if style else str(n))
            table.add_row(*cells)
    console.print(table)
