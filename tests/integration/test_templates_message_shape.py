"""Data never changes a message's shape (issue 7, items 1 and 15).

Every header value that can come from an audience (subject, recipient display name, recipient
address) or from a campaign (sender display name, reply-to) is fed hostile Unicode: line breaks,
NUL and other controls, encoded-word syntax, quotes, brackets, Rich markup, very long words. The
builder either refuses the value with our error (control characters, an address that reads as an
encoded word) or writes a message that reads back to exactly the intended headers, each value
intact, every line CRLF-terminated and at most 998 octets, and the bodies intact. Then the CSV
value of the issue goes through the real CLI and a real SMTP server.
"""

from __future__ import annotations

import csv
import re
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dispatch.message_date import with_date
from templates.errors import TemplateError
from templates.mime import build_message
from templates.render import RenderedContent
from tests.support.examples import examples
from tests.support.factories import invoke
from tests.support.mail_reading import mailboxes, parse
from tests.support.smtp_server import LedgerSMTPServer

INJECTION = (
    "=?utf-8?q?pro=0ABcc:_attacker@evil.example=0A=0A<a_href=3Dhttp://evil.example>click</a>?="
)
MESSAGE_ID = "<0123456789abcdef@news.example.com>"
KEY = "ab" * 32
DATE = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
# C0 but TAB, DEL, C1 and the Unicode line and paragraph separators.
FORBIDDEN = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")

HOSTILE_PIECES = [
    "\r\n", "\n", "\r", "\x00", "\x07", "\x1b[31m", "\x7f", "\x85", "\u2028", "\u2029", "\t",
    INJECTION, "=?", "?=", "=?utf-8?q?a?=", "=?utf-8?b?QmNjOiB4?=", "=?iso-8859-1?q?=E9?=",
    "Bcc: x@evil.example", '"', "\\", "'", "<", ">", "(", ")", "[", "]", "[/]", "[bold]",
    "[/red][conceal]", "@", ",", ";", ":", " ", "  ", "Grüße", "你好", "😀", "\u200d", "\ufeff",
    "\xa0", "w" * 80, "x" * 1200, "é" * 400, "=" * 50,
]  # fmt: skip
any_text = st.characters(exclude_categories=["Cs"])  # UTF-8 cannot hold lone surrogates
hostile_texts = st.lists(
    st.one_of(st.sampled_from(HOSTILE_PIECES), st.text(any_text, max_size=12)), max_size=8
).map("".join)
addresses = st.sampled_from(
    [
        "ada@example.org", '"ada lovelace"@example.org', "a@[192.0.2.1]", "o'brien@example.org",
        "=?utf-8?q?a?=@example.org", '"=?utf-8?q?x=0Ay?="@example.org',
    ]
)  # fmt: skip
reply_tos = st.one_of(st.none(), addresses)
bodies = st.text(any_text, max_size=60)


def _wire_lines_ok(raw: bytes) -> None:
    assert raw.endswith(b"\r\n")
    assert b"\n" not in raw.replace(b"\r\n", b"")
    assert b"\r" not in raw.replace(b"\r\n", b"")
    assert all(len(line) <= 998 for line in raw.split(b"\r\n"))
    assert raw.isascii()


def _expected_header_names(reply_to: str | None, html: str | None) -> list[str]:
    return [
        "From",
        "To",
        *(["Reply-To"] if reply_to is not None else []),
        *("Subject", "Date", "Message-ID", "MIME-Version", "X-Herald-Key", "Content-Type"),
        *(["Content-Transfer-Encoding"] if html is None else []),
    ]


def _body_texts(message: EmailMessage) -> list[tuple[str, str]]:
    parts = list(message.iter_parts()) if message.is_multipart() else [message]
    texts = []
    for part in parts:
        content = part.get_content()
        assert isinstance(content, str)
        texts.append((part.get_content_type(), content.replace("\r\n", "\n")))
    return texts


