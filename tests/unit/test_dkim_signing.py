"""DKIM signing (dispatch/dkim_signing.py): what is signed, how, and that tampering shows.

Every signature is checked the way a receiver checks it: dkimpy's verify against the TXT record
served by an injected resolver (tests/support/dkim_dns.py), never by comparing with our own
output.
"""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from dispatch.dkim_signing import (
    ED25519,
    RSA,
    DkimKeyError,
    DkimSigner,
    DkimSigningKey,
    header_list,
    txt_strings,
)
from dispatch.wire_form import wire_form
from tests.support.dkim_dns import (
    DOMAIN,
    ED25519_SEED_B64,
    ed25519_key,
    keys_resolver,
    rsa_key,
    rsa_pem,
    signature_count,
    signed_headers,
    tags,
    verifies,
)

AT = datetime(2026, 12, 3, 4, 5, 6, tzinfo=UTC)
MESSAGE = (
    b"From: News <news@herald.test>\r\n"
    b"To: alice@example.com\r\n"
    b"Subject: Hello\r\n"
    b"Date: Thu, 03 Dec 2026 04:05:06 +0000\r\n"
    b"Message-ID: <0123456789abcdef@herald.test>\r\n"
    b"MIME-Version: 1.0\r\n"
    b"X-Herald-Key: 0123456789abcdef0123456789abcdef\r\n"
    b"List-Unsubscribe: <https://mail.herald.test/u/1.k1.abc.def>, <mailto:unsub+x@herald.test>\r\n"
    b"List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Transfer-Encoding: 7bit\r\n"
    b"\r\n"
    b"Hello there.\r\n"
)


def both() -> DkimSigner:
    return DkimSigner([rsa_key(), ed25519_key()])


def test_both_signatures_verify_against_the_published_records() -> None:
    signed = both().sign(MESSAGE, AT)
    dns = keys_resolver()
    assert signature_count(signed) == 2
    assert verifies(signed, dns, 0)
    assert verifies(signed, dns, 1)
    assert (tags(signed, 0)["a"], tags(signed, 1)["a"]) == (RSA, ED25519)  # RSA on top
    assert signed.endswith(MESSAGE)  # the message itself is untouched


def test_the_tags_are_relaxed_without_a_body_length_and_stamped_at_t4() -> None:
    signed = both().sign(MESSAGE, AT)
    for idx in (0, 1):
        found = tags(signed, idx)
        assert found["c"] == "relaxed/relaxed"
        assert "l" not in found  # l= would let anyone append to a signed body
        assert found["d"] == DOMAIN
        assert found["t"] == str(int(AT.timestamp()))
        assert found["s"] in ("rsa2026", "ed2026")


def test_the_unsubscribe_headers_are_signed_and_the_important_ones_oversigned() -> None:
    h = signed_headers(both().sign(MESSAGE, AT))
    for name in ("list-unsubscribe", "list-unsubscribe-post", "from", "to", "subject"):
        assert h.count(name) == 2, name  # once for the field, once more to forbid a second
    for name in ("date", "message-id", "mime-version", "content-type", "x-herald-key"):
        assert name in h
    assert "content-transfer-encoding" in h


def test_the_header_list_follows_the_message() -> None:
    names = [b"From", b"To", b"Received", b"Subject", b"Date", b"X-Herald-Key", b"Bcc"]
    listed = [n.decode() for n in header_list(names)]
    assert "received" not in listed  # RFC 6376 §5.4.1: not a header to sign
    assert "bcc" not in listed
    assert listed.count("x-herald-key") == 1
    assert listed.count("from") == 2
    # Absent but oversigned: nobody can add them later.
    assert listed.count("list-unsubscribe-post") == 1
    assert "feedback-id" not in listed  # absent and not oversigned: not listed


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b"Subject: Hello", b"Subject: Hello!"),
        (b"To: alice@example.com", b"To: mallory@example.com"),
        (b"List-Unsubscribe-Post: List-Unsubscribe=One-Click", b"List-Unsubscribe-Post: x=y"),
        (b"Date: Thu, 03 Dec 2026 04:05:06", b"Date: Thu, 03 Dec 2026 04:05:07"),
        (b"<https://mail.herald.test/u/1.k1.abc.def>", b"<https://evil.test/u/1>"),
        (b"Hello there.", b"Hello there!"),
    ],
)
def test_altering_a_signed_header_or_the_body_fails_verification(old: bytes, new: bytes) -> None:
    signed = both().sign(MESSAGE, AT)
    assert old in signed
    altered = signed.replace(old, new, 1)
    dns = keys_resolver()
    assert not verifies(altered, dns, 0)
    assert not verifies(altered, dns, 1)


@pytest.mark.parametrize(
    "added",
    [
        b"From: ceo@herald.test\r\n",
        b"Subject: Urgent\r\n",
        b"List-Unsubscribe: <https://evil.test/u>\r\n",
        b"List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n",
        b"Reply-To: evil@evil.test\r\n",
        b"Cc: everyone@example.com\r\n",
    ],
)
def test_adding_a_second_copy_of_an_oversigned_header_fails(added: bytes) -> None:
    signed = both().sign(MESSAGE, AT)
    head, body = signed.split(b"\r\n\r\n", 1)
    tampered = head + b"\r\n" + added.rstrip(b"\r\n") + b"\r\n\r\n" + body
    assert not verifies(tampered, keys_resolver(), 0)
    assert not verifies(tampered, keys_resolver(), 1)


