"""DKIM keys for tests and the DNS a verifier needs, served by an injected resolver.

RSA keys take a while to generate, so one 2048-bit key is made per test session and written to
a file wherever a test needs it; the Ed25519 seed is fixed (any 32 bytes are a key).
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Callable, Mapping
from pathlib import Path

import dkim
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from dispatch.dkim_signing import ED25519, RSA, DkimSigningKey

DOMAIN = "herald.test"  # the From domain of the test campaigns
RSA_SELECTOR = "rsa2026"
ED25519_SELECTOR = "ed2026"
ED25519_SEED_B64 = base64.b64encode(bytes(range(32)))

Resolver = Callable[..., bytes | None]


@functools.cache
def rsa_pem(bits: int = 2048) -> bytes:
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def rsa_key() -> DkimSigningKey:
    return DkimSigningKey.load(selector=RSA_SELECTOR, domain=DOMAIN, algorithm=RSA, data=rsa_pem())


def ed25519_key() -> DkimSigningKey:
    return DkimSigningKey.load(
        selector=ED25519_SELECTOR, domain=DOMAIN, algorithm=ED25519, data=ED25519_SEED_B64
    )


def write_keys(directory: Path) -> dict[str, str]:
    """Both keys in files, and the environment that makes a worker sign with them."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "rsa.pem").write_bytes(rsa_pem())
    (directory / "ed25519.key").write_bytes(ED25519_SEED_B64 + b"\n")
    return {
        "HERALD_DKIM_SELECTOR": RSA_SELECTOR,
        "HERALD_DKIM_KEY_FILE": str(directory / "rsa.pem"),
        "HERALD_DKIM_DOMAIN": DOMAIN,
        "HERALD_DKIM_ED25519_SELECTOR": ED25519_SELECTOR,
        "HERALD_DKIM_ED25519_KEY_FILE": str(directory / "ed25519.key"),
    }


def resolver(records: Mapping[str, str]) -> Resolver:
    """dkimpy's ``dnsfunc``: ``<selector>._domainkey.<domain>`` → its TXT record.

    dkimpy asks with a trailing dot, as bytes; anything else is NXDOMAIN (None).
    """
    table = {
        f"{name.rstrip('.')}.".encode("ascii"): value.encode() for name, value in records.items()
    }

    def dnsfunc(name: bytes, timeout: int = 5) -> bytes | None:
        return table.get(name)

    return dnsfunc


def records_of(*keys: DkimSigningKey) -> dict[str, str]:
    return {key.dns_name: key.dns_record for key in keys}


def keys_resolver() -> Resolver:
    """The DNS in which both test keys are published."""
    return resolver(records_of(rsa_key(), ed25519_key()))


def signature_count(message: bytes) -> int:
    return len(re.findall(rb"(?im)^dkim-signature:", message.split(b"\r\n\r\n", 1)[0]))


def verifies(message: bytes, dnsfunc: Resolver, idx: int = 0) -> bool:
    """Whether signature ``idx`` (0 = topmost) verifies, as a receiver would check it."""
    if idx == 0:
        return bool(dkim.verify(message, dnsfunc=dnsfunc))
    try:
        return bool(dkim.DKIM(message).verify(idx=idx, dnsfunc=dnsfunc))
    except dkim.DKIMException:
        return False


def tags(message: bytes, idx: int = 0) -> dict[str, str]:
    """The tags of signature ``idx``, whitespace removed (h= as a list joined by ':')."""
    head = message.split(b"\r\n\r\n", 1)[0].decode("ascii")
    fields = re.findall(r"(?ims)^dkim-signature:(.*?)(?=^\S)", head + "\r\nX:")
    value = re.sub(r"\s+", "", fields[idx])
    return dict(part.split("=", 1) for part in value.split(";") if part)


def signed_headers(message: bytes, idx: int = 0) -> list[str]:
    return tags(message, idx)["h"].split(":")
