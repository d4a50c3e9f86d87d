"""DKIM signatures over the exact bytes that go on the wire (RFC 6376, RFC 8301, RFC 8463).

The SMTP transport signs a message after its ``Date`` is stamped (``dispatch.message_date``)
and after its line endings are what DATA transmits, so nothing changes a signed byte later.
dkimpy parses, canonicalises and hashes (the code its verifier runs); OpenSSL, through
``cryptography``, does the private-key operation; this module decides the tags:

- ``c=relaxed/relaxed`` (survives relays that re-fold headers or trim trailing spaces), no
  ``l=`` (a body length would let anyone append content to a signed message);
- an explicit ``h=``: each header that matters once per occurrence, and the ones a forger
  would want to add (From, To, Cc, Reply-To, Subject, Date, Message-ID and both
  List-Unsubscribe headers) once more — "oversigned": an added copy breaks the signature.
  dkimpy's default omits ``List-Unsubscribe-Post``, which RFC 8058 requires to be signed;
- ``t=`` is the moment the job crossed T4, not the clock at signing: a re-read of the same
  attempt therefore signs to identical bytes (RSA PKCS#1 v1.5 and Ed25519 are deterministic).

Keys are parsed once (``DkimSigningKey.load``), from bytes: reading files and reporting a bad
setting is the shell's job (``herald.dkim_keys``). No error message ever holds key material.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import dkim
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed
from dkim.canonicalization import CanonicalizationPolicy

from dispatch.wire_form import wire_form

RSA = "rsa-sha256"
ED25519 = "ed25519-sha256"
ALGORITHMS = (RSA, ED25519)
MIN_RSA_BITS = 1024  # RFC 8301 §3.2: MUST be at least 1024 (verifiers reject shorter)
_CANONICALIZE = b"relaxed/relaxed"

# RFC 6376 §5.4.1 and the headers a receiver or a unsubscribe button relies on. Signed once for
# every occurrence in the message (absent ones are not listed, except when oversigned).
SIGNED_HEADERS = (
    "from",
    "sender",
    "reply-to",
    "to",
    "cc",
    "subject",
    "date",
    "message-id",
    "in-reply-to",
    "references",
    "mime-version",
    "content-type",
    "content-transfer-encoding",
    "list-id",
    "list-unsubscribe",
    "list-unsubscribe-post",
    "list-help",
    "list-subscribe",
    "list-post",
    "list-owner",
    "list-archive",
    "feedback-id",
    "x-herald-key",
)
# Listed once more than they occur (even when absent): no copy of these can be added later.
OVERSIGNED_HEADERS = (
    "from",
    "to",
    "cc",
    "reply-to",
    "subject",
    "date",
    "message-id",
    "list-unsubscribe",
    "list-unsubscribe-post",
)


class DkimKeyError(ValueError):
    """A key that cannot sign. The message describes the problem, never the key."""


def header_list(names: Sequence[bytes]) -> list[bytes]:
    """The ``h=`` list for a message whose header field names are ``names`` (any case)."""
    present = Counter(name.decode("ascii", "replace").strip().lower() for name in names)
    signed: list[str] = []
    for name in SIGNED_HEADERS:
        signed.extend([name] * present[name])
    signed.extend(OVERSIGNED_HEADERS)
    return [name.encode("ascii") for name in signed]


@dataclass(frozen=True)
class DkimSigningKey:
    """A parsed private key with its selector and domain (``s=`` and ``d=``).

    ``repr`` shows neither the key nor its parsed form, so a log line or a traceback that
    prints one leaks nothing.
    """

    selector: str
    domain: str
    algorithm: str  # rsa-sha256 | ed25519-sha256
    public_key: bytes = field(repr=False)  # DER SubjectPublicKeyInfo (rsa) or raw 32 bytes
    _private: rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey = field(repr=False, compare=False)

    @classmethod
    def load(cls, *, selector: str, domain: str, algorithm: str, data: bytes) -> DkimSigningKey:
        """Parse ``data``: a PEM RSA key (PKCS#1 or PKCS#8), or for Ed25519 the base64 of the
        32-byte seed (what dkimpy and ``herald dkim keygen`` write) or a PKCS#8 PEM.

        The key signs a sample message that dkimpy then verifies against the key's own record,
        so a key that cannot sign fails here, at worker start, not on the first send.
        """
        if algorithm not in ALGORITHMS:
            raise DkimKeyError(f"unknown DKIM algorithm {algorithm!r} (one of {ALGORITHMS})")
        _check_label(selector, "selector")
        _check_label(domain, "domain")
        private: rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey
        if algorithm == RSA:
            private, public = _load_rsa(data)
        else:
            private, public = _load_ed25519(data)
        key = cls(selector, domain.lower(), algorithm, public, private)
        key._self_test()
        return key

    @property
    def dns_name(self) -> str:
        return f"{self.selector}._domainkey.{self.domain}"

    @property
    def dns_record(self) -> str:
        """The TXT record to publish at ``dns_name`` (one string; see ``txt_strings``)."""
        kind = "rsa" if self.algorithm == RSA else "ed25519"
        return f"v=DKIM1; k={kind}; p={base64.b64encode(self.public_key).decode('ascii')}"

    def signature(self, message: bytes, at: datetime) -> bytes:
        """The ``DKIM-Signature:`` field (CRLF-terminated) for ``message``, ``t=`` = ``at``."""
        return _sign_message(message, self, at)

    def _sign_digest(self, digest: bytes) -> bytes:
        """RSASSA-PKCS1-v1_5 over a SHA-256 digest (RFC 6376 §3.3.1), or Ed25519 over the
        digest itself (RFC 8463 §3: the signed data is the SHA-256 hash, not the header)."""
        if isinstance(self._private, rsa.RSAPrivateKey):
            return self._private.sign(digest, padding.PKCS1v15(), Prehashed(hashes.SHA256()))
        signature: bytes = self._private.sign(digest)
        return signature

    def _self_test(self) -> None:
        sample = wire_form(
            b"From: a@" + self.domain.encode("ascii") + b"\r\nSubject: key check\r\n"
            b"Date: Thu, 01 Jan 2026 00:00:00 +0000\r\n\r\nkey check\r\n"
        )
        try:
            signed = self.signature(sample, datetime(2026, 1, 1, tzinfo=UTC)) + sample
        except Exception:
            raise DkimKeyError("this key cannot sign") from None
        record = self.dns_record.encode("ascii")
        if not dkim.verify(signed, dnsfunc=lambda name, timeout=5: record):
            raise DkimKeyError("a signature made with this key does not verify")


class DkimSigner:
    """Signs with every configured key: the first key's signature ends up topmost (index 0),
    which is the one a verifier that checks only one signature checks (RSA is listed first)."""

    def __init__(self, keys: Sequence[DkimSigningKey]) -> None:
        if not keys:
            raise ValueError("a DkimSigner needs at least one key")
        self.keys = tuple(keys)

    def sign(self, message: bytes, at: datetime) -> bytes:
        """``message`` in its wire form with one signature per key prepended.

        Each signature covers the message alone (``DKIM-Signature`` is never in ``h=``), so
        they are independent: either verifies whatever the other does.
        """
        wire = wire_form(message)
        # Parsed and body-hashed once for all keys: canonicalising the body is most of the cost.
        parsed = dkim.DKIM(wire)
        body_hash = _body_hash(parsed)
        signatures = [_sign_parsed(parsed, body_hash, key, at) for key in self.keys]
        return b"".join(signatures) + wire


_POLICY = CanonicalizationPolicy.from_c_value(_CANONICALIZE)


def _sign_message(message: bytes, key: DkimSigningKey, at: datetime) -> bytes:
    parsed = dkim.DKIM(message)
    return _sign_parsed(parsed, _body_hash(parsed), key, at)


def _body_hash(parsed: dkim.DKIM) -> bytes:
    return hashlib.sha256(_POLICY.canonicalize_body(parsed.body)).digest()


def _sign_parsed(parsed: dkim.DKIM, body_hash: bytes, key: DkimSigningKey, at: datetime) -> bytes:
    """The ``DKIM-Signature:`` field for the ``parsed`` message, CRLF-terminated.

    dkimpy parses the message, canonicalises and selects the headers (its ``hash_headers``, the
    same code its ``verify`` runs); the tags are ours (dkimpy's ``sign`` stamps ``t=`` from the
    clock), and the private-key operation is OpenSSL's through ``cryptography``: dkimpy's RSA
    is pure Python, about 7 ms a message, all of it blocking the worker's event loop.
    """
    names = [name for name, _ in parsed.headers]
    if not any(name.lower() == b"date" for name in names):
        # The Date is part of what is signed; stamping it later would break the signature.
        raise ValueError("sign a message only after its Date is stamped")
    include = header_list(names)
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    fields = [
        (b"v", b"1"),
        (b"a", key.algorithm.encode("ascii")),
        (b"c", _CANONICALIZE),
        (b"d", key.domain.encode("ascii")),
        (b"s", key.selector.encode("ascii")),
        (b"t", str(int(aware.timestamp())).encode("ascii")),
        (b"h", b" : ".join(include)),
        (b"bh", base64.b64encode(body_hash)),
        # A placeholder long enough that b= folds onto its own line (as dkimpy does), so
        # filling it in never re-folds the tags before it.
        (b"b", b"0" * 60),
    ]
    name = b"DKIM-Signature"
    unsigned = dkim.fold(b"; ".join(b"=".join(f) for f in fields), namelen=len(name))
    # RFC 6376 §3.7: the header hash ends with this field, its b= empty and no final CRLF.
    hasher = hashlib.sha256()
    headers = _POLICY.canonicalize_headers(parsed.headers)
    dkim.hash_headers(hasher, _POLICY, headers, include, (name, b" " + unsigned), dict(fields))
    fields[-1] = (b"b", base64.b64encode(key._sign_digest(hasher.digest())))
    signed: bytes = dkim.fold(b"; ".join(b"=".join(f) for f in fields) + b"\r\n", namelen=len(name))
    return name + b": " + signed


def txt_strings(record: str, limit: int = 255) -> list[str]:
    """``record`` cut into the ≤255-byte character-strings of one TXT record (RFC 6376
    §3.6.2.2: a verifier concatenates them without whitespace)."""
    return [record[i : i + limit] for i in range(0, len(record), limit)]


_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,251}[A-Za-z0-9_])?")


def _check_label(value: str, what: str) -> None:
    if not _LABEL.fullmatch(value) or ".." in value:
        raise DkimKeyError(f"the DKIM {what} {value!r} is not a DNS name")


def _load_rsa(data: bytes) -> tuple[rsa.RSAPrivateKey, bytes]:
    key = _load_pem(data)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise DkimKeyError("the file does not hold an RSA private key")
    if key.key_size < MIN_RSA_BITS:
        raise DkimKeyError(
            f"the RSA key has {key.key_size} bits; RFC 8301 requires at least"
            f" {MIN_RSA_BITS} (2048 recommended)"
        )
    public = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return key, public


def _load_ed25519(data: bytes) -> tuple[ed25519.Ed25519PrivateKey, bytes]:
    text = data.strip()
    if text.startswith(b"-----BEGIN"):
        key = _load_pem(text)
        if not isinstance(key, ed25519.Ed25519PrivateKey):
            raise DkimKeyError("the file does not hold an Ed25519 private key")
        seed = key.private_bytes_raw()
    else:
        try:
            seed = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise DkimKeyError(
                "expected the base64 of a 32-byte Ed25519 seed, or a PEM private key"
            ) from None
        if len(seed) != 32:
            raise DkimKeyError(f"an Ed25519 seed has 32 bytes, this one {len(seed)}")
    private = ed25519.Ed25519PrivateKey.from_private_bytes(seed)
    return private, private.public_key().public_bytes_raw()


def _load_pem(data: bytes) -> PrivateKeyTypes:
    try:
        return serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise DkimKeyError("the private key is encrypted; give it unencrypted") from None
    except (ValueError, UnsupportedAlgorithm):
        raise DkimKeyError("the file does not hold a readable PEM private key") from None
