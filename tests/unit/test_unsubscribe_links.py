"""List-Unsubscribe at composition: which messages get the headers, what they hold, and what
``{{ unsubscribe_url }}`` does with and without the settings (StrictUndefined: a clear error)."""

from __future__ import annotations

import contextlib
import email
import email.policy
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from campaigns.addresses import mailbox_identity
from campaigns.audience import Recipient, iter_audience
from campaigns.spec import LoadedCampaign, load_campaign
from dispatch.signed_tokens import (
    BadToken,
    SigningKeys,
    read_address_token,
    read_unsubscribe_token,
    unsubscribe_token,
)
from herald.app.unsubscribe import links_from_env, warning
from herald.errors import ConfigError
from scheduler.check import check_campaign
from scheduler.compose import compile_steps, compose_job
from scheduler.unsubscribe_links import UnsubscribeLinks
from tests.support.examples import examples

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
KEYS = SigningKeys.parse("k2:new-secret-0123456789,k1:old-secret-0123456789")
LINKS = UnsubscribeLinks(KEYS, "https://u.example.com", "unsub.example.com")

CAMPAIGN = """\
name: news-2026
from: "News <news@acme.example>"
{extra}audience: [{{email: Ann.Lee@Example.COM, name: Ann}}, {{email: bob@example.com{column}}}]
steps:
  - id: hello
    subject: "Hello"
    html: '<p>Hi</p>{html}'
"""


def load(tmp_path: Path, *, extra: str = "", html: str = "", column: str = "") -> LoadedCampaign:
    path = tmp_path / "c.yaml"
    path.write_text(CAMPAIGN.format(extra=extra, html=html, column=column), encoding="utf-8")
    return load_campaign(path)


def compose_all(loaded: LoadedCampaign, links: UnsubscribeLinks | None) -> list[bytes]:
    (step,) = compile_steps(loaded, links)
    recipients = [r for r in iter_audience(loaded) if isinstance(r, Recipient)]
    return [compose_job(loaded, step, r, NOW).payload for r in recipients]


def headers_of(payload: bytes) -> email.message.EmailMessage:
    message = email.message_from_bytes(payload, policy=email.policy.SMTP)
    assert isinstance(message, email.message.EmailMessage)
    return message


def test_marketing_message_carries_both_headers_with_signed_https_and_mailto(
    tmp_path: Path,
) -> None:
    loaded = load(tmp_path, extra="list: newsletter\n")
    payload = compose_all(loaded, LINKS)[0]
    message = headers_of(payload)
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert len(message.get_all("List-Unsubscribe") or []) == 1
    found = re.fullmatch(
        r"<https://u\.example\.com/u/([^>]+)>, "
        r"<mailto:unsub\+([a-z0-9.]+)@unsub\.example\.com\?subject=unsubscribe>",
        str(message["List-Unsubscribe"]),
    )
    assert found is not None, message["List-Unsubscribe"]
    claim = read_unsubscribe_token(KEYS, found[1])
    assert claim.mailbox == mailbox_identity("Ann.Lee@Example.COM")
    assert (claim.scope, claim.campaign, claim.kid) == ("list:newsletter", "news-2026", "k2")
    key = str(message["X-Herald-Key"])
    assert read_address_token(KEYS, "unsub", found[2]) == key[:16]
    # Written verbatim on one line (never an RFC 2047 word a client would not decode).
    assert b"\r\nList-Unsubscribe: <https://u.example.com/u/" in payload


def test_https_only_without_an_unsubscribe_domain_and_scope_defaults_to_the_campaign(
    tmp_path: Path,
) -> None:
    links = UnsubscribeLinks(KEYS, "https://u.example.com")
    message = headers_of(compose_all(load(tmp_path), links)[1])
    value = str(message["List-Unsubscribe"])
    assert value.startswith("<https://u.example.com/u/")
    assert "mailto" not in value
    token = value.removeprefix("<https://u.example.com/u/").removesuffix(">")
    assert read_unsubscribe_token(KEYS, token).scope == "list:news-2026"


