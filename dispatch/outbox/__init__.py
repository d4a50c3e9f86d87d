"""The outbox: durable send jobs, their fenced leases and their journal.

- ``contract.Outbox``: the Protocol every implementation honours;
- ``sql.SqlOutbox``: SQLite and PostgreSQL, split by concern (``claim``, ``send``, ``recovery``,
  ``operator``, ``reads``; ``versions`` for campaign versions) over a dialect strategy
  (``dialect``);
- ``memory.MemoryOutbox``: the same contract in memory, for fast unit tests.

The state machine they execute is ``dispatch.states``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
    Refusal,
    SlotAsk,
    payload_hash,
)
from dispatch.outbox.sql import SqlOutbox

if TYPE_CHECKING:
    from dispatch.outbox.memory import MemoryOutbox, MemoryTx

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
    "Refusal",
    "SlotAsk",
    "SqlOutbox",
    "payload_hash",
]


def __getattr__(name: str) -> Any:
    # The in-memory outbox (tests use it) is imported when first named, not by every command
    # that imports the outbox (dispatch.store does): ~10 ms of each one's start-up.
    if name in ("MemoryOutbox", "MemoryTx"):
        from dispatch.outbox import memory

        return getattr(memory, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
