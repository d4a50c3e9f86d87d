"""build_message: headers, structure, encoding, determinism and header injection."""

from __future__ import annotations

import email
import email.policy
from datetime import UTC, datetime, timedelta, timezone
from email.message import EmailMessage, MIMEPart
from typing import Any

import pytest

from templates.errors import TemplateError
from templates.mime import build_message
from templates.render import RenderedContent

MESSAGE_ID = "<0123456789abcdef0123456789abcdef@news.example.com>"
KEY = "ab" * 32
DATE = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


def build(**overrides: Any) -> bytes:
    arguments: dict[str, Any] = {
        "sender": "news@news.example.com",
        "sender_name": "Example News",
        "recipient": "ada@example.org",
        "recipient_name": "Ada Lovelace",
        "reply_to": None,
        "content": RenderedContent(subject="Hello", text="Hi Ada\n", html="<p>Hi Ada</p>"),
        "message_id": MESSAGE_ID,
        "key": KEY,
        "date": DATE,
    }
    arguments.update(overrides)
    return build_message(**arguments)


def parse(raw: bytes) -> EmailMessage:
    message = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    return message


def body(part: MIMEPart) -> str:
    # The wire format is CRLF and the parser keeps it in decoded content.
    content = part.get_content()
    assert isinstance(content, str)
    return content.replace("\r\n", "\n")


def test_headers() -> None:
    message = parse(
        build(reply_to="help@news.example.com", extra_headers={"X-Campaign": "welcome"})
    )

    assert message["From"] == "Example News <news@news.example.com>"
    assert message["To"] == "Ada Lovelace <ada@example.org>"
    assert message["Reply-To"] == "help@news.example.com"
    assert message["Subject"] == "Hello"
    assert message["Date"] == "Tue, 04 Mar 2025 05:06:07 +0000"
    assert message["Message-ID"] == MESSAGE_ID
    assert message["MIME-Version"] == "1.0"
    assert message["X-Herald-Key"] == KEY
    assert message["X-Campaign"] == "welcome"


def test_optional_headers_are_absent_when_not_given() -> None:
    message = parse(build(sender_name=None, recipient_name=None))

    assert message["From"] == "news@news.example.com"
    assert message["To"] == "ada@example.org"
    assert "Reply-To" not in message


def test_date_keeps_its_offset_and_naive_means_utc() -> None:
    plus_two = datetime(2025, 3, 4, 7, 6, 7, tzinfo=timezone(timedelta(hours=2)))

    assert parse(build(date=plus_two))["Date"] == "Tue, 04 Mar 2025 07:06:07 +0200"
    naive = parse(build(date=DATE.replace(tzinfo=None)))
    assert naive["Date"] == "Tue, 04 Mar 2025 05:06:07 +0000"


def test_text_and_html_form_multipart_alternative_in_that_order() -> None:
    message = parse(build())

    assert message.get_content_type() == "multipart/alternative"
    parts = list(message.iter_parts())
    assert [part.get_content_type() for part in parts] == ["text/plain", "text/html"]
    assert all(part.get_content_charset() == "utf-8" for part in parts)
    assert [body(part) for part in parts] == ["Hi Ada\n", "<p>Hi Ada</p>\n"]
    # MIME-Version belongs on the message only.
    assert all("MIME-Version" not in part for part in parts)


def test_text_only_is_a_single_text_part() -> None:
    message = parse(build(content=RenderedContent(subject="s", text="Only text\n", html=None)))

    assert message.get_content_type() == "text/plain"
    assert not message.is_multipart()
    assert body(message) == "Only text\n"


def test_boundary_is_derived_from_message_id() -> None:
    first = parse(build()).get_boundary()
    second = parse(build(message_id="<other@news.example.com>")).get_boundary()

    assert first is not None and first.startswith("==herald-") and first.endswith("==")
    assert first != second


