"""Idempotency keys and Message-IDs (docs/design.md §1).

The key is a hash over the canonical tuple, so the same logical message always gets the same key
and the same Message-ID, on every attempt and from every scheduler process.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime


@dataclass(frozen=True)
class KeyTuple:
    campaign: str
    step: str
    occurrence: datetime
    recipient: str  # the mailbox identity (campaigns.addresses.mailbox_identity)

    def canonical(self) -> str:
        occurrence = self.occurrence.astimezone(UTC).isoformat(timespec="microseconds")
        return json.dumps(
            [self.campaign, self.step, occurrence, self.recipient],
            ensure_ascii=False,
            separators=(",", ":"),
        )

    def key(self) -> str:
        return hashlib.sha256(self.canonical().encode("utf-8")).hexdigest()


def message_id(key: str, sender_domain: str) -> str:
    """Deterministic ``<first 32 hex of K@domain>``: a resend is recognisable downstream."""
    return f"<{key[:32]}@{sender_domain}>"
