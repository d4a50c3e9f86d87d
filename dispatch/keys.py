"""Idempotency keys and Message-IDs (docs/design.md §1).

The key is a hash over the canonical tuple, so the same logical message always gets the same key
and the same Message-ID, on every attempt and from every scheduler process.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property, lru_cache
from typing import Final


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
        return _JSON(
            [self.campaign, self.step, _instant(self.occurrence), self.recipient],
        )


# json.dumps with these options builds a new encoder at every call; the key's text is exactly
# json.dumps(…, ensure_ascii=False, separators=(",", ":")) (tests/unit/test_keys.py).
_JSON: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


@lru_cache(maxsize=64)
def _instant(occurrence: datetime) -> str:
    # Every message of an occurrence has the same one: a launch formats it once, not per job.
    return occurrence.astimezone(UTC).isoformat(timespec="microseconds")


def message_id(key: str, sender_domain: str) -> str:
    """Deterministic ``<first 32 hex of K@domain>``: a resend is recognisable downstream."""
    return f"<{key[:32]}@{sender_domain}>"
