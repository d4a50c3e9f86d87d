"""Suppressing a mailbox: the one way into the suppression list, by mailbox identity.

``dispatch`` compares suppression entries with ``send_job.mailbox`` but cannot compute an
identity (it imports nothing above it), so every entry goes in through here: any spelling of an
address suppresses its mailbox, and every other spelling of it with it.
"""

from __future__ import annotations

import sqlalchemy as sa

from campaigns.addresses import mailbox_identity
from dispatch.store import OutboxStore


def suppress(conn: sa.Connection, address: str, reason: str) -> bool:
    """Never send to the mailbox ``address`` names again, whatever the spelling.

    Raises AddressError for an invalid address; True if the mailbox was not suppressed before.
    """
    return OutboxStore(conn.dialect.name).suppress(conn, mailbox_identity(address), reason)
