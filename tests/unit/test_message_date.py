"""dispatch.message_date: the Date stamped at sending, once, where build_message wrote it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from dispatch.message_date import date_value, has_date, with_date

STORED = (
    b"From: news@herald.test\r\nTo: ada@example.org\r\nSubject: Hello\r\n"
    b"Message-ID: <m@herald.test>\r\nMIME-Version: 1.0\r\n\r\nDate: in the body\r\n"
)
AT = datetime(2026, 3, 2, 9, 30, 15, 987654, tzinfo=UTC)


def test_the_date_goes_just_before_the_message_id_in_utc_whole_seconds() -> None:
    stamped = with_date(STORED, AT)
    assert stamped == STORED.replace(
        b"Message-ID:", b"Date: Mon, 02 Mar 2026 09:30:15 +0000\r\nMessage-ID:"
    )


def test_any_zone_is_written_as_utc_and_naive_means_utc() -> None:
    berlin_like = AT.astimezone(timezone(timedelta(hours=1)))
    assert date_value(berlin_like) == "Mon, 02 Mar 2026 09:30:15 +0000"
    assert date_value(AT.replace(tzinfo=None)) == "Mon, 02 Mar 2026 09:30:15 +0000"


def test_a_message_that_holds_a_date_is_unchanged() -> None:
    old = STORED.replace(b"Subject: Hello\r\n", b"Subject: Hello\r\nDATE: Tue, 4 Mar 2025\r\n")
    assert has_date(old)
    assert with_date(old, AT) is old


def test_a_date_in_the_body_or_a_folded_line_is_not_a_date_field() -> None:
    folded = STORED.replace(b"Subject: Hello\r\n", b"Subject: Hello\r\n date: folded\r\n")
    assert not has_date(STORED)
    assert not has_date(folded)


def test_without_a_message_id_the_date_leads_the_header() -> None:
    bare = b"Subject: x\r\n\r\nbody\r\n"
    assert with_date(bare, AT) == b"Date: Mon, 02 Mar 2026 09:30:15 +0000\r\n" + bare


@given(
    at=st.datetimes(timezones=st.just(UTC)),
    later=st.datetimes(timezones=st.just(UTC)),
)
def test_stamping_is_done_once(at: datetime, later: datetime) -> None:
    once = with_date(STORED, at)
    assert with_date(once, later) == once
    head = once.split(b"\r\n\r\n", 1)[0]
    assert [line for line in head.split(b"\r\n") if line.startswith(b"Date:")] == [
        f"Date: {date_value(at)}".encode()
    ]


# Lines built from the pieces that matter: a field named Date in any case, lookalikes, folds,
# and line ends of every kind.
_PIECES = st.sampled_from(
    [
        b"Date: x",
        b"date:",
        b"DaTe:",
        b" date: folded",
        b"Dates: no",
        b"X-Date: no",
        b"\r\n",
        b"\r\n\r\n",
        b"\n",
        b"\r",
        b"body date: no",
        b"",
        b"Subject: y",
    ]
)


@given(st.lists(_PIECES, max_size=12).map(b"".join))
def test_has_date_is_a_header_line_starting_with_date(message: bytes) -> None:
    """The single search agrees with the definition, line by line."""
    head = message.split(b"\r\n\r\n", 1)[0]
    expected = any(line[:5].lower() == b"date:" for line in head.split(b"\r\n"))
    assert has_date(message) == expected
