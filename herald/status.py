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
from sqlalchemy.engine import Engine

from campaigns.store import CampaignStore
from dispatch.states import State
from dispatch.store import OutboxStore

STATES = [s.value for s in State]


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
    if snapshot["in_doubt"]:
        console.print(
            f"[bold yellow]⚠ {snapshot['in_doubt']} message(s) IN DOUBT[/] — may or may not have "
            "been delivered; see `herald in-doubt list`",
            markup=True,
        )
    if snapshot["failed"]:
        console.print(
            f"[bold red]✗ {snapshot['failed']} message(s) FAILED[/] — see `herald dead list`",
            markup=True,
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
            cells = [doc["name"] if index == 0 else "", doc["status"] if index == 0 else ""]
            cells.append(step["step"])
            for state in shown:
                n = step["counts"][state]
                text = str(n)
                if n and state == "in_doubt":
                    text = f"[bold yellow]{n}[/]"
                elif n and state == "failed":
                    text = f"[bold red]{n}[/]"
                cells.append(text)
            table.add_row(*cells)
    console.print(table)