def test_appending_to_the_body_fails_and_an_unsigned_trace_header_does_not() -> None:
    signed = both().sign(MESSAGE, AT)
    dns = keys_resolver()
    assert not verifies(signed + b"Buy now!\r\n", dns)
    # What relays do on the way: prepend Received, re-fold/re-space headers (relaxed).
    relayed = b"Received: from relay.example by mx.example; Thu, 3 Dec 2026\r\n" + signed
    relayed = relayed.replace(b"Subject: Hello", b"Subject:   Hello  ")
    assert verifies(relayed, dns, 0)
    assert verifies(relayed, dns, 1)


def test_signing_is_deterministic_for_the_same_attempt() -> None:
    # An in-doubt re-read of the same attempt re-derives the message: same bytes.
    assert both().sign(MESSAGE, AT) == both().sign(MESSAGE, AT)


def test_a_message_without_its_date_is_not_signed() -> None:
    undated = re.sub(rb"Date: [^\r]*\r\n", b"", MESSAGE)
    with pytest.raises(ValueError, match="after its Date"):
        both().sign(undated, AT)


def test_the_wire_form_is_what_smtp_sends() -> None:
    from aiosmtplib.protocol import normalize_message_line_endings

    for raw in (b"a\nb\rc\r\nd", b"a\r\r\nb\n\n", b"no end", b"\r\n", b"a\r\nb\r\n", b"a\n\r"):
        assert wire_form(raw) == normalize_message_line_endings(raw)
        assert wire_form(wire_form(raw)) == wire_form(raw)


# ---------------------------------------------------------------------- keys


def test_rsa_keys_load_from_pkcs1_and_pkcs8_pem() -> None:
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    pkcs8 = load_pem_private_key(rsa_pem(), None).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    for data in (rsa_pem(), pkcs8):
        key = DkimSigningKey.load(selector="s", domain="Herald.Test", algorithm=RSA, data=data)
        assert key.domain == "herald.test"
        assert key.dns_record.startswith("v=DKIM1; k=rsa; p=MII")


def test_an_ed25519_key_loads_from_a_seed_or_a_pem_with_the_same_public_key() -> None:
    seed = base64.b64decode(ED25519_SEED_B64)
    pem = ed25519.Ed25519PrivateKey.from_private_bytes(seed).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    from_pem = DkimSigningKey.load(selector="ed2026", domain=DOMAIN, algorithm=ED25519, data=pem)
    assert from_pem.dns_record == ed25519_key().dns_record
    assert len(from_pem.public_key) == 32
    assert re.fullmatch(r"v=DKIM1; k=ed25519; p=[A-Za-z0-9+/]{43}=", from_pem.dns_record)


SECRETISH = b"TOPSECRETKEYMATERIAL"


@pytest.mark.parametrize(
    ("algorithm", "data", "problem"),
    [
        (RSA, b"", "readable PEM"),
        (RSA, b"-----BEGIN RSA PRIVATE KEY-----\n" + SECRETISH + b"\n-----END", "readable PEM"),
        (RSA, ED25519_SEED_B64, "readable PEM"),
        (ED25519, rsa_pem(), "not hold an Ed25519"),
        (ED25519, base64.b64encode(b"short"), "32 bytes"),
        (ED25519, SECRETISH + b"!", "base64 of a 32-byte"),
    ],
)
def test_an_unusable_key_is_refused_without_showing_it(
    algorithm: str, data: bytes, problem: str
) -> None:
    with pytest.raises(DkimKeyError, match=problem) as caught:
        DkimSigningKey.load(selector="s", domain=DOMAIN, algorithm=algorithm, data=data)
    assert SECRETISH.decode() not in str(caught.value)
    assert caught.value.__cause__ is None or not str(caught.value.__cause__)


def test_an_ed25519_pem_given_as_rsa_is_refused() -> None:
    pem = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with pytest.raises(DkimKeyError, match="not hold an RSA"):
        DkimSigningKey.load(selector="s", domain=DOMAIN, algorithm=RSA, data=pem)


def test_an_encrypted_key_is_refused_clearly() -> None:
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    encrypted = load_pem_private_key(rsa_pem(), None).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase"),
    )
    with pytest.raises(DkimKeyError, match="encrypted"):
        DkimSigningKey.load(selector="s", domain=DOMAIN, algorithm=RSA, data=encrypted)


@pytest.mark.parametrize("selector", ["", "a b", "x;y", "-lead", "a..b"])
def test_a_selector_that_is_not_a_dns_name_is_refused(selector: str) -> None:
    with pytest.raises(DkimKeyError, match="selector"):
        DkimSigningKey.load(
            selector=selector, domain=DOMAIN, algorithm=ED25519, data=ED25519_SEED_B64
        )


def test_a_key_shows_no_key_material_in_its_repr() -> None:
    key = rsa_key()
    shown = repr(key) + repr(DkimSigner([key]).keys)
    assert "rsa2026" in shown
    assert "MII" not in shown
    assert "modulus" not in shown
    assert "private" not in shown.lower()


def test_a_long_record_is_cut_into_255_byte_strings() -> None:
    record = rsa_key().dns_record
    strings = txt_strings(record)
    assert len(record) > 255
    assert all(len(s) <= 255 for s in strings)
    assert "".join(strings) == record


def test_the_key_loaders_algorithm_name_is_the_signers() -> None:
    # herald.dkim_keys spells it out so as not to import the signer at start-up.
    from herald import dkim_keys

    assert dkim_keys.RSA == RSA
