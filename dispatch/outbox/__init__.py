"""The outbox: durable send jobs, their fenced leases and their journal.

- ``contract.Outbox``: the Protocol every implementation honours;
- ``sql.SqlOutbox``: SQLite and PostgreSQL, split by concern (``claim``, ``send``, ``recovery``,
  ``operator``, ``reads``; ``versions`` for campaign versions) over a dialect strategy
  (``dialect``);
- ``memory.MemoryOutbox``: the same contract in memory, for fast unit tests.

The state machine they execute is ``dispatch.states``.
"""

from __future__ import annotations

from dispatch.outbox.contract import Outbox
from dispatch.outbox.gate import CAMPAIGN_GATE, CampaignGate
from dispatch.outbox.jobs import (
    ClaimedJob,
    Completion,
    Deferral,
    Lease,
    LeaseRow,
    NewJob,
    RecoveryReport,
    SlotAsk,
    payload_hash,
)
from dispatch.outbox.memory import MemoryOutbox, MemoryTx
from dispatch.outbox.sql import SqlOutbox

__all__ = [
    "CAMPAIGN_GATE",
    "CampaignGate",
    "ClaimedJob",
    "Completion",
    "Deferral",
    "Lease",
    "LeaseRow",
    "MemoryOutbox",
    "MemoryTx",
    "NewJob",
    "Outbox",
    "RecoveryReport",
    "SlotAsk",
    "SqlOutbox",
    "payload_hash",
]
