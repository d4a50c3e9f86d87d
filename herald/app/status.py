"""Use case ``status``: counts per campaign, step and state, as a stable JSON document.

Schema (stable; scripts and tests read it):
    {"campaigns": [{"name", "status", "version", "launched_at",
                    "steps": [{"step", "total", "counts": {state: n for every state}}],
                    "totals": {state: n}}],
     "totals": {state: n}, "in_doubt": n, "failed": n}
Every state appears in every ``counts``/``totals`` mapping, zero included.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Engine

from campaigns.store import CampaignStore
from dispatch.states import State
from dispatch.store import OutboxStore
from herald.errors import UsageError

STATES = [s.value for s in State]


def zero_counts() -> dict[str, int]:
    return dict.fromkeys(STATES, 0)


def status(engine: Engine, campaign: str | None = None) -> dict[str, Any]:
    """The snapshot; UsageError if ``campaign`` is named and does not exist."""
    outbox = OutboxStore(engine.dialect.name)
    campaigns = CampaignStore(engine.dialect.name)
    with engine.connect() as conn:
        rows = campaigns.all(conn)
        counts = outbox.counts(conn, campaign)
    by_campaign: dict[str, dict[str, dict[str, int]]] = {}
    for name, step, state, n in counts:
        by_campaign.setdefault(name, {}).setdefault(step, zero_counts())[state] = n
    totals = zero_counts()
    documents = []
    for row in rows:
        if campaign is not None and row.name != campaign:
            continue
        steps = by_campaign.get(row.name, {})
        campaign_totals = zero_counts()
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
    if campaign is not None and not documents:
        raise UsageError(f"no campaign named {campaign!r}")
    return {
        "campaigns": documents,
        "totals": totals,
        "in_doubt": totals[State.IN_DOUBT.value],
        "failed": totals[State.FAILED.value],
    }