def test_non_ascii_round_trips_and_headers_stay_ascii() -> None:
    raw = build(
        sender_name="Zoë’s Café",
        recipient_name="Åsa Öberg, Jr.",
        content=RenderedContent(
            subject="Grüße — 你好",
            text="Grüße, Åsa — 你好\n",
            html="<p>Grüße, Åsa — 你好</p>",
        ),
        extra_headers={"X-Note": "naïve"},
    )
    message = parse(raw)

    assert raw.isascii()  # 7-bit clean: no 8BITMIME or SMTPUTF8 needed
    assert message["Subject"] == "Grüße — 你好"
    assert message["From"].addresses[0].display_name == "Zoë’s Café"
    assert message["To"].addresses[0].display_name == "Åsa Öberg, Jr."
    assert message["To"].addresses[0].addr_spec == "ada@example.org"
    assert message["X-Note"] == "naïve"
    text, html = (body(part) for part in message.iter_parts())
    assert text == "Grüße, Åsa — 你好\n"
    assert html == "<p>Grüße, Åsa — 你好</p>\n"


def test_quoted_local_part_is_kept() -> None:
    message = parse(build(recipient='"ada lovelace"@example.org'))

    assert message["To"].addresses[0].addr_spec == '"ada lovelace"@example.org'


def test_long_ascii_headers_are_written_verbatim() -> None:
    url = "<https://news.example.com/unsubscribe/" + "x" * 150 + ">"
    raw = build(extra_headers={"List-Unsubscribe": url})

    assert f"List-Unsubscribe: {url}\r\n".encode() in raw
    assert parse(raw)["List-Unsubscribe"] == url


def test_every_line_ends_in_crlf() -> None:
    raw = build(content=RenderedContent(subject="s", text="a\nb\n\nc", html="<p>a</p>\n<p>b</p>"))

    assert raw.endswith(b"\r\n")
    assert b"\n" not in raw.replace(b"\r\n", b"")
    assert b"\r" not in raw.replace(b"\r\n", b"")
    assert all(len(line) <= 998 for line in raw.split(b"\r\n"))


def test_long_body_lines_are_quoted_printable() -> None:
    long_line = "word " * 300
    raw = build(content=RenderedContent(subject="s", text=long_line, html=None))
    message = parse(raw)

    assert message["Content-Transfer-Encoding"] == "quoted-printable"
    assert body(message) == long_line + "\n"
    assert all(len(line) <= 998 for line in raw.split(b"\r\n"))


def test_identical_inputs_give_identical_bytes() -> None:
    assert build() == build()
    assert build() != build(key="cd" * 32)


@pytest.mark.parametrize(
    "overrides",
    [
        {"sender_name": "Evil\r\nBcc: victim@example.com"},
        {"recipient_name": "Ada\nX-Injected: 1"},
        {"content": RenderedContent(subject="Hi\r\nBcc: victim@example.com", text="t", html=None)},
        {"content": RenderedContent(subject="Hi\u2028there", text="t", html=None)},
        {"extra_headers": {"X-Campaign": "a\r\nBcc: victim@example.com"}},
        {"extra_headers": {"X-Bad\r\nBcc": "a"}},
        {"extra_headers": {"X Bad": "a"}},
        {"reply_to": "a@example.com\r\nBcc: victim@example.com"},
        {"key": "k\nBcc: victim@example.com"},
    ],
)
def test_header_injection_is_refused(overrides: dict[str, Any]) -> None:
    with pytest.raises(TemplateError, match="header injection"):
        build(**overrides)


@pytest.mark.parametrize("name", ["From", "to", "Subject", "X-Herald-Key", "Content-Type"])
def test_extra_headers_cannot_override_own_headers(name: str) -> None:
    with pytest.raises(TemplateError, match="override"):
        build(extra_headers={name: "x"})


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"recipient": "not-an-address"}, "invalid email address"),
        ({"recipient": "jöhn@example.org"}, "must be ASCII"),
        ({"message_id": "no-brackets@example.com"}, "message-id"),
        ({"extra_headers": {"X-Long": "y" * 1000}}, "longer than 998"),
    ],
)
def test_invalid_inputs_are_refused(overrides: dict[str, Any], expected: str) -> None:
    with pytest.raises(TemplateError, match=expected):
        build(**overrides)
