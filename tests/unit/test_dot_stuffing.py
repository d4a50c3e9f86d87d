"""``dot_stuffed``: what DATA transmits. No line of any message can end it early, and the
receiver's rule (drop the first dot of a line that starts with one) gives back exactly the
message's wire form, for any bytes at all (hypothesis, hostile to the rule: dots, lone CR and
LF, a ``.`` line, a message that is itself ``\\r\\n.\\r\\n``)."""

from __future__ import annotations

import re

from hypothesis import example, given

from dispatch.wire_form import dot_stuffed, wire_form
from tests.support.hostile import MESSAGE_TEXT

END = b"\r\n.\r\n"


def unstuffed(transmitted: bytes) -> bytes:
    """What a receiver stores (RFC 5321 §4.5.2): the text before the ending line, with the
    first dot of every line that starts with one removed."""
    assert transmitted.endswith(b".\r\n")
    return re.sub(rb"(?m)^\.", b"", transmitted[: -len(b".\r\n")])


@given(MESSAGE_TEXT)
@example(b"")
@example(b".")
@example(b"\r\n.\r\n")
@example(b"a\r\n.\r\nMAIL FROM:<x@y>\r\n")
def test_no_line_ends_data_early_and_the_receiver_gets_the_wire_form_back(raw: bytes) -> None:
    transmitted = dot_stuffed(raw)
    assert transmitted.endswith(END)
    assert transmitted.find(END) == len(transmitted) - len(END)  # the only end is the end
    assert not transmitted.startswith(b".\r\n")
    assert unstuffed(transmitted) == wire_form(raw)


def test_each_line_starting_with_a_dot_gets_one_more() -> None:
    message = b"Subject: x\r\n\r\n.leading dot\r\n..two\r\n"
    assert dot_stuffed(message) == b"Subject: x\r\n\r\n..leading dot\r\n...two\r\n.\r\n"
