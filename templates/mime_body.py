"""The body of a message: one text part, or text and HTML as multipart/alternative.

Bodies are kept 7-bit clean (quoted-printable when they are not plain short-lined ASCII), and
the boundary is derived from the Message-ID so identical inputs give identical bytes.
"""

from __future__ import annotations

import binascii
import hashlib
from typing import Literal

from templates.render import RenderedContent
from templates.wire_lines import MAX_LINE, utf8

TransferEncoding = Literal["7bit", "quoted-printable"]

_CHARSET_PARAM = 'charset="utf-8"'


def boundary_for(message_id: str) -> str:
    # Quoted-printable never contains "==" and 7-bit text would need this exact hash, so the
    # boundary cannot collide with a body line.
    return "==herald-" + hashlib.sha256(message_id.encode()).hexdigest()[:24] + "=="


def message_body(content: RenderedContent, *, boundary: str) -> bytes:
    """The body, with the Content-Type and Content-Transfer-Encoding headers that lead it."""
    if content.html is None:
        return _text_part(content.text, "plain")
    # Text first: clients show the last alternative they can display.
    delimiter = f"--{boundary}\r\n".encode("ascii")
    return b"".join(
        (
            f'Content-Type: multipart/alternative;\r\n boundary="{boundary}"\r\n\r\n'.encode(
                "ascii"
            ),
            delimiter,
            _text_part(content.text, "plain"),
            b"\r\n",
            delimiter,
            _text_part(content.html, "html"),
            f"\r\n--{boundary}--\r\n".encode("ascii"),
        )
    )


def _text_part(text: str, subtype: str) -> bytes:
    encoding, data = _encode_text(text)
    return (
        f"Content-Type: text/{subtype}; {_CHARSET_PARAM}\r\n"
        f"Content-Transfer-Encoding: {encoding}\r\n\r\n"
    ).encode("ascii") + data


def _encode_text(text: str) -> tuple[TransferEncoding, bytes]:
    """The body as CRLF lines ending in CRLF, 7bit if it can be, else quoted-printable."""
    data = utf8(text)
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if not data.endswith(b"\n"):
        data += b"\n"
    if (
        data.isascii()
        and b"\0" not in data  # RFC 2045: 7bit data holds no NUL
        and (len(data) <= MAX_LINE or max(map(len, data.split(b"\n"))) <= MAX_LINE)
    ):
        return "7bit", data.replace(b"\n", b"\r\n")
    # Soft line breaks keep lines at 76 characters; trailing whitespace and a lone "." are
    # encoded.
    encoded = binascii.b2a_qp(data, quotetabs=False, istext=True, header=False)
    return "quoted-printable", encoded.replace(b"\n", b"\r\n")
