"""Webhook signature checks on hostile input: a refusal (``Refused``), never anything else."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given, settings
from hypothesis import strategies as st

from herald.serve.provider_auth import (
    Refused,
    SnsVerifier,
    load_sendgrid_key,
    sns_url_ok,
    verify_basic,
    verify_mailgun,
    verify_sendgrid,
)
from tests.support.examples import examples

KEY = ec.generate_private_key(ec.SECP256R1()).public_key()
DER = base64.b64encode(
    KEY.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
).decode()
NOW = 1_800_000_000.0
_fuzz = settings(max_examples=examples(200), deadline=None)
text = st.text(max_size=80)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=16), children, max_size=6)
    ),
    max_leaves=20,
)


def refused_or_ok(call: Any) -> None:
    try:
        call()
    except Refused as exc:
        assert exc.status in (400, 401, 403)


def test_the_sendgrid_key_loads_from_base64_der_or_pem() -> None:
    pem = KEY.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    assert load_sendgrid_key(DER).public_numbers() == KEY.public_numbers()
    assert load_sendgrid_key(pem).public_numbers() == KEY.public_numbers()


@_fuzz
@given(signature=st.none() | text, timestamp=st.none() | text, body=st.binary(max_size=200))
def test_sendgrid_garbage_is_refused(signature, timestamp, body) -> None:
    refused_or_ok(lambda: verify_sendgrid(KEY, signature, timestamp, body, NOW))


@_fuzz
@given(json_values)
def test_mailgun_garbage_is_refused(signature) -> None:
    refused_or_ok(lambda: verify_mailgun("key", signature, NOW))
    refused_or_ok(
        lambda: verify_mailgun("key", {"timestamp": "9" * 400, "token": "t", "signature": "s"}, NOW)
    )


@_fuzz
@given(st.none() | text)
def test_basic_auth_garbage_is_refused(header) -> None:
    refused_or_ok(lambda: verify_basic("user:pass", header))


@_fuzz
@given(text)
def test_sns_url_check_never_raises(url) -> None:
    assert sns_url_ok(url, pem=True) in (True, False)
    assert sns_url_ok("https://" + url, pem=False) in (True, False)


@_fuzz
@given(st.dictionaries(st.sampled_from(
    ["Type", "TopicArn", "SignatureVersion", "SigningCertURL", "Signature", "Message",
     "MessageId", "Timestamp", "Subject", "Token", "SubscribeURL"]
), json_values))  # fmt: skip
def test_sns_garbage_is_refused_without_a_fetch(message) -> None:
    fetched: list[str] = []

    async def fetch(url: str) -> bytes:
        fetched.append(url)
        return b"not a certificate"

    verifier = SnsVerifier(("arn:aws:sns:us-east-1:1:t",), fetch)
    refused_or_ok(lambda: asyncio.run(verifier.verify(message, NOW)))
    assert fetched == []  # no allowed topic in the garbage: nothing fetched


@_fuzz
@given(st.dictionaries(st.sampled_from(
    ["Type", "SignatureVersion", "Signature", "Message", "MessageId", "Timestamp", "Subject",
     "Token", "SubscribeURL"]
), json_values), st.binary(max_size=100))  # fmt: skip
def test_sns_garbage_on_an_allowed_topic_is_refused(message, pem: bytes) -> None:
    async def fetch(url: str) -> bytes:
        return pem

    topic = "arn:aws:sns:us-east-1:1:t"
    message = {
        **message,
        "TopicArn": topic,
        "SigningCertURL": "https://sns.us-east-1.amazonaws.com/c.pem",
    }
    verifier = SnsVerifier((topic,), fetch)
    refused_or_ok(lambda: asyncio.run(verifier.verify(message, NOW)))