def test_unsubscribe_url_in_the_body_is_the_header_link(tmp_path: Path) -> None:
    loaded = load(tmp_path, html='<a href="{{ unsubscribe_url }}">unsubscribe</a>')
    message = headers_of(compose_all(loaded, LINKS)[0])
    url = str(message["List-Unsubscribe"]).split(">")[0].removeprefix("<")
    html = message.get_body(("html",))
    assert html is not None
    assert f'<a href="{url}">unsubscribe</a>' in html.get_content()


def test_composing_twice_gives_the_same_bytes(tmp_path: Path) -> None:
    loaded = load(tmp_path, html="{{ unsubscribe_url }}")
    assert compose_all(loaded, LINKS) == compose_all(loaded, LINKS)


def test_transactional_messages_get_no_headers_and_no_url(tmp_path: Path) -> None:
    loaded = load(tmp_path, extra="transactional: true\n")
    for payload in compose_all(loaded, LINKS):
        assert b"List-Unsubscribe" not in payload
    with_url = load(tmp_path, extra="transactional: true\n", html="{{ unsubscribe_url }}")
    report = check_campaign(with_url, NOW, links=LINKS)
    assert report.problem_count == 2
    assert "a transactional campaign carries no unsubscribe link" in report.problems[0].error


def test_without_settings_no_headers_and_a_template_using_the_url_fails_validate(
    tmp_path: Path,
) -> None:
    for payload in compose_all(load(tmp_path), None):
        assert b"List-Unsubscribe" not in payload
    report = check_campaign(load(tmp_path, html="{{ unsubscribe_url }}"), NOW)
    assert report.problem_count == 2
    assert "set HERALD_SIGNING_KEYS and HERALD_PUBLIC_URL" in report.problems[0].error
    # A template can ask instead of failing.
    guarded = '{% if unsubscribe_url is defined %}<a href="{{ unsubscribe_url }}">u</a>{% endif %}'
    assert check_campaign(load(tmp_path, html=guarded), NOW).ok
    assert b"u.example.com/u/" in compose_all(load(tmp_path, html=guarded), LINKS)[0]


def test_an_audience_column_supplies_the_url_only_when_herald_makes_none(tmp_path: Path) -> None:
    loaded = load(
        tmp_path,
        html="[{{ unsubscribe_url }}]",
        column=", unsubscribe_url: 'https://crm.example/out'",
    )
    (step,) = compile_steps(loaded)
    bob = [r for r in iter_audience(loaded) if isinstance(r, Recipient)][1]
    assert b"[https://crm.example/out]" in compose_job(loaded, step, bob, NOW).payload
    (linked,) = compile_steps(loaded, LINKS)
    assert b"crm.example" not in compose_job(loaded, linked, bob, NOW).payload


def test_settings_from_the_environment() -> None:
    assert links_from_env({}) is None
    assert links_from_env({"HERALD_SIGNING_KEYS": "k1:0123456789abcdef"}) is None
    links = links_from_env(
        {
            "HERALD_SIGNING_KEYS": "k1:0123456789abcdef",
            "HERALD_PUBLIC_URL": "https://u.example.com/",
            "HERALD_UNSUBSCRIBE_DOMAIN": "Unsub.Example.com",
        }
    )
    assert links is not None
    assert (links.public_url, links.mailto_domain) == ("https://u.example.com", "unsub.example.com")
    with pytest.raises(ConfigError, match="HERALD_SIGNING_KEYS"):
        links_from_env({"HERALD_SIGNING_KEYS": "short:x", "HERALD_PUBLIC_URL": "https://u.x"})
    with pytest.raises(ConfigError, match="https"):
        links_from_env(
            {"HERALD_SIGNING_KEYS": "k1:0123456789abcdef", "HERALD_PUBLIC_URL": "http://u.x"}
        )