def _as_sent(text: str) -> str:
    """A body as it reads back: CRLF and CR become LF, and it ends with a line break."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text if text.endswith("\n") else text + "\n"


@settings(max_examples=examples(500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    subject=hostile_texts,
    recipient_name=st.one_of(st.none(), hostile_texts),
    sender_name=st.one_of(st.none(), hostile_texts),
    recipient=addresses,
    reply_to=reply_tos,
    text=bodies,
    html=st.one_of(st.none(), bodies),
)
@example(
    subject=f"Your offer {INJECTION}",
    recipient_name=INJECTION,
    sender_name=None,
    recipient="ada@example.org",
    reply_to=None,
    text="t",
    html=None,
)
@example(
    subject="x" * 3000,
    recipient_name="Александра Константиновна Преображенская " * 3,
    sender_name="王" * 90,
    recipient="ada@example.org",
    reply_to="help@example.org",
    text="t",
    html="<p>h</p>",
)
@example(  # one ASCII word too long to fold: found by this test, now encoded
    subject="",
    recipient_name="y" * 1200,
    sender_name="x" * 1000,
    recipient="ada@example.org",
    reply_to=None,
    text="",
    html=None,
)
def test_data_is_refused_or_arrives_intact(
    subject: str,
    recipient_name: str | None,
    sender_name: str | None,
    recipient: str,
    reply_to: str | None,
    text: str,
    html: str | None,
) -> None:
    arguments: dict[str, Any] = {
        "sender": "news@news.example.com",
        "sender_name": sender_name,
        "recipient": recipient,
        "recipient_name": recipient_name,
        "reply_to": reply_to,
        "content": RenderedContent(subject=subject, text=text, html=html),
        "message_id": MESSAGE_ID,
        "key": KEY,
    }
    header_values = [subject, recipient_name or "", sender_name or "", recipient, reply_to or ""]
    refusable = any(FORBIDDEN.search(value) for value in header_values) or any(
        "=?" in address for address in (recipient, reply_to or "")
    )
    try:
        # As the worker sends it: the stored message, stamped with the Date of sending.
        raw = with_date(build_message(**arguments), DATE)
    except TemplateError as exc:
        assert refusable, f"a value without control characters was refused: {exc}"
        assert re.search("header injection|reads as an RFC 2047 encoded word", str(exc)), exc
        return
    assert not refusable, "a control character or an encoded-word address was let through"

    _wire_lines_ok(raw)
    message = parse(raw)
    assert [name for name, _ in message.raw_items()] == _expected_header_names(reply_to, html)
    # Readers drop the whitespace that starts an unstructured header (Herald's renderer strips
    # the subject anyway).
    assert str(message["Subject"]) == subject.lstrip(" \t")
    assert mailboxes(message, "From") == [(sender_name or "", "news@news.example.com")]
    (to,) = mailboxes(message, "To")
    assert to[0] == (recipient_name or "")
    assert to[1].replace('"', "") == recipient.replace('"', "")
    if reply_to is not None:
        assert [a[1] for a in mailboxes(message, "Reply-To")] == [reply_to]
    assert message["Bcc"] is None
    assert message["Cc"] is None
    expected_bodies = [("text/plain", _as_sent(text))]
    if html is not None:
        expected_bodies.append(("text/html", _as_sent(html)))
    assert _body_texts(message) == expected_bodies


def test_the_issue_value_arrives_literally_as_subject_and_display_name() -> None:
    raw = build_message(
        sender="news@news.example.com",
        sender_name=None,
        recipient="ada@example.org",
        recipient_name=INJECTION,
        reply_to=None,
        content=RenderedContent(subject=f"Hi {INJECTION}", text="t", html=None),
        message_id=MESSAGE_ID,
        key=KEY,
    )
    message = parse(raw)

    assert message["Subject"] == f"Hi {INJECTION}"
    assert mailboxes(message, "To") == [(INJECTION, "ada@example.org")]
    assert b"Bcc" not in raw
    assert b"evil.example>click" not in raw


@pytest.mark.parametrize("character", ["\x00", "\x01", "\x1b", "\x7f", "\x85", "\u2028", "\r"])
@pytest.mark.parametrize("field", ["subject", "recipient_name"])
def test_a_control_character_from_data_is_refused(field: str, character: str) -> None:
    content = RenderedContent(subject="Hi", text="t", html=None)
    arguments: dict[str, Any] = {"recipient_name": "Ada"}
    if field == "subject":
        content = RenderedContent(subject=f"Hi{character}there", text="t", html=None)
    else:
        arguments["recipient_name"] = f"Ada{character}Lovelace"
    with pytest.raises(TemplateError, match="header injection"):
        build_message(
            sender="news@news.example.com",
            sender_name=None,
            recipient="ada@example.org",
            reply_to=None,
            content=content,
            message_id=MESSAGE_ID,
            key=KEY,
            **arguments,
        )


# --- through the CLI and a real SMTP server ------------------------------------------------

CAMPAIGN = """\
name: injection
from: "Herald Tests <news@herald.test>"
audience: people.csv
steps:
  - id: welcome
    subject: "Hello {{ offer }}"
    text: "Hi {{ name }}"
"""


def _write(folder: Path, rows: list[dict[str, str]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "people.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["email", "name", "offer"])
        writer.writeheader()
        writer.writerows(rows)
    path = folder / "campaign.yaml"
    path.write_text(CAMPAIGN)
    return path


def test_an_encoded_word_in_a_csv_value_arrives_as_literal_subject_text(
    tmp_path: Path, db_url: str, smtp_server: LedgerSMTPServer
) -> None:
    path = _write(tmp_path / "c", [{"email": "ada@example.org", "name": "Ada", "offer": INJECTION}])
    validated = invoke("validate", str(path))
    assert validated.exit_code == 0, validated.output
    launched = invoke("launch", str(path), "--database-url", db_url)
    assert launched.exit_code == 0, launched.output
    worked = invoke(
        "worker", "--until-idle", "--database-url", db_url,
        "--smtp-url", f"smtp://{smtp_server.host}:{smtp_server.port}",
        "--poll", "0.05", "--retry-base", "0.01", "--idle-horizon", "0",
    )  # fmt: skip
    assert worked.exit_code == 0, worked.output

    (raw,) = smtp_server.messages()
    message = parse(raw)
    assert message["Subject"] == f"Hello {INJECTION}"
    assert message["Bcc"] is None
    assert [name for name, _ in message.raw_items()] == _expected_header_names(None, None)
    assert message.get_content().strip() == "Hi Ada"
    assert b"evil.example>click" not in raw


@pytest.mark.parametrize("value", ["pro\x00mo", "pro\x1bmo", "pro\u2028mo", "pro\x85mo"])
def test_validate_refuses_a_control_character_in_a_subject_from_data(
    tmp_path: Path, value: str
) -> None:
    path = _write(tmp_path / "c", [{"email": "ada@example.org", "name": "Ada", "offer": value}])

    result = invoke("validate", str(path))

    assert result.exit_code == 2, result.output
    assert "subject contains" in result.output
    assert "header injection" in result.output
    assert "Traceback" not in result.output
