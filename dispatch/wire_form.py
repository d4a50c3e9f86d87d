"""A message's bytes as SMTP DATA sends them: CRLF line endings and a final CRLF.

Apart from DKIM signing (dispatch.dkim_signing signs exactly these bytes) so that a worker
without DKIM keys never imports dkimpy and cryptography just to send.
"""

from __future__ import annotations

import re

_LINE_ENDING = re.compile(rb"\r\n|\r|\n")
_LINE_STARTING_WITH_A_DOT = re.compile(rb"(?m)^\.")


def wire_form(message: bytes) -> bytes:
    """``message`` with CRLF line endings and a final CRLF: exactly what SMTP DATA sends.

    aiosmtplib normalises lone CR and LF the same way before transmitting; doing it first means
    the bytes signed are the bytes sent.
    """
    crlf = message.count(b"\r\n")
    if message.count(b"\r") == crlf and message.count(b"\n") == crlf:
        # Already CRLF throughout (every rendered payload): three scans, no copy.
        normalised = message
    else:
        normalised = _LINE_ENDING.sub(b"\r\n", message)
    return normalised if normalised.endswith(b"\r\n") else normalised + b"\r\n"


def dot_stuffed(message: bytes) -> bytes:
    """What DATA transmits for ``message`` (its ``wire_form``): every line that starts with a
    dot gets another (RFC 5321 §4.5.2), then the ending ``.`` line. The receiver removes the
    added dots, so no line of the message can end it early."""
    return _LINE_STARTING_WITH_A_DOT.sub(b"..", wire_form(message)) + b".\r\n"
