"""dispatch.smtp_pipelining.parse_replies: SMTP replies read off a byte stream however the network
cut it, and anything that is not an SMTP reply refused, never guessed at."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.smtp_pipelining import MAX_LINE_LENGTH, MalformedReply, parse_replies

_CODE = st.integers(min_value=200, max_value=599)
# Reply text as a server may write it: printable ASCII and tabs, no line breaks, trimmed
# (the parser trims each line, as aiosmtplib does).
_LINE = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40).map(
    str.strip
)
_REPLY = st.tuples(_CODE, st.lists(_LINE, min_size=1, max_size=4))


def wire(code: int, lines: list[str], ending: bytes = b"\r\n") -> bytes:
    out = b""
    for i, line in enumerate(lines):
        separator = b" " if i == len(lines) - 1 else b"-"
        out += str(code).encode() + (separator + line.encode() if line else separator) + ending
    return out


def fed(data: bytes, cuts: list[int]) -> list[tuple[int, str]]:
    """The replies parsed when ``data`` arrives cut at ``cuts``, parsing after every piece."""
    buffer = bytearray()
    replies: list[tuple[int, str]] = []
    start = 0
    for end in [*sorted(set(cuts)), len(data)]:
        buffer.extend(data[start:end])
        start = end
        replies.extend((r.code, r.message) for r in parse_replies(buffer))
    assert not buffer, "a complete stream leaves nothing behind"
    return replies


@given(
    st.lists(_REPLY, min_size=1, max_size=5),
    st.lists(st.integers(min_value=0, max_value=400)),
    st.sampled_from([b"\r\n", b"\n"]),
)
def test_replies_cut_anywhere_are_read_whole_and_in_order(
    replies: list[tuple[int, list[str]]], cuts: list[int], ending: bytes
) -> None:
    data = b"".join(wire(code, lines, ending) for code, lines in replies)
    cuts = [c for c in cuts if c < len(data)]
    assert fed(data, cuts) == [(code, "\n".join(lines)) for code, lines in replies]


@given(_REPLY, st.integers(min_value=0, max_value=10_000))
def test_a_reply_not_yet_complete_is_left_in_the_buffer(
    reply: tuple[int, list[str]], cut: int
) -> None:
    data = wire(*reply)
    cut = cut % len(data)  # strictly inside: the last line's end has not arrived
    buffer = bytearray(data[:cut])
    assert parse_replies(buffer) == []
    assert bytes(buffer) == data[:cut]


@given(st.binary(max_size=300))
def test_any_bytes_are_replies_or_refused_never_anything_else(data: bytes) -> None:
    buffer = bytearray(data)
    try:
        replies = parse_replies(buffer)
    except MalformedReply:
        return
    consumed = data[: len(data) - len(buffer)]
    assert bytes(buffer) == data[len(consumed) :]  # only whole replies are taken off the front
    assert (consumed == b"") == (replies == [])
    if replies:
        assert consumed.endswith(b"\n")
        again = bytearray(consumed)
        assert parse_replies(again) == replies
        assert not again


@pytest.mark.parametrize(
    "data",
    [
        b"hello\r\n",  # no code
        b"25 short\r\n",
        b"2x0 letters\r\n",
        b"250-first\r\n451 second code inside one reply\r\n",
        b"250_underscore is no separator\r\n",
        b"250 ok\r\n\r\n",  # an empty line after a reply
        b"250-" + b"x" * MAX_LINE_LENGTH + b"\r\n",
        b"250-" + b"x" * (MAX_LINE_LENGTH + 10),  # too long even before its end arrives
        b"250-ok\r\n" * 10_000,  # a reply that never ends
    ],
)
def test_what_is_not_an_smtp_reply_is_refused(data: bytes) -> None:
    with pytest.raises(MalformedReply):
        parse_replies(bytearray(data))


def test_a_bare_code_and_multiline_text() -> None:
    buffer = bytearray(b"250\r\n250-one\r\n250-two\r\n250 three\r\n354")
    replies = parse_replies(buffer)
    assert [(r.code, r.message) for r in replies] == [(250, ""), (250, "one\ntwo\nthree")]
    assert buffer == bytearray(b"354")
