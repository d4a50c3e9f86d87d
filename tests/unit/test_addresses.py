"""Address normalisation and mailbox parsing (campaigns.addresses)."""

from __future__ import annotations

import pytest

from campaigns.addresses import (
    AddressError,
    Mailbox,
    make_mailbox,
    normalise_address,
    parse_mailbox,
)

VALID: list[tuple[str, str]] = [
    ("user@example.com", "user@example.com"),
    ("  user@example.com\t", "user@example.com"),
    ("User@EXAMPLE.COM", "User@example.com"),
    ("First.Last@Example.Org", "First.Last@example.org"),
    ("user+tag@example.com", "user+tag@example.com"),
    ("o'brien@example.ie", "o'brien@example.ie"),
    ("a!#$%&'*+/=?^_`{|}~-z@example.com", "a!#$%&'*+/=?^_`{|}~-z@example.com"),
    ("user@sub.domain.example.co.uk", "user@sub.domain.example.co.uk"),
    ("user@Bücher.example", "user@xn--bcher-kva.example"),
    ("user@BÜCHER.example", "user@xn--bcher-kva.example"),
    ("user@例え.テスト", "user@xn--r8jz45g.xn--zckzah"),
    ("user@xn--bcher-kva.example", "user@xn--bcher-kva.example"),
    ('"john doe"@example.com', '"john doe"@example.com'),
    ('"a@b"@example.com', '"a@b"@example.com'),
    ('"quote\\"inside"@example.com', '"quote\\"inside"@example.com'),
    ("x@a-b.example", "x@a-b.example"),
    ("1234@example.com", "1234@example.com"),
    ("a" * 64 + "@example.com", "a" * 64 + "@example.com"),
    ("user@example。com", "user@example.com"),  # ideographic full stop maps to a dot (UTS #46)
]

INVALID: list[tuple[str, str]] = [
    ("", "address is empty"),
    ("   ", "address is empty"),
    ("userexample.com", "missing '@'"),
    ("a@b@example.com", "more than one '@'"),
    ("bob@", "domain is empty"),
    ("@example.com", "local part is empty"),
    ('""@example.com', "local part is empty"),
    ("user@localhost", "domain has no dot"),
    ("user@example.com.", "domain ends with a dot"),
    ("user@example..com", "invalid domain"),
    ("user@-example.com", "invalid domain"),
    ("user@exa_mple.com", "invalid domain"),
    ("user@[192.0.2.1]", "address literals"),
    ("user@192.0.2.1", "looks like an IP address"),
    (".user@example.com", "empty dot-separated part"),
    ("user.@example.com", "empty dot-separated part"),
    ("us..er@example.com", "empty dot-separated part"),
    ("john doe@example.com", "space in local part"),
    ("user@exa mple.com", "space in domain"),
    ("us(er@example.com", "invalid character '('"),
    ("üser@example.com", "non-ASCII local part"),
    ("user@example.com\r\nBcc: victim@example.com", "header injection"),
    ("user@example.com\n", "header injection"),
    ("user\x00@example.com", "NUL character"),
    ('"unterminated@example.com', "unterminated quoted local part"),
    ('"abc"x@example.com', "must be followed by '@'"),
    ("a" * 65 + "@example.com", "local part is longer than 64"),
    ("user@" + "a" * 64 + ".com", "invalid domain"),
    ("a" * 64 + "@" + ".".join(["b" * 49] * 4) + ".com", "longer than 254"),
    ("user@" + ".".join(["a" * 60] * 5) + ".com", "domain is longer than 253"),
    ("user@" + ".".join(["ü" * 60] * 5) + ".com", "invalid domain"),
]


@pytest.mark.parametrize(("raw", "expected"), VALID)
def test_valid_addresses_are_normalised(raw: str, expected: str) -> None:
    assert normalise_address(raw) == expected


@pytest.mark.parametrize(("raw", "reason"), INVALID)
def test_invalid_addresses_are_rejected_with_a_reason(raw: str, reason: str) -> None:
    with pytest.raises(AddressError) as caught:
        normalise_address(raw)
    assert reason in str(caught.value)


def test_address_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="missing '@'"):
        normalise_address("nope")


@pytest.mark.parametrize(("raw", "expected"), VALID)
def test_normalisation_is_idempotent(raw: str, expected: str) -> None:
    assert normalise_address(normalise_address(raw)) == expected


MAILBOXES: list[tuple[str, Mailbox]] = [
    ("news@Acme.Example", Mailbox("news@acme.example", None)),
    ("Acme News <news@acme.example>", Mailbox("news@acme.example", "Acme News")),
    ("  Acme News   <News@ACME.example>  ", Mailbox("News@acme.example", "Acme News")),
    ('"Doe, Jane" <jane@example.com>', Mailbox("jane@example.com", "Doe, Jane")),
    ('"Say \\"hi\\"" <hi@example.com>', Mailbox("hi@example.com", 'Say "hi"')),
    ("<bare@example.com>", Mailbox("bare@example.com", None)),
    ("Bücher <info@Bücher.example>", Mailbox("info@xn--bcher-kva.example", "Bücher")),
]


@pytest.mark.parametrize(("raw", "expected"), MAILBOXES)
def test_parse_mailbox(raw: str, expected: Mailbox) -> None:
    assert parse_mailbox(raw) == expected


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("Acme\r\nBcc: x@example.com <news@acme.example>", "header injection: line break in"),
        ("Acme <news@acme.example>\n", "header injection: line break in"),
        ("Acme <news@acme.example", "'<' without a closing '>'"),
        ('"Unterminated <news@acme.example>', "unterminated quoted display name"),
        ('Bad"Quote <news@acme.example>', "quote the whole name"),
        ("Acme <bob@>", "domain is empty"),
        ("Acme\x07Bell <news@acme.example>", "control character in display name"),
    ],
)
def test_parse_mailbox_rejects(raw: str, reason: str) -> None:
    with pytest.raises(AddressError) as caught:
        parse_mailbox(raw)
    assert reason in str(caught.value)


def test_mailbox_domain_is_the_normalised_domain() -> None:
    assert parse_mailbox("Shop <sales@Bücher.Example>").domain() == "xn--bcher-kva.example"


def test_make_mailbox_checks_name_and_blanks_empty_name() -> None:
    assert make_mailbox("a@example.com", "  ") == Mailbox("a@example.com", None)
    with pytest.raises(AddressError, match="header injection"):
        make_mailbox("a@example.com", "Evil\rName")
