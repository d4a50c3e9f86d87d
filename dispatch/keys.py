"""Idempotency keys and Message-IDs (docs/design.md §1).

The key is a hash over the canonical tuple, so the same logical message always gets the same key
and the same Message-ID, on every attempt and from every scheduler process.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property


@dataclass(frozen=True)
class KeyTuple:
    campaign: str
    step: str
    occurrence: datetime
    recipient: str  # the mailbox identity (campaigns.addresses.mailbox_identity)

    def canonical(self) -> str:
        return self._canonical

    def key(self) -> str:
        return hashlib.sha256(self._canonical.encode("utf-8")).hexdigest()

    @cached_property
    def _canonical(self) -> str:
        # Computed once per tuple: the scheduler asks for the key and the canonical text of
        # every message it composes (a cached_property writes the instance dict, which a frozen
        # dataclass allows; equality and hashing still use the four fields only).
        occurrence = self.occurrence.astimezone(UTC).isoformat(timespec="microseconds")
        return json.dumps(
            [self.campaign, self.step, occurrence, self.recipient],
            ensure_ascii=False,
            separators=(",", ":"),
        )


def message_id(key: str, sender_domain: str) -> str:
    """Deterministic ``<first 32 hex of K@domain>``: a resend is recognisable downstream."""
    return f"<{key[:32]}@{sender_domain}>"
