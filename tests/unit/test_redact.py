"""Credentials never leave through an error message (issue 7, item 9): the URL redaction, the
value redactor, and the settings parser, over hostile secrets (URL-special characters,
percent-encoding, controls, quotes, markup, non-ASCII)."""

from __future__ import annotations

import json
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch.egress.redact import MASK, Redactor, redact_url, url_secrets
from herald.errors import ConfigError
from herald.settings import Settings, parse_database_url, parse_smtp_url
from tests.support.examples import examples
from tests.support.hostile import HOSTILE, leaks


@given(secret=HOSTILE)
def test_redact_url_hides_an_encoded_password_anywhere(secret: str) -> None:
    enc = quote(secret, safe="")
    for url in (
        f"smtp://user:{enc}@relay.test:587?starttls=true",
        f"smtps://user:{enc}@relay.test",
        f"postgresql://herald:{enc}@db.test:5432/herald",
        f"https://{enc}@crm.test/export.csv",
        f"https://crm.test/export.csv?format=csv&access_token={enc}",
        f"https://crm.test/x?api-key={enc}#sig={enc}",
        f"postgresql://herald@db.test/herald?password={enc}",
    ):
        shown = redact_url(url)
        assert not leaks(shown, secret), (url, shown)
        assert MASK in shown


@given(secret=HOSTILE, port=st.sampled_from(["25", "notaport", "", "99999999"]))
def test_redact_url_hides_a_raw_password_even_when_it_breaks_the_url(
    secret: str, port: str
) -> None:
    # Unencoded '/', '?', '#' or '@' in a password cut the authority short: redact more.
    for scheme in ("smtp", "smtps", "postgresql"):
        url = f"{scheme}://user:{secret}@relay.test:{port}/x"
        assert not leaks(redact_url(url), secret), (url, redact_url(url))


@given(secret=HOSTILE, padding=st.text(max_size=40))
def test_redactor_scrubs_every_spelling(secret: str, padding: str) -> None:
    redact = Redactor([secret])
    spellings = [
        secret,
        quote(secret, safe=""),
        quote(secret, safe="").lower(),
        quote_plus(secret),
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
    ]
    for spelling in spellings:
        text = f"{padding}{spelling}{padding}"
        assert not leaks(redact(text), secret), spelling


@given(secret=HOSTILE, before=st.integers(0, 60), limit=st.integers(0, 60))
def test_redactor_head_never_cuts_a_secret_in_half(secret: str, before: int, limit: int) -> None:
    redact = Redactor([secret])
    text = "x" * before + secret + "y" * 10
    assert not leaks(redact.head(text, limit), secret)


def test_short_values_are_not_scrubbed_by_value() -> None:
    assert Redactor(["ab"])("a tab") == "a tab"
    assert redact_url("smtp://u:ab@h") == f"smtp://u:{MASK}@h"


def test_redact_url_keeps_what_is_not_secret() -> None:
    assert redact_url("sqlite:////tmp/a@b.db") == "sqlite:////tmp/a@b.db"
    assert redact_url("https://h.test/x?email=a@b.test&page=2") == (
        "https://h.test/x?email=a@b.test&page=2"
    )
    assert (
        redact_url("smtp://relay:587?insecure_auth=true") == "smtp://relay:587?insecure_auth=true"
    )
    assert redact_url("postgresql://herald@db/h") == "postgresql://herald@db/h"
    assert url_secrets("smtp://u:p%40ss@h") == ["p%40ss", "p@ss", "p%40ss", "p@ss"]


MALFORMED_SMTP = [
    "smtp://user:{p}@relay.test:{port}",
    "smtpx://user:{p}@relay.test:25",
    "smtp://user:{p}@relay.test:25?bogus=1",
    "smtp://user:{p}@relay.test:25?starttls=perhaps",
    "smtp://user:{p}@relay.test:25?timeout=soon",
    "smtp://user:{p}@:25",
    "smtps://user:{p}@relay.test?starttls=true",
]
MALFORMED_DATABASE = [
    "postgresql://herald:{p}@db.test:{port}/herald",
    "mysql://herald:{p}@db.test/herald",
    "postgresql://herald:{p}@db.test:99999/herald",
    "nonsense-with-{p}",
]


@settings(max_examples=examples(60))
@given(
    secret=HOSTILE,
    encode=st.booleans(),
    port=st.sampled_from(["x25", "2 5", "-1", "1e3", "٣"]),
    template=st.sampled_from(MALFORMED_SMTP),
)
def test_malformed_smtp_urls_are_config_errors_without_the_password(
    secret: str, encode: bool, port: str, template: str
) -> None:
    password = quote(secret, safe="") if encode else secret
    url = template.format(p=password, port=port)
    try:
        parse_smtp_url(url)
    except ConfigError as exc:
        assert exc.exit_code == 2
        assert exc.hint
        assert not leaks(exc.message + exc.hint, secret), exc.message
        assert "\n" not in exc.message
    # A raw secret can make a different, valid URL: then nothing is printed at all.


@settings(max_examples=examples(60))
@given(
    secret=HOSTILE,
    encode=st.booleans(),
    port=st.sampled_from(["x25", "2 5", "1e3"]),
    template=st.sampled_from(MALFORMED_DATABASE),
)
def test_malformed_database_urls_are_config_errors_without_the_password(
    secret: str, encode: bool, port: str, template: str
) -> None:
    password = quote(secret, safe="") if encode else secret
    url = template.format(p=password, port=port)
    try:
        parse_database_url(url)
    except ConfigError as exc:
        assert exc.exit_code == 2
        assert exc.hint
        assert not leaks(exc.message + exc.hint, secret), exc.message


def test_settings_from_env_checks_every_url() -> None:
    with pytest.raises(ConfigError, match="port"):
        Settings.from_env({"HERALD_SMTP_URL": "smtp://u:hunter22@relay:abc"})
    with pytest.raises(ConfigError, match="unsupported database"):
        Settings.from_env({"HERALD_DATABASE_URL": "mysql://u:hunter22@db/x"})
    assert Settings.from_env({}).smtp_url == "smtp://127.0.0.1:1025"