def test_warning_for_marketing_campaigns_without_settings(tmp_path: Path) -> None:
    said = warning(load(tmp_path), {"HERALD_PUBLIC_URL": "https://u.example.com"})
    assert said is not None
    assert "HERALD_SIGNING_KEYS" in said
    assert "HERALD_PUBLIC_URL" not in said
    assert warning(load(tmp_path, extra="transactional: true\n"), {}) is None
    configured = {"HERALD_SIGNING_KEYS": "k1:0123456789abcdef", "HERALD_PUBLIC_URL": "https://u.x"}
    assert warning(load(tmp_path), configured) is None


# --- tampering, as a property -----------------------------------------------------------------

texts = st.text(st.characters(exclude_characters="\x1f", exclude_categories=["Cs"]), max_size=60)


@settings(max_examples=examples(300), deadline=None)
@given(
    mailbox=texts,
    scope=texts,
    campaign=texts,
    position=st.integers(min_value=0),
    replacement=st.sampled_from("ABCXYZabcxyz0189-_.=/+ \x00é"),
)
def test_any_altered_character_is_refused_or_reads_the_same_claim(
    mailbox: str, scope: str, campaign: str, position: int, replacement: str
) -> None:
    token = unsubscribe_token(KEYS, mailbox=mailbox, scope=scope, campaign=campaign)
    assert read_unsubscribe_token(KEYS, token).mailbox == mailbox
    index = position % len(token)
    altered = token[:index] + replacement + token[index + 1 :]
    if altered == token:
        return
    try:
        claim = read_unsubscribe_token(KEYS, altered)
    except BadToken:
        return
    # base64 ignores the unused low bits of a final character: such a spelling decodes to the
    # very bytes that were signed, so it may pass, but only ever as the same claim.
    assert (claim.mailbox, claim.scope, claim.campaign) == (mailbox, scope, campaign)


@settings(max_examples=examples(200), deadline=None)
@given(mailbox=texts, forged_mailbox=texts)
def test_a_claim_signed_with_another_key_or_spliced_is_refused(
    mailbox: str, forged_mailbox: str
) -> None:
    other = SigningKeys.parse("k2:attacker-secret-0123")  # same kid, another secret
    forged = unsubscribe_token(other, mailbox=forged_mailbox, scope="global", campaign="c")
    with pytest.raises(BadToken):
        read_unsubscribe_token(KEYS, forged)
    # A genuine signature on another claim does not carry over to this one.
    genuine = unsubscribe_token(KEYS, mailbox=mailbox, scope="list:a", campaign="c")
    spliced = ".".join(forged.split(".")[:3] + genuine.split(".")[3:])
    if spliced != genuine:
        with pytest.raises(BadToken):
            read_unsubscribe_token(KEYS, spliced)


@settings(max_examples=examples(300), deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_is_refused_cleanly(text: str) -> None:
    with contextlib.suppress(BadToken):
        read_unsubscribe_token(KEYS, text)


def test_a_removed_key_invalidates_its_tokens_and_a_listed_old_key_still_verifies() -> None:
    old = SigningKeys.parse("k1:old-secret-0123456789")
    token = unsubscribe_token(old, mailbox="ann@example.com", scope="list:n", campaign="n")
    assert read_unsubscribe_token(KEYS, token).kid == "k1"  # rotated: k2 signs, k1 verifies
    with pytest.raises(BadToken):
        read_unsubscribe_token(SigningKeys.parse("k2:new-secret-0123456789"), token)


def test_a_long_mailbox_still_fits_one_header_line(tmp_path: Path) -> None:
    long_local = "a" * 64
    long_domain = ".".join(["d" * 59] * 3) + ".example"
    path = tmp_path / "c.yaml"
    path.write_text(
        f"name: {'n' * 60}\nfrom: news@acme.example\naudience: [{long_local}@{long_domain}]\n"
        "steps: [{id: s, subject: S, text: T}]\n",
        encoding="utf-8",
    )
    loaded = load_campaign(path)
    payload = compose_all(loaded, LINKS)[0]
    assert len(loaded.spec.name) + 252 < 400  # the longest mailbox, a long campaign name
    assert b"List-Unsubscribe: <https://" in payload
