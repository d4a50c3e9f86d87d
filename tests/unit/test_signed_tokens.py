"""Signed tokens: round trips, rotation, and refusal of every alteration (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.signed_tokens import (
    BadToken,
    SigningKeyError,
    SigningKeys,
    address_token,
    read_address_token,
    read_unsubscribe_token,
    unsubscribe_token,
)

OLD = SigningKeys.parse("k1:0123456789abcdef-old")
ROTATED = SigningKeys.parse("k2:fedcba9876543210-new,k1:0123456789abcdef-old")
RETIRED = SigningKeys.parse("k2:fedcba9876543210-new")
KEY = "ab" * 32

mailboxes = st.text(min_size=1, max_size=80).filter(lambda s: "\x1f" not in s)
scopes = st.sampled_from(["global", "list:news", "list:a.b-c_d"])


@given(mailbox=mailboxes, scope=scopes)
def test_unsubscribe_token_round_trips_and_is_url_safe(mailbox: str, scope: str) -> None:
    token = unsubscribe_token(ROTATED, mailbox=mailbox, scope=scope, campaign="weekly")
    assert set(token) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
    claim = read_unsubscribe_token(ROTATED, token)
    assert (claim.mailbox, claim.scope, claim.campaign, claim.kid) == (
        mailbox,
        scope,
        "weekly",
        "k2",
    )


def test_rotation_old_tokens_stay_valid_until_their_key_is_removed() -> None:
    token = unsubscribe_token(OLD, mailbox="ann@example.org", scope="list:news", campaign="c")
    assert read_unsubscribe_token(ROTATED, token).kid == "k1"
    with pytest.raises(BadToken):
        read_unsubscribe_token(RETIRED, token)


@given(data=st.data())
def test_any_altered_unsubscribe_token_is_refused(data: st.DataObject) -> None:
    token = unsubscribe_token(ROTATED, mailbox="ann@example.org", scope="list:n", campaign="c")
    position = data.draw(st.integers(0, len(token) - 1))
    replacement = data.draw(st.sampled_from("AaZz09-_.x"))
    altered = token[:position] + replacement + token[position + 1 :]
    if altered == token:
        return
    with pytest.raises(BadToken):
        read_unsubscribe_token(ROTATED, altered)


@given(garbage=st.text(max_size=300))
def test_garbage_is_refused_not_crashed(garbage: str) -> None:
    with pytest.raises(BadToken):
        read_unsubscribe_token(ROTATED, garbage)
    with pytest.raises(BadToken):
        read_address_token(ROTATED, "bounce", garbage)


@given(key=st.text("0123456789abcdef", min_size=64, max_size=64))
def test_address_token_fits_a_local_part_and_survives_upper_casing(key: str) -> None:
    token = address_token(ROTATED, "bounce", key)
    assert token == token.lower()
    assert len("bounce+" + token) <= 64
    assert read_address_token(ROTATED, "bounce", token.upper()) == key[:16]


def test_a_bounce_token_is_not_an_unsubscribe_token() -> None:
    token = address_token(ROTATED, "bounce", KEY)
    with pytest.raises(BadToken):
        read_address_token(ROTATED, "unsub", token)


@pytest.mark.parametrize(
    "text",
    ["", "k1", "K1:0123456789abcdef", "k1:short", "k1:0123456789abcdef,k1:0123456789abcdef"],
)
def test_malformed_key_rings_are_refused_without_echoing_secrets(text: str) -> None:
    with pytest.raises(SigningKeyError) as caught:
        SigningKeys.parse(text)
    assert "0123456789abcdef" not in str(caught.value)
