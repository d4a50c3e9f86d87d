"""Signed tokens: who an unsubscribe link or a bounce address speaks for, forgery-proof.

Two shapes, one key ring (``SigningKeys``; the first key signs, every listed key verifies, so a
key is rotated by putting a new one first and retired by removing it):

- the **unsubscribe token** of the one-click URL carries its claim (mailbox, suppression scope,
  campaign) and an HMAC over it: ``herald serve`` verifies it without a database lookup, and it
  never expires (CAN-SPAM wants the link to work for at least 30 days; RFC 8058 wants no
  session). Only a key leaving the ring invalidates it.
- the **address token** of a mailto unsubscribe or a VERP return path (``unsub+<t>@…``,
  ``bounce+<t>@…``) must fit an address's 64-octet local part and survive MTAs that lower-case
  it, so it carries only a 64-bit prefix of the job's idempotency key, in lower-case base32, and
  a MAC bound to its purpose: a bounce token cannot be replayed as an unsubscribe.

Pure: no I/O, no clock. ``BadToken`` never says which check failed (no oracle for a forger).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Literal

Purpose = Literal["unsub", "bounce"]

_KID = re.compile(r"[a-z0-9]{1,8}")
_SEP = "\x1f"  # cannot occur in a mailbox identity, a scope or a campaign name
_UNSUB_MAC_BYTES = 16
_ADDRESS_MAC_BYTES = 8
KEY_PREFIX_HEX = 16  # 64 bits of the idempotency key


class BadToken(ValueError):
    """The token is malformed, altered, or signed by a key that is not (or no longer) ours."""


class SigningKeyError(ValueError):
    """The key ring setting is malformed (the message never contains a secret)."""


@dataclass(frozen=True)
class SigningKeys:
    """Key id → secret; ``current`` signs. Parsed from ``kid:secret,kid:secret`` (first signs)."""

    current: str
    secrets: dict[str, bytes]

    @classmethod
    def parse(cls, text: str) -> SigningKeys:
        secrets: dict[str, bytes] = {}
        order: list[str] = []
        for n, part in enumerate(p.strip() for p in text.split(",")):
            kid, sep, secret = part.partition(":")
            if not sep or not _KID.fullmatch(kid):
                raise SigningKeyError(
                    f"key {n + 1}: expected kid:secret with a kid of 1-8 lower-case letters/digits"
                )
            if len(secret) < 16:
                raise SigningKeyError(f"key {kid!r}: the secret must be at least 16 characters")
            if kid in secrets:
                raise SigningKeyError(f"key {kid!r} is listed twice")
            secrets[kid] = secret.encode("utf-8")
            order.append(kid)
        if not order:
            raise SigningKeyError("no signing key given")
        return cls(order[0], secrets)

    def mac(self, kid: str, message: bytes) -> bytes:
        try:
            secret = self.secrets[kid]
        except KeyError:
            raise BadToken("invalid token") from None
        return hmac.new(secret, message, hashlib.sha256).digest()


@dataclass(frozen=True)
class UnsubscribeClaim:
    mailbox: str
    scope: str
    campaign: str
    kid: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise BadToken("invalid token") from None
    if _b64(data) != text:  # one spelling per token: no slack bits, no stray characters
        raise BadToken("invalid token")
    return data


def unsubscribe_token(keys: SigningKeys, *, mailbox: str, scope: str, campaign: str) -> str:
    """``1.<kid>.<claim>.<mac>``, URL-safe (base64url, no padding)."""
    for value in (mailbox, scope, campaign):
        if _SEP in value:
            raise ValueError("token fields cannot contain U+001F")
    claim = _SEP.join((mailbox, scope, campaign)).encode("utf-8")
    mac = keys.mac(keys.current, b"unsub-url\x00" + claim)[:_UNSUB_MAC_BYTES]
    return f"1.{keys.current}.{_b64(claim)}.{_b64(mac)}"


def read_unsubscribe_token(keys: SigningKeys, token: str) -> UnsubscribeClaim:
    parts = token.split(".")
    if len(parts) != 4 or parts[0] != "1" or len(token) > 2048:
        raise BadToken("invalid token")
    _, kid, claim_text, mac_text = parts
    claim = _unb64(claim_text)
    expected = keys.mac(kid, b"unsub-url\x00" + claim)[:_UNSUB_MAC_BYTES]
    if not hmac.compare_digest(expected, _unb64(mac_text)):
        raise BadToken("invalid token")
    try:
        mailbox, scope, campaign = claim.decode("utf-8").split(_SEP)
    except ValueError:
        raise BadToken("invalid token") from None
    return UnsubscribeClaim(mailbox, scope, campaign, kid)


def _b32(data: bytes) -> str:
    return base64.b32encode(data).rstrip(b"=").decode("ascii").lower()


def _unb32(text: str) -> bytes:
    try:
        data = base64.b32decode(text.upper() + "=" * (-len(text) % 8))
    except (binascii.Error, ValueError):
        raise BadToken("invalid token") from None
    if _b32(data) != text:  # one spelling per token (case aside: the caller lower-cases)
        raise BadToken("invalid token")
    return data


def address_token(keys: SigningKeys, purpose: Purpose, job_key: str) -> str:
    """``<key prefix>.<kid>.<mac>`` in lower case, 36 characters at most for a 8-char kid."""
    prefix = bytes.fromhex(job_key[:KEY_PREFIX_HEX])
    mac = keys.mac(keys.current, purpose.encode("ascii") + b"\x00" + prefix)
    return f"{_b32(prefix)}.{keys.current}.{_b32(mac[:_ADDRESS_MAC_BYTES])}"


def read_address_token(keys: SigningKeys, purpose: Purpose, token: str) -> str:
    """The job-key prefix (hex) the token names; case-insensitive (MTAs smash case)."""
    parts = token.lower().split(".")
    if len(parts) != 3:
        raise BadToken("invalid token")
    prefix_text, kid, mac_text = parts
    prefix = _unb32(prefix_text)
    if len(prefix) != KEY_PREFIX_HEX // 2:
        raise BadToken("invalid token")
    expected = keys.mac(kid, purpose.encode("ascii") + b"\x00" + prefix)[:_ADDRESS_MAC_BYTES]
    if not hmac.compare_digest(expected, _unb32(mac_text)):
        raise BadToken("invalid token")
    return prefix.hex()
