"""What the outbox reads of campaigns: whether a job's campaign lets it go out.

The ``campaign`` table belongs to the ``campaigns`` package, which ``dispatch`` must not import.
Rather than spelling its name and the string ``'active'`` inside queries, the outbox takes this
small definition (a constructor parameter, defaulting to ``CAMPAIGN_GATE``); a test checks it
against ``campaigns.models`` so the two cannot drift apart silently.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa


@dataclass(frozen=True)
class CampaignGate:
    table: str = "campaign"
    name_column: str = "name"
    status_column: str = "status"
    active: str = "active"  # the only status whose jobs are claimed and started
    cancelled: str = "cancelled"  # a claimed job of such a campaign is cancelled, not released

    def clause(self) -> sa.TableClause:
        """A lightweight table clause naming just the two columns the guards read."""
        return sa.table(self.table, sa.column(self.name_column), sa.column(self.status_column))


CAMPAIGN_GATE = CampaignGate()
