"""VERP return paths: the envelope sender a bounce comes back to names the job it is about.

``bounce+<token>@<bounce domain>`` where the token is ``address_token(keys, "bounce", key)``
(``dispatch.signed_tokens``): a 64-bit prefix of the job's idempotency key and a MAC, lower
case, so an inbound listener recognises the job without trusting anything the bounce says about
the recipient, and a forger cannot make it suppress an address of his choosing. The token
depends only on the key and the signing key ring, so every retry of a job uses the same return
path (greylisting keys on it) until the ring's first key changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dispatch.signed_tokens import SigningKeys, address_token

BOUNCE_LOCAL_PREFIX = "bounce+"
_HEX_KEY = re.compile(r"[0-9a-f]{16,}")


@dataclass(frozen=True)
class VerpReturnPath:
    keys: SigningKeys
    domain: str  # HERALD_BOUNCE_DOMAIN, lower case

    def sender_for(self, job_key: str, default: str) -> str:
        """The MAIL FROM for the job with this key; ``default`` (the stored sender) for a key
        that cannot be tokenised (not hex: never written by Herald's key function)."""
        if not _HEX_KEY.fullmatch(job_key):
            return default
        return f"{BOUNCE_LOCAL_PREFIX}{address_token(self.keys, 'bounce', job_key)}@{self.domain}"
