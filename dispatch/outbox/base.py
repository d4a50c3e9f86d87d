"""The state every SQL concern of the outbox shares: the dialect's forms and the campaign gate."""

from __future__ import annotations

from dispatch.outbox.dialect import SqlForms, forms_for
from dispatch.outbox.gate import CAMPAIGN_GATE, CampaignGate
from dispatch.outbox.sqlcore import CampaignFilters


class SqlBase:
    """Stateless apart from the dialect and gate; safe to share between threads."""

    def __init__(self, dialect_name: str, *, gate: CampaignGate = CAMPAIGN_GATE) -> None:
        self.dialect = dialect_name
        self.forms: SqlForms = forms_for(dialect_name)
        self.campaigns = CampaignFilters(gate)
