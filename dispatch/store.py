"""Compatibility names for the outbox (before issue 8 it all lived in this module).

Canonical now: ``dispatch.outbox`` (``SqlOutbox``, ``NewJob``, ``ClaimedJob``, ``Completion``,
``Lease``, ``RecoveryReport``, the ``Outbox`` Protocol). ``OutboxStore`` is ``SqlOutbox`` with
the same constructor (``OutboxStore(engine.dialect.name)``) and method names.
"""

from __future__ import annotations

from dbtypes import utc
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

OutboxStore = SqlOutbox

__all__ = [
    "ClaimedJob",
    "Completion",
    "Deferral",
    "Lease",
    "LeaseRow",
    "NewJob",
    "OutboxStore",
    "RecoveryReport",
    "Refusal",
    "SlotAsk",
    "payload_hash",
    "utc",
]
